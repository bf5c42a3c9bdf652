"""A Triton model repository on disk: add a model or a version atomically, list models.

Layout::

    <repo>/<name>/config.pbtxt
    <repo>/<name>/<version>/model.{pt,onnx,plan,py}   (+ ONNX external data files)

:func:`add_model` builds the complete new model folder in a staging folder on the same
filesystem, then swaps it in with one rename (``renameat2(RENAME_EXCHANGE)`` on Linux
when the model already exists, else rename-aside / rename-in / delete-old). Readers
never see a half-written model; other models are never touched; versions other than
the one being written are kept (hard-linked into the new folder, not copied).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import BACKEND_FILES, PLATFORM_FILES
from mmelocal.errors import UserInputError

log = logging.getLogger(__name__)

REFERENCE_FILE = "mmelocal_reference.npz"
"""Reference inputs/outputs recorded by the build, at the top of the model folder."""


def artifact_filename(config: Any) -> str | None:
    """The file Triton looks for in a version folder for this config, or None if unknown.

    ``default_model_filename`` wins; else the platform's or backend's default name.
    """
    if config.default_model_filename:
        return str(config.default_model_filename)
    if config.platform:
        return PLATFORM_FILES.get(config.platform)
    if config.backend:
        return BACKEND_FILES.get(config.backend)
    return None


def add_model(
    repo: Path | str,
    *,
    name: str,
    config: Any,
    artifact: Path | str,
    version: int = 1,
    extra_files: Mapping[str, Path | str | bytes] | None = None,
) -> Path:
    """Put a model (or a new version of it) into ``repo`` atomically; return the model folder.

    ``config`` is a ``model_config_pb2.ModelConfig``; its name is set to ``name``.
    ``artifact`` is the exported file (or a folder, e.g. a SavedModel); it is copied to
    ``<name>/<version>/<file name for the platform>`` with any ONNX external data files.
    ``extra_files`` maps paths relative to the model folder to a file or bytes.
    """
    from mmelocal.builder.model_config import write_config

    repo = Path(repo)
    artifact = Path(artifact)
    _check_name(name)
    if not isinstance(version, int) or version < 1:
        raise UserInputError(f"version must be an integer >= 1, got {version!r}")
    if not artifact.exists():
        raise UserInputError(f"artifact not found: {artifact}")
    filename = artifact_filename(config)
    if filename is None:
        raise UserInputError(
            f"no artifact file name known for platform={config.platform!r} "
            f"backend={config.backend!r}; set default_model_filename in the config"
        )
    repo.mkdir(parents=True, exist_ok=True)
    target = repo / name
    if target.exists() and not target.is_dir():
        raise UserInputError(f"{target} exists and is not a folder; remove it first")

    stage_root = Path(tempfile.mkdtemp(prefix=f".mmelocal-stage-{name}-", dir=_stage_parent(repo)))
    try:
        staged = stage_root / name
        staged.mkdir()
        if target.is_dir():
            _link_tree_except(target, staged, skip={str(version), "config.pbtxt"})
        cfg = type(config)()
        cfg.CopyFrom(config)
        cfg.name = name
        write_config(cfg, staged / "config.pbtxt")
        version_dir = staged / str(version)
        version_dir.mkdir(exist_ok=True)
        _copy_artifact(artifact, version_dir / filename)
        for rel, content in (extra_files or {}).items():
            dest = _inside(staged, rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                dest.write_bytes(content)
            else:
                shutil.copy2(content, dest)
        _swap_in(staged, target, stage_root)
    finally:
        shutil.rmtree(stage_root, ignore_errors=True)
    log.info("added model %s version %d to %s", name, version, repo)
    return target


def list_models(repo: Path | str) -> list[str]:
    """Names of the model folders (those holding a config.pbtxt) in ``repo``, sorted."""
    root = Path(repo)
    if not root.is_dir():
        raise UserInputError(f"model repository not found: {root}")
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / "config.pbtxt").is_file()
    )


def model_versions(model_dir: Path | str) -> list[int]:
    """Numeric version folders of a model folder, sorted."""
    return sorted(int(p.name) for p in Path(model_dir).iterdir() if p.is_dir() and p.name.isdigit())


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise UserInputError(
            f"model name must be a plain folder name (no '/', not starting with '.'), got {name!r}"
        )


def _inside(root: Path, rel: str) -> Path:
    dest = (root / rel).resolve()
    if not dest.is_relative_to(root.resolve()):
        raise UserInputError(f"extra file {rel!r} would land outside the model folder")
    return dest


def _stage_parent(repo: Path) -> Path:
    """Stage next to the repository (same filesystem) so the final rename is atomic."""
    parent = repo.resolve().parent
    try:
        if os.access(parent, os.W_OK) and parent.stat().st_dev == repo.stat().st_dev:
            return parent
    except OSError:
        pass
    return repo


def _link_tree_except(src: Path, dst: Path, *, skip: set[str]) -> None:
    for entry in src.iterdir():
        if entry.name in skip:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, dst / entry.name, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(entry), str(dst / entry.name))


def _link_or_copy(src: str, dst: str) -> str:
    if not os.path.islink(src):
        try:
            os.link(src, dst)
            return dst
        except OSError:
            pass
    return str(shutil.copy2(src, dst, follow_symlinks=False))


def _copy_artifact(artifact: Path, dest: Path) -> None:
    if artifact.is_dir():
        shutil.copytree(artifact, dest)
        return
    shutil.copy2(artifact, dest)
    if artifact.suffix == ".onnx":
        for rel in onnx_external_files(artifact):
            src = artifact.parent / rel
            if not src.is_file():
                raise UserInputError(f"ONNX external data file {rel!r} of {artifact} is missing")
            out = _inside(dest.parent, rel)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)


def onnx_external_files(path: Path | str) -> list[str]:
    """Relative locations of the external data files an ONNX model refers to."""
    from mmelocal.builder.tensors import _import_onnx

    onnx = _import_onnx()
    model = onnx.load(str(path), load_external_data=False)
    found: dict[str, None] = {}
    tensors = getattr(onnx.external_data_helper, "_get_all_tensors", None)
    for tensor in tensors(model) if tensors else model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    found[entry.value] = None
    return list(found)


def _swap_in(staged: Path, target: Path, stage_root: Path) -> None:
    if not target.exists():
        os.rename(staged, target)
        return
    if _rename_exchange(staged, target):
        return  # staged now holds the old model, removed with stage_root
    aside = stage_root / (target.name + ".old")
    os.rename(target, aside)
    try:
        os.rename(staged, target)
    except OSError:
        os.rename(aside, target)
        raise


def _rename_exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    try:
        renameat2 = ctypes.CDLL(libc_name, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EXDEV, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


__all__ = [
    "BACKEND_FILES",
    "PLATFORM_FILES",
    "REFERENCE_FILE",
    "add_model",
    "artifact_filename",
    "list_models",
    "model_versions",
    "onnx_external_files",
]
