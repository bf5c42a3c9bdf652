"""Hugging Face image models (ViT, ConvNeXt, ResNet... saved with ``save_pretrained``).

The model takes ``pixel_values`` (float32 ``(batch, channels, H, W)``, H and W from
``config.image_size``, 224 when the config has none) and returns ``logits`` for
``image-classification`` or ``last_hidden_state`` (+ ``pooler_output``) for
``feature-extraction``. Like text models it is wrapped in a small module whose
``forward(pixel_values)`` returns a tuple, since transformers 5 ignores
``torchscript=True``.
"""

from __future__ import annotations

import functools
from typing import Any

from mmelocal.builder.runners import import_torch
from mmelocal.builder.sources.base import ModelSource, float_image_factory
from mmelocal.builder.sources.hf_outputs import hf_source, outputs_wrapper_base
from mmelocal.errors import SourceError

IMAGE_TASKS = ("image-classification", "feature-extraction")
DEFAULT_IMAGE_SIZE = 224


def hf_image_source(
    model: Any,
    config: Any,
    *,
    spec: str,
    name: str | None,
    task: str,
    batch_size: int,
) -> ModelSource:
    """A ModelSource for a loaded Hugging Face image model (in eval mode)."""
    if task not in IMAGE_TASKS:
        raise SourceError(
            f"task must be one of {', '.join(IMAGE_TASKS)} for the image model {spec}, "
            f"got {task!r}",
            source=spec,
        )
    torch = import_torch("Hugging Face image models")
    height, width = image_size(config)
    channels = int(getattr(config, "num_channels", 3) or 3)
    factory = float_image_factory((channels, height, width), "pixel_values")
    example = factory(batch_size, None, 0)
    return hf_source(
        torch,
        model,
        config,
        wrap=_wrapper_class(),
        spec=spec,
        name=name,
        kind="cv",
        task=task,
        inputs=("pixel_values",),
        example=example,
        factory=factory,
    )


def image_size(config: Any) -> tuple[int, int]:
    """``(height, width)`` from ``config.image_size`` (an int or a pair), else 224 x 224."""
    size = getattr(config, "image_size", None)
    if isinstance(size, int) and size > 0:
        return size, size
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return int(size[0]), int(size[1])
    return DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE


@functools.cache
def _wrapper_class() -> Any:
    torch = import_torch("Hugging Face image models")

    class ImageModelWrapper(outputs_wrapper_base(torch)):  # type: ignore[misc]
        """``forward(pixel_values)`` -> tuple of the named model outputs."""

        def forward(self, pixel_values: Any) -> tuple[Any, ...]:
            return self.named(self.model(pixel_values=pixel_values, return_dict=True))

    return ImageModelWrapper


__all__ = ["DEFAULT_IMAGE_SIZE", "IMAGE_TASKS", "hf_image_source", "image_size"]
