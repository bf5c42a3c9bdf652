"""What an exporter returns: :class:`ExportedArtifact`, and how its signature is measured.

Formats, Triton platforms and file names::

    torchscript  pytorch_libtorch  model.pt
    onnx         onnxruntime_onnx  model.onnx   (+ model.onnx.data above 2 GB)
    tensorrt     tensorrt_plan     model.plan

``signature`` holds the names, Triton data types and dims as the artifact has them,
with the batch dim removed when ``batch_dynamic`` (so it goes straight into a
config.pbtxt with ``max_batch_size > 0``); :meth:`ExportedArtifact.signature_for`
gives the dims for any ``max_batch_size``. ``name_map`` maps the source's readable
names (``input_ids``, ``last_hidden_state``) to the artifact's names, which differ
for TorchScript (``last_hidden_state__0``; see :mod:`mmelocal.builder.torch2torchscript`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import FORMATS
from mmelocal.builder.tensors import Signature, TensorSpec, numpy_to_triton, torch_to_triton
from mmelocal.errors import ExportError


@dataclass(frozen=True, kw_only=True)
class ExportedArtifact:
    """One exported model file and the signature read from it."""

    path: Path
    format: str
    signature: Signature
    batch_dynamic: bool = True
    name_map: Mapping[str, str] = field(default_factory=dict)
    extra_files: tuple[Path, ...] = ()
    copied_from_source: bool = False
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ExportError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        object.__setattr__(self, "path", Path(self.path))
        object.__setattr__(self, "extra_files", tuple(Path(p) for p in self.extra_files))

    @property
    def platform(self) -> str:
        """Triton's platform for ``format`` (``FORMATS``'s)."""
        return FORMATS[self.format][0]

    @property
    def file_name(self) -> str:
        """The name Triton expects in the version folder (``model.pt`` ...)."""
        return FORMATS[self.format][1]

    def artifact_name(self, readable: str) -> str:
        """The artifact's name for a source tensor name (identity when not renamed)."""
        return self.name_map.get(readable, readable)

    def signature_for(self, max_batch_size: int) -> Signature:
        """The config signature: batch dim excluded for ``max_batch_size > 0``, else -1."""
        if max_batch_size > 0:
            if not self.batch_dynamic:
                raise ExportError(
                    f"{self.path.name} has a fixed batch axis; build it with max_batch_size=0"
                )
            return self.signature
        if not self.batch_dynamic:
            return self.signature
        return Signature(
            inputs=tuple(_with_batch(s) for s in self.signature.inputs),
            outputs=tuple(_with_batch(s) for s in self.signature.outputs),
        )


def _with_batch(spec: TensorSpec) -> TensorSpec:
    return TensorSpec(spec.name, spec.data_type, (-1, *spec.dims))


def measure_signature(
    run: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    first: Mapping[str, Any],
    second: Mapping[str, Any],
    *,
    input_names: Mapping[str, str],
    output_names: Mapping[str, str],
) -> tuple[Signature, bool]:
    """Signature of an artifact from two runs on inputs of different batch/sequence sizes.

    ``run`` takes and returns tensors keyed by artifact name; ``input_names`` and
    ``output_names`` map readable source names to artifact names, in order. Axes whose
    size differs between the runs are ``-1``; dtypes are those observed. Returns the
    signature (batch dim removed when every tensor's first axis is dynamic) and that flag.
    """
    in1 = {input_names[k]: v for k, v in first.items()}
    in2 = {input_names[k]: v for k, v in second.items()}
    out1, out2 = run(in1), run(in2)
    inputs = tuple(_spec(n, in1[n], in2[n]) for n in input_names.values())
    missing = [n for n in output_names.values() if n not in out1 or n not in out2]
    if missing:
        raise ExportError(f"the exported model did not return outputs {missing}")
    outputs = tuple(_spec(n, out1[n], out2[n]) for n in output_names.values())
    full = Signature(inputs=inputs, outputs=outputs)
    tensors = full.inputs + full.outputs
    batch_dynamic = all(s.dims and s.dims[0] == -1 for s in tensors)
    return (full.without_batch() if batch_dynamic else full), batch_dynamic


def _spec(name: str, a: Any, b: Any) -> TensorSpec:
    shape_a = tuple(int(d) for d in a.shape)
    shape_b = tuple(int(d) for d in b.shape)
    if len(shape_a) != len(shape_b):
        raise ExportError(
            f"tensor {name!r} changes rank between runs ({list(shape_a)} vs {list(shape_b)})"
        )
    dims = tuple(x if x == y else -1 for x, y in zip(shape_a, shape_b, strict=True))
    dtype = a.dtype
    data_type = (
        torch_to_triton(dtype) if str(dtype).startswith("torch.") else numpy_to_triton(dtype)
    )
    return TensorSpec(name, data_type, dims)


__all__ = ["FORMATS", "ExportedArtifact", "measure_signature"]
