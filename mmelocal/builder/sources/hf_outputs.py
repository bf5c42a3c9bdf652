"""What the two Hugging Face sources share: which outputs a task exports, and the
:class:`~mmelocal.builder.sources.base.ModelSource` of a loaded model (:func:`hf_source`).

:mod:`~mmelocal.builder.sources.huggingface` (text models) and
:mod:`~mmelocal.builder.sources.hf_vision` (image models) both import this module; neither
imports the other at module level.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mmelocal.builder.runners import first_line, quiet_warnings
from mmelocal.builder.sources.base import InputFactory, ModelSource, suggest_name
from mmelocal.builder.sources.shapes import infer_dynamic_axes
from mmelocal.errors import SourceError

TASK_OUTPUTS = {
    "feature-extraction": ("last_hidden_state", "pooler_output"),
    "sequence-classification": ("logits",),
    "image-classification": ("logits",),
}


@functools.cache
def outputs_wrapper_base(torch: Any) -> Any:
    """The ``torch.nn.Module`` the two sources' wrappers derive from: it holds the model and
    the names of the outputs its ``forward`` returns, in order (:meth:`named`). Made on first
    use, with the ``torch`` module the caller imported, so that importing this module does not
    import torch."""

    class OutputsWrapper(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, model: Any, output_keys: tuple[str, ...]) -> None:
            super().__init__()
            self.model = model
            self.output_keys = tuple(output_keys)

        def named(self, out: Any) -> tuple[Any, ...]:
            """The outputs ``output_keys`` of the model's answer ``out``, in order."""
            return tuple(out[k] for k in self.output_keys)

    return OutputsWrapper


def select_outputs(
    torch: Any, model: Any, example: dict[str, Any], task: str, spec: str
) -> tuple[str, ...]:
    """The outputs to export for ``task``, among those the model returns on ``example``."""
    with torch.no_grad(), quiet_warnings():
        try:
            out = model(**example, return_dict=True)
        except Exception as exc:
            raise SourceError(
                f"{spec} failed on its example inputs: {first_line(exc)}", source=spec
            ) from None
    present = [k for k in out if isinstance(out[k], torch.Tensor)]
    keys = tuple(k for k in TASK_OUTPUTS[task] if k in present)
    if not keys:
        raise SourceError(
            f"{spec} returned {present} for task {task}; expected {list(TASK_OUTPUTS[task])}",
            source=spec,
        )
    return keys


def hf_source(
    torch: Any,
    model: Any,
    config: Any,
    *,
    wrap: Callable[[Any, tuple[str, ...]], Any],
    spec: str,
    name: str | None,
    kind: str,
    task: str,
    inputs: tuple[str, ...],
    example: dict[str, Any],
    factory: InputFactory,
    seq_len: int | None = None,
    max_seq_len: int | None = None,
    notes: tuple[str, ...] = (),
) -> ModelSource:
    """The source of a loaded Hugging Face ``model``: the outputs ``task`` exports
    (:func:`select_outputs` on ``example``), the model wrapped by ``wrap(model, keys)`` to
    return them in order (in eval mode), and the dynamic axes a trace shows."""
    keys = select_outputs(torch, model, example, task, spec)
    wrapper = wrap(model, keys)
    wrapper.eval()
    return ModelSource(
        spec=spec,
        name=name or suggest_name(spec),
        kind=kind,
        family=getattr(config, "model_type", None),
        input_names=inputs,
        output_names=keys,
        example_inputs=example,
        input_factory=factory,
        dynamic_axes=infer_dynamic_axes(wrapper, factory, inputs, keys, seq_len),
        module=wrapper,
        task=task,
        seq_len=seq_len,
        max_seq_len=max_seq_len,
        notes=notes,
    )


__all__ = ["TASK_OUTPUTS", "hf_source", "select_outputs"]
