"""Packaging for MME: one ``model.tar.gz``, or N copies that cost the bytes of one.

Capacity tests load the same model under many names (``model-0.tar.gz`` ...
``model-199.tar.gz``). :func:`package_copies` makes those names hard links to one file,
so 200 copies of a 90 MB model take 90 MB. When the filesystem refuses a hard link
(another device, no link support, too many links) the copy is made with the cheapest
method that works, in this order:

1. ``hardlink`` - ``os.link`` (same inode, no extra bytes);
2. ``reflink``  - ``ioctl(FICLONE)``, a copy-on-write clone (btrfs, XFS, bcachefs: no
   extra bytes until written);
3. ``copy``     - ``shutil.copyfile`` (kernel-side copy where possible; full bytes).

Every name is written as a temporary file and renamed into place, so a re-run replaces
existing copies safely and a reader never sees a partial file.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from mmelocal.builder.mme_layout import MmeLayout, ensemble_step_names, is_ensemble, read_layout
from mmelocal.builder.tarball import create_folders_tarball, is_gzip, safe_extract
from mmelocal.errors import MmeLocalError, UserInputError

log = logging.getLogger(__name__)

_FICLONE = 0x40049409  # _IOW(0x94, 9, int) from linux/fs.h
CopyCallback = Callable[[int, Path, str], None]
"""Called after each copy with (index, path, method) - method is hardlink/reflink/copy."""
#: the most copies one call makes (far above what one GPU holds; stops a typo filling a disk)
MAX_COPIES = 100_000


def package_model(
    model_dir: Path | str, out_dir: Path | str, *, filename: str = "model.tar.gz"
) -> Path:
    """Write ``out_dir/model.tar.gz`` in the seed layout: the model folder at the archive's
    top level (an ensemble: with its steps beside it).

    ``model_dir`` is a model folder (an ensemble's: packed with the step folders beside
    it), a folder holding an ensemble and its steps, or a
    ``.tar.gz`` in any layout SageMaker serves (re-packed; e.g. the root layout that
    packaging helpers write becomes ``<name>/config.pbtxt``)."""
    src = Path(model_dir)
    if src.is_file():
        return _repack(src, _out_folder(out_dir) / filename)
    folders = _folder_plan(src)
    return create_folders_tarball(folders, _out_folder(out_dir) / filename)


def packaging_problem(model_dir: Path | str, *, copies: bool = False) -> str | None:
    """Why :func:`package_model` (``copies``: :func:`package_copies`) would refuse
    ``model_dir`` (its error's message), or None when it would package it; nothing is
    written. The packager reads every config and the layout, so a config it cannot parse
    stops it whatever checks a caller skips (a tarball given for copies is copied as it
    is: only its gzip header is read)."""
    src = Path(model_dir)
    try:
        if src.is_file() and copies:
            if not is_gzip(src):
                return f"{src} is not a gzip file; pass a model folder or a model.tar.gz"
        elif src.is_file():
            import tempfile

            with tempfile.TemporaryDirectory(prefix="mmelocal-repack-") as work:
                _repack_plan(src, Path(work))
        else:
            _folder_plan(src)
    except MmeLocalError as exc:
        return str(exc)
    return None


def _folder_plan(src: Path) -> list[tuple[Path, str]]:
    """What to pack from a model folder (or an ensemble with its steps), seed layout."""
    if not src.is_dir():
        raise UserInputError(f"model folder not found: {src}")
    layout = read_layout(src)
    _refuse_repository(src, layout)
    layout.raise_for_errors(str(src))
    if layout.rule == "root" and is_ensemble(src):
        return _ensemble_with_steps(src.resolve())
    return _archive_folders(layout, src.resolve().name)


def _ensemble_with_steps(ensemble: Path) -> list[tuple[Path, str]]:
    """An ensemble's model folder and the step folders beside it, where Triton loads them
    from (the steps of a step that is an ensemble too): SageMaker's Triton loads an
    ensemble's steps from the same archive, by folder name."""
    repo = ensemble.parent
    plan: dict[str, Path] = {ensemble.name: ensemble}
    pending = [ensemble]
    while pending:
        current = pending.pop()
        names = ensemble_step_names(current)
        missing = [n for n in names if not (repo / n / "config.pbtxt").is_file()]
        if missing:
            raise UserInputError(
                f"ensemble {current.name!r} names steps {missing} with no folder beside it in "
                f"{repo}: SageMaker's Triton loads them from the same tarball; put their "
                "model folders next to the ensemble"
            )
        for name in names:
            if name not in plan:
                plan[name] = repo / name
                if is_ensemble(repo / name):
                    pending.append(repo / name)
    return [(folder, name) for name, folder in plan.items()]


def _repack(tar_path: Path, dest: Path) -> Path:
    """Extract a tarball and pack what SageMaker would serve from it in the seed layout."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mmelocal-repack-") as work:
        return create_folders_tarball(_repack_plan(tar_path, Path(work)), dest)


def _repack_plan(tar_path: Path, work: Path) -> list[tuple[Path, str]]:
    """Extract ``tar_path`` under ``work``: what to pack from it in the seed layout."""
    if not is_gzip(tar_path):
        raise UserInputError(
            f"{tar_path} is not a gzip file; pass a model folder or a model.tar.gz"
        )
    root = safe_extract(tar_path, work / "x")
    layout = read_layout(root)
    layout.raise_for_errors(str(tar_path))
    stem = tar_path.name.removesuffix(".gz").removesuffix(".tar").removesuffix(".tgz")
    return _archive_folders(layout, stem)


def _archive_folders(layout: MmeLayout, root_name: str) -> list[tuple[Path, str]]:
    """``(folder, name in the archive)`` for every folder a load touches; a root-layout
    model gets its config's name, else ``root_name``."""
    from mmelocal.builder.model_config import read_config

    assert layout.served_dir is not None  # raise_for_errors ran
    if layout.rule == "root":
        name = str(read_config(layout.served_dir / "config.pbtxt").name) or root_name
        return [(layout.served_dir, name)]
    return list(layout.named_folders)


def package_copies(
    model_dir_or_tarball: Path | str,
    out_dir: Path | str,
    *,
    copies: int,
    prefix: str = "model-",
    on_copy: CopyCallback | None = None,
) -> list[Path]:
    """Create ``out_dir/{prefix}{i}.tar.gz`` for i in 0..copies-1; return their paths.

    A model folder is packaged first (into ``{prefix}0.tar.gz``); a ``.tar.gz`` is used
    as is. Copies are hard links to the first one where possible (see the module doc
    for the fallbacks). Existing files with these names are replaced.
    """
    src = Path(model_dir_or_tarball)
    out = Path(out_dir)
    if not 1 <= copies <= MAX_COPIES:
        raise UserInputError(f"copies must be >= 1 and <= {MAX_COPIES}, got {copies}")
    if not prefix or prefix.startswith(".") or "/" in prefix or not prefix.isprintable():
        raise UserInputError(
            f"prefix must be a plain file-name prefix (printable, no '/', no leading '.'), "
            f"got {prefix!r}"
        )
    if not src.exists():
        raise UserInputError(f"model folder or tarball not found: {src}")
    if not src.is_dir() and not src.is_file():
        raise UserInputError(f"{src} is neither a model folder nor a file (a pipe, a device?)")
    folders = _folder_plan(src) if src.is_dir() else []
    if src.is_file() and not is_gzip(src):
        raise UserInputError(f"{src} is not a gzip file; pass a model folder or a model.tar.gz")
    out = _out_folder(out)
    paths = [out / f"{prefix}{i}.tar.gz" for i in range(copies)]
    first = paths[0]
    if folders:
        create_folders_tarball(folders, first)
        method = "packaged"
    elif _same_file(src, first):
        method = "hardlink"
    else:
        method = _place_copy(src, first)
    if on_copy:
        on_copy(0, first, method)
    for index, path in enumerate(paths[1:], start=1):
        method = "hardlink" if _same_file(first, path) else _place_copy(first, path)
        if on_copy:
            on_copy(index, path, method)
    log.info("%d copies of %s in %s", copies, src, out)
    return paths


def _refuse_repository(src: Path, layout: MmeLayout) -> None:
    """A repository (several model folders, no ensemble) is not one MME model."""
    if layout.rule != "ambiguous":
        return
    models = sorted(p.parent.name for p in src.glob("*/config.pbtxt"))
    if models:
        raise UserInputError(
            f"{src} is a model repository; package one of its model folders "
            f"({', '.join(str(src / m) for m in models[:3])}{', ...' if len(models) > 3 else ''})"
        )


def _out_folder(out_dir: Path | str) -> Path:
    """``out_dir``, created if missing; a UserInputError when it is a file."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserInputError(f"output folder {out} is a file; name a folder for the tarball(s)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"cannot create the output folder {out}: {exc.strerror}") from exc
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _place_copy(src: Path, dest: Path) -> str:
    """Make ``dest`` a copy of ``src`` (link, clone or copy) via a temp name and rename."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        method = _link_clone_or_copy(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return method


def _link_clone_or_copy(src: Path, dest: Path) -> str:
    try:
        os.link(src, dest)
        return "hardlink"
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
        log.debug("hard link %s -> %s refused (%s); trying a reflink", src, dest, exc)
    if _reflink(src, dest):
        return "reflink"
    shutil.copyfile(src, dest)
    return "copy"


def _reflink(src: Path, dest: Path) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux/macOS
        return False
    with open(src, "rb") as fin, open(dest, "wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
            return True
        except OSError:
            pass
    with contextlib.suppress(OSError):
        dest.unlink()
    return False


def disk_usage_bytes(paths: Iterable[Path | str]) -> int:
    """Bytes on disk taken by ``paths`` (st_blocks * 512, each inode counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for p in paths:
        st = os.stat(p)
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            seen.add(key)
            total += st.st_blocks * 512
    return total


__all__ = [
    "MAX_COPIES",
    "CopyCallback",
    "disk_usage_bytes",
    "package_copies",
    "package_model",
    "packaging_problem",
]
