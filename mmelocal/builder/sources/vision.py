"""Image classifiers by name: ``torchvision:NAME`` and ``timm:NAME``.

Weights are random (``weights=None`` / ``pretrained=False``) unless the caller asks
for pretrained weights; those are used only when already in the local cache
(torch hub's ``checkpoints`` folder, or the Hugging Face cache for timm), so a build
never downloads and never hangs. The input is one float32 tensor named ``input``
of shape ``(batch, 3, H, W)`` with H and W from the model's default weights/config
(224 for most), named as in the family preset (``pixel_values``, the Hugging Face
name); the output is ``logits``.
"""

from __future__ import annotations

import difflib
import logging
from pathlib import Path
from typing import Any

from mmelocal.builder.sources.base import (
    ModelSource,
    first_line,
    float_image_factory,
    import_torch,
    quiet_warnings,
    suggest_name,
)
from mmelocal.builder.sources.shapes import infer_dynamic_axes
from mmelocal.errors import MissingDependencyError, SourceError

logger = logging.getLogger(__name__)

TASKS = ("image-classification",)
IMAGE_INPUT = "pixel_values"
IMAGE_OUTPUT = "logits"


def image_input_name(family: str | None) -> str:
    """The input name of an image model: its family preset's, else ``pixel_values``."""
    from mmelocal.builder.presets import detect_family, load_preset

    names = load_preset(detect_family(family)).get("input_names") or [IMAGE_INPUT]
    return str(names[0])


def check_task(task: str | None, spec: str) -> str:
    """Image models support only ``image-classification``."""
    if task is None or task in TASKS:
        return TASKS[0]
    raise SourceError(
        f"task must be one of {', '.join(TASKS)} for {spec}, got {task!r}", source=spec
    )


def load_torchvision(
    arch: str,
    *,
    spec: str,
    name: str | None = None,
    task: str | None = None,
    pretrained: bool = False,
    batch_size: int = 2,
) -> ModelSource:
    """A torchvision classification model by architecture name (``resnet18``)."""
    task = check_task(task, spec)
    import_torch("torchvision models")
    try:
        import torchvision
        from torchvision import models
    except ImportError:
        raise MissingDependencyError(
            "torchvision", extra="vision", feature="torchvision models"
        ) from None
    known = models.list_models(module=torchvision.models)
    if arch not in known:
        close = difflib.get_close_matches(arch, known, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise SourceError(
            f"unknown torchvision classification model {arch!r}; {hint}"
            "see torchvision.models.list_models()",
            source=spec,
        )
    weights_enum = models.get_model_weights(arch)
    size = _crop_size(weights_enum)
    weights = None
    if pretrained:
        weights = weights_enum.DEFAULT
        _require_cached_url(weights.url, spec)
    with quiet_warnings():
        try:
            module = models.get_model(arch, weights=weights)
        except Exception as exc:
            raise SourceError(f"cannot build {spec}: {first_line(exc)}", source=spec) from None
    return _image_source(
        module,
        spec=spec,
        name=name or suggest_name(arch),
        family=arch,
        size=size,
        batch_size=batch_size,
        pretrained=pretrained,
    )


def load_timm(
    arch: str,
    *,
    spec: str,
    name: str | None = None,
    task: str | None = None,
    pretrained: bool = False,
    batch_size: int = 2,
) -> ModelSource:
    """A timm model by name (``timm:convnext_tiny``), if timm is installed."""
    task = check_task(task, spec)
    import_torch("timm models")
    try:
        import timm
    except ImportError:
        raise MissingDependencyError("timm", extra="vision", feature="timm models") from None
    if not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models(), n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise SourceError(f"unknown timm model {arch!r}; {hint}see timm.list_models()", source=spec)
    kwargs: dict[str, Any] = {}
    if pretrained:
        kwargs = {
            "pretrained": True,
            "pretrained_cfg_overlay": {"file": _timm_cached_file(timm, arch, spec)},
        }
    with quiet_warnings():
        try:
            module = timm.create_model(arch, **kwargs)
        except Exception as exc:
            raise SourceError(f"cannot build {spec}: {first_line(exc)}", source=spec) from None
    cfg = getattr(module, "pretrained_cfg", None) or {}
    input_size = tuple(cfg.get("input_size", (3, 224, 224)))
    return _image_source(
        module,
        spec=spec,
        name=name or suggest_name(arch),
        family=arch,
        size=input_size[1:],
        batch_size=batch_size,
        pretrained=pretrained,
    )


def _image_source(
    module: Any,
    *,
    spec: str,
    name: str,
    family: str,
    size: tuple[int, ...],
    batch_size: int,
    pretrained: bool,
) -> ModelSource:
    module.eval()
    input_name = image_input_name(family)
    factory = float_image_factory((3, *size), input_name)
    example = factory(batch_size, None, 0)
    axes = infer_dynamic_axes(module, factory, (input_name,), (IMAGE_OUTPUT,), None)
    notes = () if pretrained else ("random weights (--pretrained for trained ones)",)
    return ModelSource(
        spec=spec,
        name=name,
        kind="cv",
        family=family,
        input_names=(input_name,),
        output_names=(IMAGE_OUTPUT,),
        example_inputs=example,
        input_factory=factory,
        dynamic_axes=axes,
        module=module,
        task="image-classification",
        notes=notes,
    )


def _crop_size(weights_enum: Any) -> tuple[int, int]:
    try:
        crop = weights_enum.DEFAULT.transforms().crop_size
        height, width = (int(crop[0]), int(crop[-1]))
    except Exception:  # models without a transforms preset keep the common size
        return (224, 224)
    return (height, width)


def _require_cached_url(url: str, spec: str) -> Path:
    torch = import_torch("pretrained weights")
    path = Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]
    if not path.is_file():
        raise SourceError(
            f"pretrained weights for {spec} are not in the local cache ({path}) and mmelocal "
            f"never downloads: copy {url} there, or drop --pretrained for random weights",
            source=spec,
        )
    return path


def _timm_cached_file(timm: Any, arch: str, spec: str) -> str:
    cfg = timm.get_pretrained_cfg(arch)
    hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    if hub_id:
        try:
            from huggingface_hub import try_to_load_from_cache
        except ImportError:
            raise MissingDependencyError(
                "huggingface_hub", extra="vision", feature="pretrained timm weights"
            ) from None
        for filename in ("model.safetensors", "pytorch_model.bin"):
            found = try_to_load_from_cache(hub_id, filename)
            if isinstance(found, str):
                return found
        raise SourceError(
            f"pretrained weights for {spec} ({hub_id}) are not in the local Hugging Face "
            "cache and mmelocal never downloads: drop --pretrained for random weights",
            source=spec,
        )
    url = getattr(cfg, "url", None) if cfg is not None else None
    if url:
        return str(_require_cached_url(url, spec))
    raise SourceError(f"{spec} has no pretrained weights to use", source=spec)


__all__ = [
    "IMAGE_INPUT",
    "IMAGE_OUTPUT",
    "TASKS",
    "check_task",
    "image_input_name",
    "load_timm",
    "load_torchvision",
]
