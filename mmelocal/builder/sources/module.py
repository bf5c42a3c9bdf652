"""An ``nn.Module`` given through the Python API with example inputs.

>>> source = source_from_module(model, {"input": torch.randn(2, 16)}, name="mlp")

The example inputs fix names, dtypes and shapes. By default axis 0 of every input is
the batch axis; pass ``dynamic_axes`` (``{"input_ids": {0: "batch", 1: "sequence"}}``)
for more. Output axes are found by running the module (see
:mod:`mmelocal.builder.sources.shapes`). Random inputs for verification keep each
example's dtype and, for integers, its value range (so token ids stay in the vocabulary).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mmelocal.builder.runners import first_line, flatten_outputs, import_torch, quiet_warnings
from mmelocal.builder.sources.base import KINDS, ModelSource, suggest_name
from mmelocal.builder.sources.shapes import infer_dynamic_axes
from mmelocal.errors import SourceError


def source_from_module(
    module: Any,
    example_inputs: Mapping[str, Any],
    *,
    name: str,
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None,
    output_names: Sequence[str] | None = None,
    kind: str = "generic",
    family: str | None = None,
) -> ModelSource:
    """Wrap ``module`` (called as ``module(*example_inputs.values())``) as a source."""
    torch = import_torch("exporting a PyTorch module")
    if not isinstance(module, torch.nn.Module):
        raise SourceError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if kind not in KINDS:
        raise SourceError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not example_inputs:
        raise SourceError("example_inputs must name at least one input tensor")
    bad = [k for k, v in example_inputs.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise SourceError(f"example_inputs must be torch tensors; not tensors: {bad}")
    module.eval()
    examples = {str(k): v for k, v in example_inputs.items()}
    input_names = tuple(examples)
    with torch.no_grad(), quiet_warnings():
        try:
            result = module(*examples.values())
        except Exception as exc:
            raise SourceError(
                f"module {name!r} failed on its example inputs: {first_line(exc)}"
            ) from None
    count = len(flatten_outputs(result))
    names = _output_names(output_names, count)
    input_axes = {n: dict((dynamic_axes or {}).get(n, {0: "batch"})) for n in input_names}
    seq_len = _seq_len(examples, input_axes)
    factory = _example_factory(examples, input_axes)
    inferred = infer_dynamic_axes(module, factory, input_names, names, seq_len)
    axes: dict[str, dict[int, str]] = {**inferred, **input_axes}
    for n in names:
        if dynamic_axes and n in dynamic_axes:
            axes[n] = dict(dynamic_axes[n])
    return ModelSource(
        spec=f"module:{type(module).__name__}",
        name=suggest_name(name),
        kind=kind,
        family=family,
        input_names=input_names,
        output_names=names,
        example_inputs=examples,
        input_factory=factory,
        dynamic_axes=axes,
        module=module,
        seq_len=seq_len,
    )


def _output_names(given: Sequence[str] | None, count: int) -> tuple[str, ...]:
    if given is None:
        return ("output",) if count == 1 else tuple(f"output{i}" for i in range(count))
    names = tuple(given)
    if len(names) != count or len(set(names)) != count:
        raise SourceError(
            f"output_names must be {count} distinct names (the module returns {count} "
            f"tensors), got {list(names)}"
        )
    return names


def _seq_len(examples: Mapping[str, Any], axes: Mapping[str, Mapping[int, str]]) -> int | None:
    for name, tensor in examples.items():
        for axis, label in axes[name].items():
            if label == "sequence":
                return int(tensor.shape[axis])
    return None


def _example_factory(
    examples: Mapping[str, Any], axes: Mapping[str, Mapping[int, str]]
) -> Callable[[int, int | None, int], dict[str, Any]]:
    def factory(batch_size: int, seq_len: int | None, seed: int) -> dict[str, Any]:
        torch = import_torch("making example inputs")
        gen = torch.Generator().manual_seed(seed)
        made: dict[str, Any] = {}
        for name, tensor in examples.items():
            shape = list(tensor.shape)
            for axis, label in axes[name].items():
                if axis == 0:
                    shape[0] = batch_size
                elif label == "sequence" and seq_len is not None:
                    shape[axis] = seq_len
            made[name] = _random_like(torch, tensor, tuple(shape), gen)
        return made

    return factory


def _random_like(torch: Any, tensor: Any, shape: tuple[int, ...], gen: Any) -> Any:
    if tensor.dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if tensor.is_floating_point():
        return torch.randn(shape, generator=gen).to(tensor.dtype)
    low = int(tensor.min()) if tensor.numel() else 0
    high = int(tensor.max()) + 1 if tensor.numel() else 2
    return torch.randint(low, max(high, low + 1), shape, generator=gen, dtype=tensor.dtype)


__all__ = ["source_from_module"]
