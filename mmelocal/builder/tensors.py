"""Tensor signatures and data-type maps between numpy, torch, ONNX and Triton.

A :class:`Signature` is what a model takes and returns, in Triton's terms: each
:class:`TensorSpec` has a Triton data-type name (``"TYPE_FP32"``) and dims where
``-1`` means dynamic. Signatures are read from exported artifacts
(:func:`inspect_onnx`, :func:`inspect_torchscript`) rather than typed by hand.

onnx and torch are imported only inside the functions that need them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.builder.runners import import_torch
from mmelocal.errors import ConfigError, MissingDependencyError, UserInputError

TRITON_TYPES: tuple[str, ...] = (
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
    "TYPE_BF16",
)
"""Every Triton data type a tensor may have (``TYPE_INVALID`` excluded)."""

_NUMPY_TO_TRITON: dict[str, str] = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "object": "TYPE_STRING",
    "bytes": "TYPE_STRING",
    "str": "TYPE_STRING",
}
_TRITON_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
# torch dtype names (str(torch.float32) without the "torch." prefix): numpy's numeric names + bf16
_TORCH_TO_TRITON: dict[str, str] = {
    **{k: v for k, v in _NUMPY_TO_TRITON.items() if v != "TYPE_STRING"},
    "bfloat16": "TYPE_BF16",
}
_TORCH_ALIASES: dict[str, str] = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "long": "int64",
    "int": "int32",
    "short": "int16",
}
# onnx.TensorProto.DataType numbers (fixed by the ONNX spec), so no onnx import is needed.
_ONNX_TO_TRITON: dict[int, str] = {
    1: "TYPE_FP32",
    2: "TYPE_UINT8",
    3: "TYPE_INT8",
    4: "TYPE_UINT16",
    5: "TYPE_INT16",
    6: "TYPE_INT32",
    7: "TYPE_INT64",
    8: "TYPE_STRING",
    9: "TYPE_BOOL",
    10: "TYPE_FP16",
    11: "TYPE_FP64",
    12: "TYPE_UINT32",
    13: "TYPE_UINT64",
    16: "TYPE_BF16",
}
_TRITON_TO_ONNX: dict[str, int] = {v: k for k, v in _ONNX_TO_TRITON.items()}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: name, Triton data type and dims (``-1`` = dynamic).

    When the model's ``max_batch_size`` is > 0 the dims exclude the batch dimension,
    exactly as in ``config.pbtxt``.
    """

    name: str
    data_type: str
    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("TensorSpec.name must be a non-empty string, got ''")
        if self.data_type not in TRITON_TYPES:
            raise ConfigError(
                f"TensorSpec.data_type must be one of {', '.join(TRITON_TYPES)}, "
                f"got {self.data_type!r} (tensor {self.name!r})"
            )
        dims = tuple(int(d) for d in self.dims)
        if any(d < -1 or d == 0 for d in dims):
            raise ConfigError(
                f"TensorSpec.dims must be positive or -1 (dynamic), got {list(dims)} "
                f"(tensor {self.name!r})"
            )
        object.__setattr__(self, "dims", dims)

    @property
    def rank(self) -> int:
        """Number of dims (excluding the batch dim when the signature excludes it)."""
        return len(self.dims)

    @property
    def is_dynamic(self) -> bool:
        """True when at least one dim is ``-1``."""
        return any(d == -1 for d in self.dims)


@dataclass(frozen=True)
class Signature:
    """The inputs and outputs of a model, in order."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        for kind, specs in (("inputs", self.inputs), ("outputs", self.outputs)):
            names = [s.name for s in specs]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ConfigError(f"Signature.{kind} must have unique names, repeated: {dupes}")

    @property
    def input_names(self) -> tuple[str, ...]:
        """Input names in order."""
        return tuple(s.name for s in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """Output names in order."""
        return tuple(s.name for s in self.outputs)

    def without_batch(self) -> Signature:
        """A copy with the first dim of every tensor removed (for ``max_batch_size > 0``)."""
        return Signature(
            inputs=tuple(_drop_first(s) for s in self.inputs),
            outputs=tuple(_drop_first(s) for s in self.outputs),
        )


def _drop_first(spec: TensorSpec) -> TensorSpec:
    if not spec.dims:
        raise ConfigError(f"tensor {spec.name!r} has rank 0 and no batch dim to remove")
    return TensorSpec(spec.name, spec.data_type, spec.dims[1:])


# ----------------------------------------------------------------------------- dtype maps


def numpy_to_triton(dtype: Any) -> str:
    """Triton data-type name for a numpy dtype (``np.float32`` -> ``"TYPE_FP32"``)."""
    dt = np.dtype(dtype)
    key = "object" if dt.kind in ("O", "S", "U") else dt.name
    try:
        return _NUMPY_TO_TRITON[key]
    except KeyError:
        raise ConfigError(
            f"numpy dtype {dt} has no Triton data type; use one of {sorted(_NUMPY_TO_TRITON)}"
        ) from None


def triton_to_numpy(data_type: str) -> np.dtype:
    """numpy dtype for a Triton data-type name (``"TYPE_STRING"`` -> object)."""
    try:
        return np.dtype(_TRITON_TO_NUMPY[data_type])
    except KeyError:
        raise ConfigError(
            f"Triton data type {data_type!r} has no numpy dtype; "
            f"allowed: {', '.join(_TRITON_TO_NUMPY)}"
        ) from None


def torch_to_triton(dtype: Any) -> str:
    """Triton data-type name for a torch dtype (or its name); torch need not be imported."""
    name = str(dtype).removeprefix("torch.")
    name = _TORCH_ALIASES.get(name, name)
    try:
        return _TORCH_TO_TRITON[name]
    except KeyError:
        raise ConfigError(
            f"torch dtype {dtype} has no Triton data type; use one of {sorted(_TORCH_TO_TRITON)}"
        ) from None


def triton_to_torch(data_type: str) -> Any:
    """torch dtype for a Triton data-type name (imports torch)."""
    torch = import_torch("mapping Triton data types to torch")
    for name, triton in _TORCH_TO_TRITON.items():
        if triton == data_type:
            return getattr(torch, name)
    raise ConfigError(f"Triton data type {data_type!r} has no torch dtype")


def onnx_to_triton(elem_type: int) -> str:
    """Triton data-type name for an ``onnx.TensorProto`` element type number."""
    try:
        return _ONNX_TO_TRITON[int(elem_type)]
    except KeyError:
        raise ConfigError(f"ONNX element type {elem_type} has no Triton data type") from None


def triton_to_onnx(data_type: str) -> int:
    """``onnx.TensorProto`` element type number for a Triton data-type name."""
    try:
        return _TRITON_TO_ONNX[data_type]
    except KeyError:
        raise ConfigError(f"Triton data type {data_type!r} has no ONNX element type") from None


# ----------------------------------------------------------------------------- artifacts


def inspect_onnx(path: Path | str, *, strip_batch: bool | None = None) -> tuple[Signature, bool]:
    """Read an ONNX model's signature from its graph, without running it.

    Returns ``(signature, batch_dynamic)``. ``batch_dynamic`` is True when every input
    and output has a dynamic (symbolic or unknown) first dim, i.e. the model can be
    served with ``max_batch_size > 0``. Symbolic dims (``"batch"``, ``"seq"``) become
    ``-1``. With ``strip_batch=None`` (default) the first dim is removed from every
    tensor exactly when ``batch_dynamic`` is True, so the signature can go straight
    into ``config.pbtxt``; pass ``strip_batch=False`` to get the full graph dims.
    External weight files are not read.
    """
    p = Path(path)
    return onnx_signature(load_onnx_graph(p), p, strip_batch=strip_batch)


def load_onnx_graph(path: Path | str) -> Any:
    """The graph of the ONNX model at ``path`` (external weight files are not read);
    :class:`~mmelocal.errors.UserInputError` when it is missing or unreadable."""
    onnx = _import_onnx()
    p = Path(path)
    try:
        return onnx.load(str(p), load_external_data=False).graph
    except FileNotFoundError:
        raise UserInputError(f"ONNX file not found: {p}") from None
    except Exception as exc:  # onnx raises DecodeError and friends
        raise UserInputError(f"{p} is not a readable ONNX model: {exc}") from None


def onnx_signature(
    graph: Any, path: Path | str, *, strip_batch: bool | None = None
) -> tuple[Signature, bool]:
    """:func:`inspect_onnx` of an already loaded ``graph`` (``path`` names it in errors)."""
    p = Path(path)
    initializers = {init.name for init in graph.initializer}
    inputs = tuple(_onnx_spec(vi, p) for vi in graph.input if vi.name not in initializers)
    outputs = tuple(_onnx_spec(vi, p) for vi in graph.output)
    full = Signature(inputs=inputs, outputs=outputs)
    tensors = full.inputs + full.outputs
    batch_dynamic = bool(tensors) and all(s.dims and s.dims[0] == -1 for s in tensors)
    strip = batch_dynamic if strip_batch is None else strip_batch
    return (full.without_batch() if strip else full), batch_dynamic


def _onnx_spec(value_info: Any, path: Path) -> TensorSpec:
    ttype = value_info.type
    if not ttype.HasField("tensor_type"):
        raise UserInputError(
            f"{path}: graph value {value_info.name!r} is not a tensor; Triton needs tensors"
        )
    tensor = ttype.tensor_type
    dims: list[int] = []
    if tensor.HasField("shape"):
        for dim in tensor.shape.dim:
            dims.append(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else -1)
    return TensorSpec(value_info.name, onnx_to_triton(tensor.elem_type), tuple(dims))


def torchscript_forward_args(path: Path | str) -> tuple[str, ...]:
    """Names of a TorchScript module's ``forward`` arguments (``self`` excluded).

    Read from the scripted schema after ``torch.jit.load`` on CPU; nothing is run.
    Traced modules keep the Python argument names (``input_ids``, ``attention_mask``).
    """
    return tuple(name for name, _ in torchscript_forward_arguments(path))


def torchscript_forward_arguments(path: Path | str) -> tuple[tuple[str, str], ...]:
    """``(name, type kind)`` of each ``forward`` argument (``self`` excluded): the kind is
    TorchScript's (``"TensorType"``, ``"DictType"`` for ``Dict[str, Tensor]``, ...)."""
    torch = import_torch("reading a TorchScript model")
    p = Path(path)
    if not p.is_file():
        raise UserInputError(f"TorchScript file not found: {p}")
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = torch.jit.load(str(p), map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError with a long C++ trace
        text = str(exc).strip()
        first = text.splitlines()[0].split(". ")[0] if text else type(exc).__name__
        raise UserInputError(f"{p} is not a loadable TorchScript model: {first}") from None
    args = module.forward.schema.arguments
    return tuple((a.name, str(a.type.kind())) for a in args if a.name != "self")


def inspect_torchscript(path: Path | str) -> int:
    """Number of inputs of a TorchScript model's ``forward`` (read from its schema).

    Ranks and dtypes cannot be read statically from TorchScript; use
    :func:`torchscript_forward_args` for the argument names.
    """
    return len(torchscript_forward_args(path))


def specs_from_arrays(arrays: Iterable[tuple[str, Any]], *, batch: bool) -> tuple[TensorSpec, ...]:
    """TensorSpecs for named numpy arrays or torch tensors (dims as observed; no dynamic axes).

    With ``batch=True`` the first dim of each array is treated as the batch dim and removed.
    """
    specs = []
    for name, arr in arrays:
        shape = tuple(int(d) for d in arr.shape)
        dtype = arr.dtype
        data_type = (
            torch_to_triton(dtype) if str(dtype).startswith("torch.") else numpy_to_triton(dtype)
        )
        specs.append(TensorSpec(name, data_type, shape[1:] if batch else shape))
    return tuple(specs)


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise MissingDependencyError("onnx", extra="onnx", feature="reading ONNX models") from None
    return onnx


__all__ = [
    "TRITON_TYPES",
    "Signature",
    "TensorSpec",
    "inspect_onnx",
    "inspect_torchscript",
    "load_onnx_graph",
    "numpy_to_triton",
    "onnx_signature",
    "onnx_to_triton",
    "specs_from_arrays",
    "torch_to_triton",
    "torchscript_forward_args",
    "torchscript_forward_arguments",
    "triton_to_numpy",
    "triton_to_onnx",
    "triton_to_torch",
]
