"""PyTorch module -> ONNX for Triton's ``onnxruntime_onnx``, with dynamic batch/sequence axes.

The TorchScript-based exporter (``dynamo=False``) is tried first: it handles the
Hugging Face and torchvision models we build with no extra dependencies and honours
``dynamic_axes`` directly. If it fails, the dynamo exporter is tried with the same
names and axes. Tensor names are the source's readable names (``input_ids``,
``attention_mask``, ``last_hidden_state``, ``input``, ``output``).

Weights stay inside ``model.onnx`` unless the model is above protobuf's 2 GB limit;
then they go to one external file, ``model.onnx.data``, next to it (listed in
``ExportedArtifact.extra_files``). The result passes ``onnx.checker`` and its
signature is read back from the graph.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mmelocal.builder.artifact import ExportedArtifact
from mmelocal.builder.runners import first_line, import_torch, quiet_warnings
from mmelocal.builder.sources.base import ModelSource
from mmelocal.builder.tensors import inspect_onnx
from mmelocal.errors import ExportError, MissingDependencyError

logger = logging.getLogger(__name__)

DEFAULT_OPSET = 17
PROTOBUF_LIMIT_BYTES = 2_000_000_000
"""Above this the weights are written as external data (protobuf refuses 2 GiB)."""


def export_onnx(
    source: ModelSource, out_path: Path | str, *, opset: int | None = None
) -> ExportedArtifact:
    """Export ``source`` to ONNX at ``out_path`` (or copy an existing ONNX file)."""
    onnx = _import_onnx()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    copied = source.file_format == "onnx" and source.file is not None
    notes: list[str] = []
    if copied:
        assert source.file is not None
        _copy_onnx(onnx, source.file, out)
        notes.append("copied from the source file")
    elif source.module is None:
        raise ExportError(f"{source.spec} has no PyTorch module to export")
    else:
        with tempfile.TemporaryDirectory(prefix="mmelocal-onnx-", dir=out.parent) as tmp:
            staged = Path(tmp) / out.name
            how = _export(source, staged, opset or DEFAULT_OPSET)
            _consolidate(onnx, staged, out)
        notes.append(f"exported with torch.onnx ({how}, opset {_opset_of(onnx, out)})")
    extra = _external_file(out)
    try:
        onnx.checker.check_model(str(out))
    except Exception as exc:
        raise ExportError(f"{out} fails onnx.checker: {first_line(exc)}") from None
    signature, batch_dynamic = inspect_onnx(out)
    names = set(signature.input_names) | set(signature.output_names)
    expected = set(source.input_names) | set(source.output_names)
    if not copied and names != expected:
        raise ExportError(
            f"the exported graph has tensors {sorted(names)}, expected {sorted(expected)}: "
            "the trace lost an input (the model ignores it, or computes through numpy/Python)"
        )
    return ExportedArtifact(
        path=out,
        format="onnx",
        signature=signature,
        batch_dynamic=batch_dynamic,
        name_map={},
        extra_files=(extra,) if extra else (),
        copied_from_source=copied,
        notes=tuple(notes),
    )


def _export(source: ModelSource, path: Path, opset: int) -> str:
    torch = import_torch("ONNX export")
    args = tuple(source.example_inputs.values())
    axes = {k: dict(v) for k, v in source.dynamic_axes.items() if v}
    common: dict[str, Any] = {
        "input_names": list(source.input_names),
        "output_names": list(source.output_names),
        "dynamic_axes": axes,
        "opset_version": opset,
    }
    errors: list[str] = []
    for dynamo in (False, True):
        sink = io.StringIO()
        try:
            with (
                torch.no_grad(),
                quiet_warnings(),
                contextlib.redirect_stdout(sink),
                contextlib.redirect_stderr(sink),
            ):
                if dynamo:
                    torch.onnx.export(
                        source.module, args, str(path), dynamo=True, external_data=True, **common
                    )
                else:
                    torch.onnx.export(
                        source.module,
                        args,
                        str(path),
                        dynamo=False,
                        do_constant_folding=True,
                        **common,
                    )
        except Exception as exc:
            errors.append(f"dynamo={dynamo}: {first_line(exc)}")
            logger.info("torch.onnx.export(dynamo=%s) failed: %s", dynamo, first_line(exc))
            for leftover in path.parent.iterdir():
                leftover.unlink()
            continue
        return "dynamo" if dynamo else "TorchScript-based"
    raise ExportError(f"ONNX export of {source.spec} failed: {'; '.join(errors)}")


def _consolidate(onnx: Any, staged: Path, out: Path) -> None:
    """Move the staged export to ``out``: one file, or one external data file above 2 GB."""
    siblings = [p for p in staged.parent.iterdir() if p != staged]
    weights_bytes = sum(p.stat().st_size for p in staged.parent.iterdir())
    if not siblings and weights_bytes < PROTOBUF_LIMIT_BYTES:
        shutil.move(str(staged), str(out))
        return
    model = onnx.load(str(staged), load_external_data=True)
    _save(onnx, model, out, weights_bytes >= PROTOBUF_LIMIT_BYTES)


def _copy_onnx(onnx: Any, src: Path, out: Path) -> None:
    model = onnx.load(str(src), load_external_data=False)
    if not any(_is_external(t) for t in model.graph.initializer):
        shutil.copyfile(src, out)
        return
    try:
        model = onnx.load(str(src), load_external_data=True)
    except Exception as exc:
        raise ExportError(f"cannot read the external weights of {src}: {first_line(exc)}") from None
    size = sum(len(t.raw_data) for t in model.graph.initializer)
    _save(onnx, model, out, size >= PROTOBUF_LIMIT_BYTES)


def _save(onnx: Any, model: Any, out: Path, external: bool) -> None:
    data = out.with_name(out.name + ".data")
    data.unlink(missing_ok=True)
    if external:
        onnx.save_model(
            model,
            str(out),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data.name,
            size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(out))


def _is_external(tensor: Any) -> bool:
    return bool(tensor.HasField("data_location") and tensor.data_location == 1)


def _external_file(out: Path) -> Path | None:
    data = out.with_name(out.name + ".data")
    return data if data.is_file() else None


def _opset_of(onnx: Any, path: Path) -> int | str:
    model = onnx.load(str(path), load_external_data=False)
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return versions[0] if versions else "?"


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise MissingDependencyError("onnx", extra="onnx", feature="ONNX export") from None
    return onnx


__all__ = ["DEFAULT_OPSET", "PROTOBUF_LIMIT_BYTES", "export_onnx"]
