"""Which axes of a model's inputs and outputs are dynamic, found by running it twice.

The model is run on inputs made at two batch sizes (and, for NLP, two sequence
lengths); every axis whose size differs between the runs is dynamic. Axis 0 is
labelled ``batch``; an axis that follows the sequence length is ``sequence``.
Nothing is typed by hand, so a model that returns, say, a pooled vector (no sequence
axis) gets exactly the axes it has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mmelocal.builder.runners import first_line, run_module
from mmelocal.errors import SourceError

_BATCHES = (2, 3)


def probe_seq_lens(seq_len: int | None) -> tuple[int | None, int | None]:
    """Two sequence lengths to compare (``(None, None)`` for models without one)."""
    if seq_len is None:
        return None, None
    return seq_len, (seq_len - 1 if seq_len > 1 else 2)


def infer_dynamic_axes(
    module: Any,
    factory: Callable[[int, int | None, int], dict[str, Any]],
    input_names: tuple[str, ...],
    output_names: tuple[str, ...],
    seq_len: int | None,
) -> dict[str, dict[int, str]]:
    """``{tensor name: {axis: label}}`` for inputs and outputs that change size."""
    s1, s2 = probe_seq_lens(seq_len)
    first = factory(_BATCHES[0], s1, 0)
    second = factory(_BATCHES[1], s2, 1)
    try:
        out1 = run_module(module, first, input_names, output_names)
        out2 = run_module(module, second, input_names, output_names)
    except SourceError:
        raise
    except Exception as exc:
        raise SourceError(
            f"the model failed on random inputs of another batch size or sequence length: "
            f"{first_line(exc)}"
        ) from None
    axes: dict[str, dict[int, str]] = {}
    for name in input_names:
        axes[name] = _axes(name, tuple(first[name].shape), tuple(second[name].shape), s1, s2)
    for name in output_names:
        axes[name] = _axes(name, out1[name].shape, out2[name].shape, s1, s2)
    return axes


def _axes(
    name: str,
    shape1: tuple[int, ...],
    shape2: tuple[int, ...],
    s1: int | None,
    s2: int | None,
) -> dict[int, str]:
    if len(shape1) != len(shape2):
        raise SourceError(
            f"tensor {name!r} changes rank with the input shape ({list(shape1)} vs "
            f"{list(shape2)}); Triton needs a fixed rank"
        )
    found: dict[int, str] = {}
    for axis, (a, b) in enumerate(zip(shape1, shape2, strict=True)):
        if a == b:
            continue
        if axis == 0:
            found[axis] = "batch"
        elif s1 is not None and (a, b) == (s1, s2):
            found[axis] = "sequence"
        else:
            found[axis] = f"{name}_dim{axis}"
    if shape1 and 0 not in found:
        raise SourceError(
            f"tensor {name!r} does not follow the batch size (shape {list(shape1)} at "
            f"batch {_BATCHES[0]}, {list(shape2)} at batch {_BATCHES[1]}); every input and "
            "output must have the batch as its first axis"
        )
    return found


def output_shapes(outputs: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Shapes of named arrays (a small helper for reports)."""
    return {k: tuple(int(d) for d in v.shape) for k, v in outputs.items()}


__all__ = ["infer_dynamic_axes", "output_shapes", "probe_seq_lens"]
