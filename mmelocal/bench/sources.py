"""What the bench commands measure: a built model folder, a ``model.tar.gz``, or a source to build.

:func:`resolve_model` takes what the user named. An existing model folder (with
``config.pbtxt``) or ``.tar.gz`` is used as it is; anything else is a builder source spec
(``minilm``, a Hugging Face folder, ``torchvision:resnet18``, a ``.pt``/``.onnx`` file) and
is built with :func:`mmelocal.builder.build.build_model` in the requested format.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import EXPORT_FORMATS
from mmelocal.errors import UserInputError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PreparedModel:
    """A model ready to package: ``path`` is a model folder or a ``.tar.gz``."""

    path: Path
    name: str
    model_format: str
    built: bool
    build_s: float = 0.0


def is_prebuilt(source: str | Path) -> bool:
    """True when ``source`` is an existing model folder or tarball (nothing to build)."""
    path = Path(source)
    if path.is_dir():
        return (path / "config.pbtxt").is_file()
    return path.is_file() and path.name.endswith((".tar.gz", ".tgz"))


def check_format(model_format: str) -> str:
    """Return ``model_format`` if known, else raise UserInputError naming the choices."""
    if model_format not in EXPORT_FORMATS:
        raise UserInputError(
            f"format must be one of {', '.join(EXPORT_FORMATS)}, got {model_format!r}"
        )
    return model_format


def resolve_model(
    source: str | Path,
    *,
    workdir: Path,
    model_format: str = "torchscript",
    name: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    verify: bool = True,
    progress: Callable[[str, str], None] | None = None,
) -> PreparedModel:
    """The model to measure: ``source`` itself when prebuilt, else a fresh build of it."""
    if is_prebuilt(source):
        path = Path(source)
        stem = path.name.split(".")[0] if path.is_file() else path.name
        return PreparedModel(path=path, name=stem, model_format="prebuilt", built=False)
    check_format(model_format)
    from mmelocal.builder.build import BuildOptions, build_model

    logger.info("building %s as %s for the bench", source, model_format)
    result = build_model(
        str(source),
        repo=workdir / "repository",
        progress=progress,
        options=BuildOptions(
            name=name, format=model_format, overrides=dict(overrides or {}), verify=verify
        ),
    )
    return PreparedModel(
        path=result.model_dir,
        name=result.name,
        model_format=model_format,
        built=True,
        build_s=sum(result.timings_s.values()),
    )


__all__ = [
    "PreparedModel",
    "check_format",
    "is_prebuilt",
    "resolve_model",
]
