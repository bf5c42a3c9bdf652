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
from mmelocal.builder.tarball import TARBALL_SUFFIXES
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
    """True when ``source`` is an existing model folder or tarball (nothing to build).

    Raises UserInputError for a tarball's name that is no file: a mistyped path, never a
    source to build (it was looked up on the Hugging Face hub as a model name)."""
    path = Path(source)
    if path.is_dir():
        return (path / "config.pbtxt").is_file()
    if path.name.lower().endswith(TARBALL_SUFFIXES):
        if not path.is_file():
            raise UserInputError(
                f"{source} does not exist (no such file): give the path of a model.tar.gz, "
                "a built model folder or a source to build"
            )
        return True
    return False


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


def served_model_facts(path: Path, built_format: str = "prebuilt") -> tuple[str, str]:
    """(format, weights precision) of the model ``path`` serves (a model folder, or a
    ``model.tar.gz`` read as SageMaker's Triton reads it): what a measurement of it records.
    The format of a prebuilt model comes from its ``config.pbtxt`` platform (``prebuilt``
    when that names none); ``built_format`` stays for a model just built. Precision: see
    :func:`mmelocal.builder.precision.weights_precision` ("" when the artifact cannot say)."""
    import tempfile

    from mmelocal.builder.backends import PLATFORM_FORMATS
    from mmelocal.builder.model_config import read_config
    from mmelocal.builder.precision import weights_precision

    def facts(model_dir: Path) -> tuple[str, str]:
        fmt = built_format
        if fmt == "prebuilt" and (model_dir / "config.pbtxt").is_file():
            cfg = read_config(model_dir / "config.pbtxt")
            fmt = PLATFORM_FORMATS.get(str(cfg.platform) or str(cfg.backend), built_format)
        return fmt, weights_precision(model_dir)

    if Path(path).is_dir():
        return facts(Path(path))
    from mmelocal.builder.mme_layout import read_layout
    from mmelocal.builder.tarball import safe_extract

    with tempfile.TemporaryDirectory(prefix="mmelocal-peek-") as tmp:
        layout = read_layout(safe_extract(Path(path), Path(tmp) / "x"))
        layout.raise_for_errors(str(path))
        if layout.served_dir is None:
            return built_format, ""
        return facts(layout.served_dir)


__all__ = [
    "PreparedModel",
    "check_format",
    "is_prebuilt",
    "resolve_model",
    "served_model_facts",
]
