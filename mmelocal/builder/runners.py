"""Running models: PyTorch modules, TorchScript files and ONNX files, on the CPU.

The leaf of the builder: sources, exporters and the verifier all run models through these
functions, and this module imports no other part of mmelocal but its errors. Heavy
frameworks are imported when a function runs, with an install hint when missing.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.errors import ExportError, MissingDependencyError, SourceError


def import_torch(feature: str) -> Any:
    """``import torch`` or a MissingDependencyError naming the feature."""
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch", extra="torch", feature=feature) from None
    return torch


@contextlib.contextmanager
def quiet_warnings() -> Iterator[None]:
    """Silence framework warnings (deprecations, tracer notes) inside library calls.

    transformers logs advisory warnings through its own handler; when it is loaded its
    verbosity is lowered to errors for the duration.
    """
    tlog = None
    level = None
    if "transformers" in sys.modules:
        tlog = sys.modules["transformers"].utils.logging
        level = tlog.get_verbosity()
        tlog.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if tlog is not None and level is not None:
            tlog.set_verbosity(level)


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (C++ traces are long)."""
    for line in str(exc).strip().splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def call_module(
    module: Any, inputs: Mapping[str, Any], fail: Callable[[str], Exception]
) -> list[Any]:
    """``module(*inputs.values())`` without grad, outputs flattened to a list of tensors.

    A failure raises ``fail(message)``, the message naming the input shapes and the
    framework's first line (its C++ traces are long).
    """
    torch = import_torch("running a PyTorch model")
    with torch.no_grad(), quiet_warnings():
        try:
            result = module(*inputs.values())
        except Exception as exc:
            shapes = {n: list(v.shape) for n, v in inputs.items()}
            raise fail(f"inputs {shapes}: {first_line(exc)}") from None
    return flatten_outputs(result)


def _check_count(tensors: list[Any], output_names: tuple[str, ...], fail: type[Exception]) -> None:
    if len(tensors) != len(output_names):
        raise fail(
            f"the model returned {len(tensors)} outputs, expected {len(output_names)} "
            f"({', '.join(output_names)})"
        )


def run_module(
    module: Any,
    inputs: Mapping[str, Any],
    input_names: tuple[str, ...],
    output_names: tuple[str, ...],
) -> dict[str, np.ndarray]:
    """Call ``module(*inputs in order)`` without grad; map the outputs to ``output_names``."""
    ordered = {n: inputs[n] for n in input_names}
    outputs = call_module(
        module, ordered, lambda why: SourceError(f"the source model failed on {why}")
    )
    _check_count(outputs, output_names, SourceError)
    return {n: t.detach().cpu().numpy() for n, t in zip(output_names, outputs, strict=True)}


def flatten_outputs(result: Any) -> list[Any]:
    """A model's return value as a flat list of tensors (tensor, tuple, list or dict)."""
    torch = import_torch("running a PyTorch model")
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, Mapping):
        return [t for v in result.values() for t in flatten_outputs(v)]
    if isinstance(result, (tuple, list)):
        return [t for v in result if v is not None for t in flatten_outputs(v)]
    raise SourceError(
        f"the model returned {type(result).__name__}; it must return tensors "
        "(a tensor, or a tuple/list/dict of tensors)"
    )


def load_torchscript(path: Path | str) -> Any:
    """``torch.jit.load`` on CPU in eval mode, with a one-line ExportError on failure."""
    torch = import_torch("TorchScript models")
    with quiet_warnings():
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:
            raise ExportError(
                f"{path} is not a loadable TorchScript model: {first_line(exc)}"
            ) from None
    module.eval()
    return module


def run_torchscript_module(
    module: Any, inputs: Mapping[str, Any], output_names: tuple[str, ...]
) -> dict[str, Any]:
    """Run a loaded TorchScript module on inputs (in order); outputs keyed by ``output_names``."""
    tensors = call_module(
        module, inputs, lambda why: ExportError(f"the TorchScript model failed on {why}")
    )
    _check_count(tensors, output_names, ExportError)
    return dict(zip(output_names, tensors, strict=True))


def onnx_session(path: Path | str) -> Any:
    """An onnxruntime CPU session for ``path``."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise MissingDependencyError(
            "onnxruntime", extra="onnx", feature="running ONNX models"
        ) from None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise ExportError(f"onnxruntime cannot load {path}: {first_line(exc)}") from None


def run_onnx(path: Path | str, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Run an ONNX file once on named inputs (numpy arrays or torch tensors)."""
    return run_session(onnx_session(path), inputs)


def run_session(session: Any, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Run an onnxruntime session on named inputs; outputs by name."""
    feed = {k: to_numpy(v) for k, v in inputs.items()}
    names = [o.name for o in session.get_outputs()]
    try:
        values = session.run(names, feed)
    except Exception as exc:
        raise ExportError(f"onnxruntime failed: {first_line(exc)}") from None
    return dict(zip(names, values, strict=True))


def to_numpy(value: Any) -> np.ndarray:
    """A numpy array from a numpy array or a torch tensor."""
    if isinstance(value, np.ndarray):
        return value
    return value.detach().cpu().numpy()


__all__ = [
    "call_module",
    "first_line",
    "flatten_outputs",
    "import_torch",
    "load_torchscript",
    "onnx_session",
    "quiet_warnings",
    "run_module",
    "run_onnx",
    "run_session",
    "run_torchscript_module",
    "to_numpy",
]
