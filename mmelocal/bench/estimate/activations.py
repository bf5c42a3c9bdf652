"""Weights and activation memory of a model, found without running it on a GPU.

:func:`trace_torch` runs an ``nn.Module`` (or a TorchScript module) on the ``meta`` device
(shapes only: no memory, no compute) under a ``TorchDispatchMode`` that sees every aten op.
Each op's output storage is counted from its creation until Python drops its last
reference (a ``weakref.finalize`` on the storage), so the result is the **peak of the live
tensors**, not their sum: what a caching allocator has to hold at once. Views and in-place
ops share their input's storage and add nothing. The inputs are live throughout (Triton
keeps its input buffers for the whole execution).

:func:`trace_onnx` does the same from an ONNX graph: shapes from ``onnx.shape_inference``
at the requested batch, lifetimes from the node order (a tensor lives from the node that
makes it to its last consumer; graph outputs to the end).

Floating tensors are counted at the precision asked for (``float_bytes``); integer tensors
at their own size. torch and onnx are imported inside the functions.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.builder.runners import import_torch
from mmelocal.errors import MissingDependencyError, UserInputError


@dataclass(frozen=True, kw_only=True)
class Weights:
    """Parameters and buffers of a model (shared tensors counted once)."""

    params: int
    param_bytes: int
    buffer_bytes: int
    #: every stored tensor's bytes, in the order a saved module loads them (state_dict order)
    blocks: tuple[int, ...] = ()

    @property
    def total_bytes(self) -> int:
        """Parameters plus buffers: what loading the model puts on the device."""
        return self.param_bytes + self.buffer_bytes


@dataclass(frozen=True, kw_only=True)
class ActivationTrace:
    """The live-tensor peak of one forward pass at ``batch_size``."""

    batch_size: int
    peak_bytes: int
    input_bytes: int
    output_bytes: int
    ops: int
    convolutions: int = 0
    overlapping_convolutions: int = 0
    unknown_tensors: int = 0
    #: the sizes of the tensors live at the peak, inputs first (what the caching allocator
    #: holds in blocks at that moment: :mod:`mmelocal.bench.estimate.allocator`)
    peak_blocks: tuple[int, ...] = ()


def _tensor_bytes(t: Any, float_bytes: int | None) -> int:
    if float_bytes is not None and t.is_floating_point():
        return int(t.numel()) * float_bytes
    return int(t.numel()) * int(t.element_size())


def torch_weights(module: Any, *, float_bytes: int | None = None) -> Weights:
    """Parameters (count and bytes) and buffers of ``module``; tied tensors once."""
    params = list(module.parameters())
    buffers = list(module.buffers())
    blocks: dict[int, int] = {}
    for tensor in module.state_dict(keep_vars=True).values():
        blocks.setdefault(_storage_key(tensor), _tensor_bytes(tensor, float_bytes))
    return Weights(
        params=sum(int(p.numel()) for p in params),
        param_bytes=sum(_tensor_bytes(p, float_bytes) for p in params),
        buffer_bytes=sum(_tensor_bytes(b, float_bytes) for b in buffers),
        blocks=tuple(blocks.values()),
    )


def _storage_key(tensor: Any) -> int:
    """The identity of a tensor's storage (the C++ StorageImpl; meta tensors have no
    addresses to compare). Views and in-place results share their input's key."""
    return int(tensor.untyped_storage()._cdata)


def _is_conv(func: Any) -> bool:
    return "convolution" in str(getattr(func, "__name__", func))


class _LiveTensors:
    """Counts storages from creation until their last reference goes; keeps the peak."""

    def __init__(self, float_bytes: int | None, start_bytes: int) -> None:
        self.float_bytes = float_bytes
        self.live = start_bytes
        self.peak = start_bytes
        self.peak_blocks: tuple[int, ...] = ()
        self.ops = 0
        self.convolutions = 0
        self.overlapping = 0
        self._sizes: dict[int, int] = {}

    def seen(self, func: Any, args: tuple[Any, ...], out: Any) -> None:
        torch = import_torch("tracing a PyTorch model")
        from torch.utils._pytree import tree_leaves

        self.ops += 1
        if _is_conv(func) and len(args) > 4:
            self.convolutions += 1
            kernel = tuple(args[1].shape[2:])
            stride = tuple(args[3]) if isinstance(args[3], (list, tuple)) else (args[3],)
            if any(k > s for k, s in zip(kernel, stride * len(kernel), strict=False)):
                self.overlapping += 1
        returns = func._schema.returns
        results = out if isinstance(out, (tuple, list)) and len(returns) > 1 else (out,)
        for ret, result in zip(returns, results, strict=False):
            if ret.alias_info is not None:
                continue  # a view or an in-place/out= result: the input's storage
            for leaf in tree_leaves(result):
                if isinstance(leaf, torch.Tensor):
                    self._track(leaf)

    def _track(self, tensor: Any) -> None:
        storage = tensor.untyped_storage()
        key = _storage_key(tensor)
        if key in self._sizes:
            return
        size = int(storage.nbytes())
        if self.float_bytes is not None and tensor.is_floating_point():
            size = size * self.float_bytes // int(tensor.element_size())
        self._sizes[key] = size
        self.live += size
        if self.live > self.peak:
            self.peak = self.live
            self.peak_blocks = tuple(self._sizes.values())
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.live -= self._sizes.pop(key, 0)


def trace_torch(
    module: Any, inputs: Mapping[str, Any] | tuple[Any, ...], *, float_bytes: int | None = None
) -> ActivationTrace:
    """Run ``module`` on ``inputs`` (meta tensors, made fake here) and return the peak of
    the live tensors.

    ``inputs`` is a mapping (passed as keyword arguments) or a tuple (positional). The
    module should sit on the ``meta`` device (``module.to("meta")``): nothing is computed.
    """
    torch = import_torch("tracing a PyTorch model")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves, tree_map

    # Fake tensors (meta underneath): libraries that look at values when not tracing
    # (transformers' mask checks call .all()) see a trace and skip those checks.
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    inputs = tree_map(
        lambda t: fake.from_tensor(t) if isinstance(t, torch.Tensor) else t,
        dict(inputs) if isinstance(inputs, Mapping) else tuple(inputs),
    )
    values = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
    leaves = [t for t in tree_leaves(values) if isinstance(t, torch.Tensor)]
    if not leaves:
        raise UserInputError("tracing needs at least one input tensor")
    input_bytes = sum(_tensor_bytes(t, float_bytes) for t in leaves)
    live = _LiveTensors(float_bytes, input_bytes)
    input_blocks = tuple(_tensor_bytes(t, float_bytes) for t in leaves)

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            out = func(*args, **(kwargs or {}))
            live.seen(func, args, out)
            return out

    with torch.no_grad(), fake, _Mode():
        out = module(**inputs) if isinstance(inputs, Mapping) else module(*inputs)
    outputs = [t for t in tree_leaves(_plain(out)) if isinstance(t, torch.Tensor)]
    output_bytes = sum(_tensor_bytes(t, float_bytes) for t in outputs)
    del out, outputs
    return ActivationTrace(
        batch_size=int(leaves[0].shape[0]) if leaves[0].dim() else 1,
        peak_bytes=live.peak,
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        ops=live.ops,
        convolutions=live.convolutions,
        overlapping_convolutions=live.overlapping,
        peak_blocks=(*input_blocks, *live.peak_blocks),
    )


def _plain(out: Any) -> Any:
    """Model outputs as plain containers (a Hugging Face ModelOutput is a dict)."""
    if isinstance(out, Mapping):
        return dict(out)
    return out


# ---- ONNX -------------------------------------------------------------------------------

_ONNX_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
_ONNX_FLOATS = {1, 10, 11, 16}


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:
        raise MissingDependencyError("onnx", extra="onnx", feature="reading an ONNX model") from exc
    return onnx


def _elem_bytes(elem_type: int, float_bytes: int | None) -> int:
    if float_bytes is not None and elem_type in _ONNX_FLOATS:
        return float_bytes
    return _ONNX_BYTES.get(elem_type, 4)


def onnx_weights(path: Path | str, *, float_bytes: int | None = None) -> Weights:
    """Initializers of the ONNX file at ``path`` (the weights), from their shapes only."""
    onnx = _onnx()
    model = onnx.load(str(path), load_external_data=False)
    params = 0
    total = 0
    for init in model.graph.initializer:
        count = math.prod(init.dims) if init.dims else 1
        params += count if init.data_type in _ONNX_FLOATS else 0
        total += count * _elem_bytes(init.data_type, float_bytes)
    return Weights(params=params, param_bytes=total, buffer_bytes=0)


def trace_onnx(
    path: Path | str,
    *,
    batch_size: int,
    dynamic_dim: int = 128,
    float_bytes: int | None = None,
) -> ActivationTrace:
    """The live-tensor peak of the ONNX graph at ``path`` with its batch axis set to
    ``batch_size`` and every other symbolic dimension to ``dynamic_dim``."""
    onnx = _onnx()
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    for value in graph.input:
        if value.name in initializers:
            continue
        for index, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                dim.dim_value = batch_size if index == 0 else dynamic_dim
            elif index == 0 and dim.dim_value != batch_size:
                dim.dim_value = batch_size
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    sizes: dict[str, int | None] = {}
    for value in [*inferred.input, *inferred.value_info, *inferred.output]:
        tensor_type = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
        if any(d is None for d in dims) or not tensor_type.HasField("shape"):
            sizes[value.name] = None
        else:
            count = math.prod(int(d) for d in dims if d is not None) if dims else 1
            sizes[value.name] = count * _elem_bytes(tensor_type.elem_type, float_bytes)
    return _onnx_peak(inferred, initializers, sizes, batch_size)


def _onnx_peak(
    graph: Any, initializers: set[str], sizes: dict[str, int | None], batch_size: int
) -> ActivationTrace:
    inputs = [v.name for v in graph.input if v.name not in initializers]
    outputs = {v.name for v in graph.output}
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            last_use[name] = index
    end = len(graph.node)
    for name in outputs:
        last_use[name] = end
    input_bytes = sum(sizes.get(name) or 0 for name in inputs)
    live = peak = input_bytes
    unknown = convs = overlapping = 0
    produced: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        if node.op_type == "Conv":
            convs += 1
            if _overlapping(node):
                overlapping += 1
        for name in node.output:
            if not name or name in initializers:
                continue
            size = sizes.get(name)
            if size is None:
                unknown += 1
                continue
            produced[name] = size
            live += size
        peak = max(peak, live)
        for name in [n for n, used in last_use.items() if used == index and n in produced]:
            live -= produced.pop(name)
            del last_use[name]
    return ActivationTrace(
        batch_size=batch_size,
        peak_bytes=peak,
        input_bytes=input_bytes,
        output_bytes=sum(sizes.get(name) or 0 for name in outputs),
        ops=len(graph.node),
        convolutions=convs,
        overlapping_convolutions=overlapping,
        unknown_tensors=unknown,
    )


def _overlapping(node: Any) -> bool:
    attrs = {a.name: list(a.ints) for a in node.attribute}
    kernel = attrs.get("kernel_shape") or []
    strides = attrs.get("strides") or [1] * len(kernel)
    return any(k > s for k, s in zip(kernel, strides, strict=False))


__all__ = [
    "ActivationTrace",
    "Weights",
    "onnx_weights",
    "torch_weights",
    "trace_onnx",
    "trace_torch",
]
