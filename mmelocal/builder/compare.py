"""Compare a config.pbtxt's inputs and outputs with the artifact it serves.

ONNX graphs record names, data types and dims, so everything is compared; TorchScript
records only the ``forward`` argument names (ranks and dtypes are known only when the
model runs), so the input count and names are compared; TensorRT plans need the GPU
they were built for and are not opened. Findings are plain data for the validator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from mmelocal.builder.tensors import (
    Signature,
    TensorSpec,
    inspect_onnx,
    torchscript_forward_arguments,
)
from mmelocal.errors import MissingDependencyError, UserInputError


class Finding(NamedTuple):
    """One disagreement between config and artifact."""

    code: str
    message: str
    severity: str = "error"


def check_artifact(cfg: Any, artifact: Path) -> list[Finding]:
    """Findings for ``artifact`` (model.onnx / model.pt / model.plan) against ``cfg``."""
    try:
        if artifact.suffix == ".onnx" and artifact.is_file():
            signature, _ = inspect_onnx(artifact, strip_batch=False)
            return compare_onnx(cfg, signature)
        if artifact.suffix == ".pt" and cfg.platform == "pytorch_libtorch":
            arguments = torchscript_forward_arguments(artifact)
            return compare_torchscript(
                cfg,
                tuple(name for name, _ in arguments),
                dict_input=[kind for _, kind in arguments] == ["DictType"],
            )
        if artifact.suffix == ".plan":
            return [
                Finding(
                    "artifact.unchecked",
                    "TensorRT plans are not inspected here (they need the GPU they were "
                    "built for); run mmelocal check on a GPU",
                    "info",
                )
            ]
    except MissingDependencyError as exc:
        return [Finding("artifact.unchecked", str(exc), "warning")]
    except UserInputError as exc:
        return [Finding("artifact.unreadable", str(exc).replace(f"{artifact}", artifact.name))]
    return []


def config_specs(tensors: Any) -> list[TensorSpec | None]:
    """TensorSpecs of config inputs or outputs (None for a tensor with a ``reshape``)."""
    from tritonclient.grpc import model_config_pb2 as pb

    specs: list[TensorSpec | None] = []
    for t in tensors:
        if t.HasField("reshape") or t.data_type == 0 or not t.dims:
            specs.append(None)
            continue
        specs.append(TensorSpec(t.name, pb.DataType.Name(t.data_type), tuple(t.dims)))
    return specs


def compare_onnx(cfg: Any, model: Signature) -> list[Finding]:
    """Compare config tensors with the ONNX graph's (``model`` holds the full graph dims)."""
    out: list[Finding] = []
    model_inputs = {s.name: s for s in model.inputs}
    model_outputs = {s.name: s for s in model.outputs}
    config_inputs = {t.name for t in cfg.input}
    for missing in sorted(set(model_inputs) - config_inputs):
        out.append(
            Finding(
                "io.missing_input",
                f"model input {missing!r} is not in the config "
                f"(config inputs: {sorted(config_inputs)})",
            )
        )
    for kind, tensors, actual in (
        ("input", cfg.input, model_inputs),
        ("output", cfg.output, model_outputs),
    ):
        for spec in config_specs(tensors):
            if spec is None:
                continue
            found = actual.get(spec.name)
            if found is None:
                out.append(
                    Finding(
                        f"io.unknown_{kind}",
                        f"config {kind} {spec.name!r} is not a model {kind} "
                        f"(model {kind}s: {sorted(actual)})",
                    )
                )
                continue
            out.extend(_compare_tensor(kind, spec, found, cfg.max_batch_size))
    return out


def _compare_tensor(kind: str, spec: TensorSpec, found: TensorSpec, mbs: int) -> list[Finding]:
    out: list[Finding] = []
    label = f"{kind} {spec.name!r}"
    if spec.data_type != found.data_type:
        out.append(
            Finding(
                "io.dtype", f"{label}: config says {spec.data_type}, model has {found.data_type}"
            )
        )
    model_dims = found.dims
    if mbs > 0:
        if not model_dims:
            out.append(
                Finding(
                    "io.rank",
                    f"{label} has rank 0 in the model: no batch dim for max_batch_size={mbs}",
                )
            )
            return out
        if model_dims[0] != -1:
            out.append(
                Finding(
                    "io.batch_dim_fixed",
                    f"{label}: the model's first dim is fixed to {model_dims[0]} but "
                    f"max_batch_size={mbs} needs it dynamic; re-export with a dynamic batch "
                    "axis or set max_batch_size: 0",
                )
            )
        model_dims = model_dims[1:]
    if len(spec.dims) != len(model_dims):
        batch = " plus the batch dim" if mbs > 0 else ""
        out.append(
            Finding(
                "io.rank",
                f"{label}: config has rank {len(spec.dims)}{batch}, the model has rank "
                f"{len(found.dims)} {list(found.dims)}",
            )
        )
    elif any(m != -1 and c != m for c, m in zip(spec.dims, model_dims, strict=True)):
        out.append(
            Finding(
                "io.dims",
                f"{label}: config dims {list(spec.dims)} do not fit the model's {list(model_dims)}",
            )
        )
    return out


def compare_torchscript(
    cfg: Any, forward_args: tuple[str, ...], *, dict_input: bool = False
) -> list[Finding]:
    """Compare config inputs with ``forward``'s arguments; outputs by Triton's naming rule.

    ``dict_input``: ``forward`` takes one ``Dict[str, Tensor]``, into which the PyTorch
    backend puts every config input by its name, so any inputs fit."""
    names = [t.name for t in cfg.input]
    if dict_input:
        return _compare_outputs(cfg)
    if len(names) != len(forward_args):
        return [
            Finding(
                "io.input_count",
                f"config has {len(names)} inputs, forward() takes {len(forward_args)} "
                f"({list(forward_args)})",
            )
        ]
    out: list[Finding] = []
    indices = _indices(names)
    if all(n in forward_args for n in names):
        pass  # matched to forward's arguments by name
    elif indices is not None:
        if indices != list(range(len(names))):
            out.append(
                Finding(
                    "io.input_names",
                    f"indexed input names must use indices 0..{len(names) - 1}, got {indices}",
                )
            )
    else:
        unknown = [n for n in names if n not in forward_args]
        order = ", ".join(f"{n} -> {a}" for n, a in zip(names, forward_args, strict=True))
        out.append(
            Finding(
                "io.input_order",
                f"config inputs {unknown} are not forward() arguments {list(forward_args)} "
                "and not all inputs follow NAME__<index>: Triton falls back to the config's "
                f"order ({order}); name them as forward's arguments to be sure",
                "warning",
            )
        )
    return out + _compare_outputs(cfg)


def _compare_outputs(cfg: Any) -> list[Finding]:
    out: list[Finding] = []
    outputs = [t.name for t in cfg.output]
    if outputs and _indices(outputs) != list(range(len(outputs))):
        out.append(
            Finding(
                "io.output_names",
                f"TorchScript outputs are matched by position: name them NAME__0.."
                f"NAME__{len(outputs) - 1} (got {outputs}) unless forward() returns a dict",
                "warning",
            )
        )
    out.append(
        Finding(
            "io.unchecked_ranks",
            "TorchScript does not record input ranks and data types statically; "
            "mmelocal check runs a request to test them",
            "info",
        )
    )
    return out


def _indices(names: list[str]) -> list[int] | None:
    """The indices of ``NAME__<index>`` names, sorted, as the PyTorch backend reads them (the
    digits after the first ``__``); None when a name does not follow the convention."""
    found = []
    for name in names:
        _, sep, index = name.partition("__")
        if not sep or not (index.isascii() and index.isdigit()):
            return None
        found.append(int(index))
    return sorted(found)


__all__ = ["Finding", "check_artifact", "compare_onnx", "compare_torchscript", "config_specs"]
