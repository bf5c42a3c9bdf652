"""Image classifiers by name: ``torchvision:NAME`` and ``timm:NAME``.

``weights`` picks the weights (see :mod:`mmelocal.builder.sources.weights`): ``None``
or ``"none"`` keeps random weights (the library's default, for capacity and latency
work; the CLI asks for ``DEFAULT``), ``"DEFAULT"`` or a name downloads trained ones
through the libraries' own caches (``TORCH_HOME``, the Hugging Face cache for timm
weights hosted on the hub) unless they are there already. The input is one float32
tensor named ``input`` of shape ``(batch, 3, H, W)`` with H and W from the model's
weights/config (224 for most), named as in the family preset (``pixel_values``, the Hugging Face
name); the output is ``logits``.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmelocal.builder.runners import first_line, import_torch, quiet_warnings
from mmelocal.builder.sources.base import ModelSource, float_image_factory, suggest_name
from mmelocal.builder.sources.shapes import infer_dynamic_axes
from mmelocal.builder.sources.weights import (
    DEFAULT,
    fetch_checkpoint,
    normalise_weights,
    torchvision_weights,
    weights_note,
)
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


#: what a library's builder gives: the module, its input size (H, W), the weights' label
_Built = tuple[Any, tuple[int, ...], str | None]


def load_image_model(
    library: str,
    arch: str,
    *,
    spec: str,
    name: str | None = None,
    task: str | None = None,
    weights: str | None = None,
    batch_size: int = 2,
) -> ModelSource:
    """An image classifier of ``library`` (``torchvision`` or ``timm``) by architecture
    name (``resnet18``, ``convnext_tiny``).

    For timm, ``weights`` other than DEFAULT is a pretrained tag: ``timm:resnet50`` with
    ``weights="a1_in1k"`` is timm's ``resnet50.a1_in1k``.
    """
    build = _BUILDERS[library]
    task = check_task(task, spec)
    import_torch(f"{library} models")
    module, size, label = build(arch, weights, spec)
    module.eval()
    input_name = image_input_name(arch)
    factory = float_image_factory((3, *size), input_name)
    return ModelSource(
        spec=spec,
        name=name or suggest_name(arch),
        kind="cv",
        family=arch,
        input_names=(input_name,),
        output_names=(IMAGE_OUTPUT,),
        example_inputs=factory(batch_size, None, 0),
        input_factory=factory,
        dynamic_axes=infer_dynamic_axes(module, factory, (input_name,), (IMAGE_OUTPUT,), None),
        module=module,
        task=task,
        notes=(weights_note(label),),
    )


def _torchvision_model(arch: str, weights: str | None, spec: str) -> _Built:
    """(module, input size, weights label) of a torchvision classification model."""
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
    wanted = normalise_weights(weights)
    chosen = None if wanted is None else torchvision_weights(weights_enum, wanted, spec)
    size = _crop_size(chosen or weights_enum.DEFAULT)
    if chosen is not None:
        fetch_checkpoint(chosen.url, spec=spec)  # then torchvision finds it in its cache
    module = _create(spec, models.get_model, arch, weights=chosen)
    return module, size, None if chosen is None else f"{type(chosen).__name__}.{chosen.name}"


def _timm_model(arch: str, weights: str | None, spec: str) -> _Built:
    """(module, input size, weights label) of a timm model, if timm is installed."""
    try:
        import timm
    except ImportError:
        raise MissingDependencyError("timm", extra="vision", feature="timm models") from None
    if not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models(), n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise SourceError(f"unknown timm model {arch!r}; {hint}see timm.list_models()", source=spec)
    kwargs: dict[str, Any] = {}
    wanted = normalise_weights(weights)
    label = None
    if wanted is not None:
        label = _timm_tagged_name(timm, arch, wanted, spec)
        kwargs = {
            "pretrained": True,
            "pretrained_cfg_overlay": {"file": str(_timm_weights_file(timm, label, spec))},
        }
    module = _create(spec, timm.create_model, label or arch, **kwargs)
    cfg = getattr(module, "pretrained_cfg", None) or {}
    input_size = tuple(cfg.get("input_size", (3, 224, 224)))
    return module, input_size[1:], label


#: library -> (arch, weights, spec) -> (module, input size, weights label)
_BUILDERS: dict[str, Callable[[str, str | None, str], _Built]] = {
    "torchvision": _torchvision_model,
    "timm": _timm_model,
}


def _create(spec: str, create: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``create(*args, **kwargs)``, quietly; SourceError naming ``spec`` when it fails."""
    with quiet_warnings():
        try:
            return create(*args, **kwargs)
        except Exception as exc:
            raise SourceError(f"cannot build {spec}: {first_line(exc)}", source=spec) from None


def _crop_size(weights: Any) -> tuple[int, int]:
    try:
        crop = weights.transforms().crop_size
        height, width = (int(crop[0]), int(crop[-1]))
    except Exception:  # models without a transforms preset keep the common size
        return (224, 224)
    return (height, width)


def _timm_tagged_name(timm: Any, arch: str, weights: str, spec: str) -> str:
    """``arch.tag`` for the DEFAULT tag or the one named, or SourceError listing them."""
    tagged = timm.list_pretrained(f"{arch}.*")
    if not tagged:
        raise SourceError(f"{spec} has no pretrained weights; pass --weights none", source=spec)
    if weights == DEFAULT:
        cfg = timm.get_pretrained_cfg(arch)
        tag = getattr(cfg, "tag", None) if cfg is not None else None
        return f"{arch}.{tag}" if tag else str(tagged[0])
    name = f"{arch}.{weights.removeprefix(arch + '.')}"
    if name not in tagged:
        tags = ", ".join(t.split(".", 1)[1] for t in tagged)
        raise SourceError(
            f"{spec} has no weights {weights!r}; pass --weights with DEFAULT, none or one "
            f"of {tags}",
            source=spec,
        )
    return name


def _timm_weights_file(timm: Any, name: str, spec: str) -> Path:
    """The weights file of ``name`` (``arch.tag``), fetched into the hub or torch cache."""
    cfg = timm.get_pretrained_cfg(name)
    hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    if hub_id:
        from mmelocal.builder.sources.hub import fetch_hub_file

        repo_id, _, revision = str(hub_id).partition("@")
        return fetch_hub_file(
            repo_id,
            ("model.safetensors", "pytorch_model.bin"),
            spec=spec,
            revision=revision or None,
        )
    url = getattr(cfg, "url", None) if cfg is not None else None
    if url:
        return fetch_checkpoint(str(url), spec=spec)
    raise SourceError(f"{spec} has no downloadable weights; pass --weights none", source=spec)


__all__ = [
    "IMAGE_INPUT",
    "IMAGE_OUTPUT",
    "TASKS",
    "check_task",
    "image_input_name",
    "load_image_model",
]
