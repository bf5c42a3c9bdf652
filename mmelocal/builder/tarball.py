"""MME tarballs: create them deterministically, extract them without trusting them.

:func:`create_model_tarball` writes ``model.tar.gz`` with the model folder at its top
level (``tar -C repo -czf model.tar.gz bert_model``), entries sorted, owners and times
fixed, so the same folder always gives the same bytes.

:func:`safe_extract` streams an archive once and refuses, before writing anything for the
member: absolute paths, ``..``, paths that go through a symlink from the archive, links
pointing outside, device files and FIFOs, sparse or duplicate members, more members than
``max_members`` and more unpacked bytes than ``max_unpacked_bytes`` (declared sizes are
checked up front and the bytes actually written are counted). Extraction goes into a
temporary folder next to ``dest`` that is renamed into place only when everything
succeeded, so a half-extracted model is never visible and nothing lands outside ``dest``.
"""

from __future__ import annotations

import errno
import gzip
import logging
import os
import posixpath
import secrets
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, cast

from mmelocal.builder.gunzip import GunzipStream
from mmelocal.errors import (
    BadArchiveError,
    UnsafeArchiveError,
    UserInputError,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_MEMBERS = 10_000
DEFAULT_MAX_UNPACKED_BYTES = 64 * 1024**3
#: file names of a model archive (``model.tar.gz``; ``.tgz`` for short)
TARBALL_SUFFIXES = (".tar.gz", ".tgz")
_CHUNK_BYTES = 1 << 20


def create_model_tarball(
    model_dir: Path | str, out_path: Path | str, *, compresslevel: int = 6, mtime: int = 0
) -> Path:
    """Write ``out_path`` (a ``.tar.gz``) holding ``model_dir`` as its only top-level folder.

    Deterministic: entries are sorted, uid/gid are 0, owner names empty, times are
    ``mtime`` and permissions normalised to 0644/0755. Symlinks are stored only when they
    point inside the model folder. The file is written next to ``out_path`` and renamed.
    """
    src = Path(model_dir)
    return create_folders_tarball(
        [(src, src.resolve().name)], out_path, compresslevel=compresslevel, mtime=mtime
    )


def create_folders_tarball(
    folders: Sequence[tuple[Path, str]],
    out_path: Path | str,
    *,
    compresslevel: int = 6,
    mtime: int = 0,
) -> Path:
    """Like :func:`create_model_tarball` with several top-level folders, each
    ``(folder, name in the archive)`` (an ensemble and its steps)."""
    out = Path(out_path)
    if not folders:
        raise UserInputError("nothing to package: no model folder given")
    for src, _ in folders:
        if not src.is_dir():
            raise UserInputError(f"model folder not found: {src}")
        if out.resolve().is_relative_to(src.resolve()):
            raise UserInputError(
                f"the tarball {out} must not be written inside the model folder {src}"
            )
    if not 1 <= compresslevel <= 9:
        raise UserInputError(f"compresslevel must be in 1..9, got {compresslevel}")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = _new_file_beside(out)
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(
                filename="", mode="wb", fileobj=raw, compresslevel=compresslevel, mtime=0
            ) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for src, root_name in sorted(folders, key=lambda pair: pair[1]):
                _add_folder(tar, src, root_name, mtime)
        os.replace(tmp_name, out)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    log.info("wrote %s (%d bytes)", out, out.stat().st_size)
    return out


def _new_file_beside(out: Path) -> tuple[int, str]:
    """A new, uniquely named file next to ``out``, open for writing, with the mode any file
    the user creates gets (0666 less the umask; ``tempfile.mkstemp`` gives 0600, which the
    rename would keep)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        name = str(out.parent / f".{out.name}.{secrets.token_hex(6)}")
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(out.parent))


def _add_folder(tar: tarfile.TarFile, src: Path, root_name: str, mtime: int) -> None:
    # a folder given through a symlink is stored as the folder (the symlink would point
    # at a path of this machine, and Triton lists only real folders as models)
    src = src.resolve()
    for path in _sorted_walk(src):
        rel = path.relative_to(src).as_posix()
        arcname = root_name if rel == "." else f"{root_name}/{rel}"
        info = tar.gettarinfo(str(path), arcname)
        _normalise(info, mtime)
        if info.issym():
            _check_inside_link(src, path)
        if info.isreg():
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
        elif info.isdir() or info.issym():
            tar.addfile(info)
        else:
            raise UserInputError(f"{path} is not a file, folder or symlink; remove it")


def _sorted_walk(root: Path) -> list[Path]:
    found = [root]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        found.extend(base / name for name in sorted(dirnames + filenames))
    return sorted(found, key=lambda p: p.relative_to(root).parts)


def _normalise(info: tarfile.TarInfo, mtime: int) -> None:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = mtime
    if info.isdir() or (info.isreg() and info.mode & 0o111):
        info.mode = 0o755
    else:
        info.mode = 0o644


def _check_inside_link(root: Path, link: Path) -> None:
    target = (link.parent / os.readlink(link)).resolve()
    if not target.is_relative_to(root.resolve()):
        raise UserInputError(f"symlink {link} points outside the model folder; replace it")


def safe_extract(
    tar_path: Path | str,
    dest: Path | str,
    *,
    max_members: int = DEFAULT_MAX_MEMBERS,
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
    overwrite: bool = False,
) -> Path:
    """Extract the gzip tar ``tar_path`` into the folder ``dest`` (created); return ``dest``.

    Raises :class:`~mmelocal.errors.UnsafeArchiveError` (or its subclass
    :class:`BadArchiveError` for corrupt, truncated or non-gzip files) and leaves no trace
    when anything is wrong. An existing non-empty ``dest`` is replaced only with
    ``overwrite=True``.
    """
    src = Path(tar_path)
    target = Path(dest)
    if max_members < 1 or max_unpacked_bytes < 0:
        raise UserInputError(
            f"max_members must be >= 1 and max_unpacked_bytes >= 0, "
            f"got {max_members} and {max_unpacked_bytes}"
        )
    if not src.is_file():
        raise UserInputError(f"archive not found: {src}")
    if target.exists() and not target.is_dir():
        raise UserInputError(f"{target} exists and is not a folder")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise UserInputError(f"{target} is not empty; pass overwrite=True to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.extract-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        _extract_into(src, tmp, max_members, max_unpacked_bytes)
        _place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _place(tmp: Path, target: Path) -> None:
    if target.is_dir():
        if not any(target.iterdir()):
            target.rmdir()
        else:
            aside = tmp.with_name(tmp.name + ".old")
            os.rename(target, aside)
            try:
                os.rename(tmp, target)
            finally:
                shutil.rmtree(aside, ignore_errors=True)
            return
    os.rename(tmp, target)


def _extract_into(src: Path, root: Path, max_members: int, max_unpacked_bytes: int) -> None:
    with open(src, "rb") as raw:
        if raw.read(2) != b"\x1f\x8b":
            raise BadArchiveError(
                f"{src} is not a gzip file (SageMaker expects a gzip-compressed model.tar.gz)",
                archive=src,
            )
        raw.seek(0)
        try:
            with GunzipStream(raw, chunk_bytes=_CHUNK_BYTES) as gz:
                stream = cast(IO[bytes], gz)
                with tarfile.open(fileobj=stream, mode="r|", bufsize=_CHUNK_BYTES) as tar:
                    _Extractor(src, root, max_members, max_unpacked_bytes).run(tar)
                gz.drain()  # reach the gzip trailer: zlib checks the CRC and length
        except UnsafeArchiveError:
            raise
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            reason = str(exc) or type(exc).__name__
            raise BadArchiveError(
                f"{src} is not a valid tar.gz (corrupt or truncated): {reason}", archive=src
            ) from None
        except OSError as exc:
            raise UnsafeArchiveError(f"cannot extract {src}: {exc}", archive=src) from None


class _Extractor:
    """One streaming pass over the members with the safety checks."""

    def __init__(self, src: Path, root: Path, max_members: int, max_bytes: int) -> None:
        self.src = src
        self.root = root
        self.max_members = max_members
        self.max_bytes = max_bytes
        self.written_bytes = 0
        self.members = 0
        self.files: set[str] = set()
        self.dirs: set[str] = {""}
        self.links: set[str] = set()

    def refuse(self, member: str, why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(
            f"{self.src}: refused member {member!r}: {why}", archive=self.src, member=member
        )

    def run(self, tar: tarfile.TarFile) -> None:
        for info in tar:
            self.members += 1
            if self.members > self.max_members:
                raise UnsafeArchiveError(
                    f"{self.src} has more than {self.max_members} members (max_members)",
                    archive=self.src,
                )
            name = self.check_name(info)
            if info.isdir():
                self.make_dir(info.name, name)
            elif info.isreg() and not info.issparse():
                self.write_file(tar, info, name)
            elif info.issym():
                self.make_symlink(info, name)
            elif info.islnk():
                self.make_hardlink(info, name)
            elif info.ischr() or info.isblk():
                raise self.refuse(info.name, "device files are not allowed")
            elif info.isfifo():
                raise self.refuse(info.name, "FIFOs are not allowed")
            else:
                raise self.refuse(info.name, f"unsupported member type {info.type!r}")
        if self.members == 0:
            raise BadArchiveError(f"{self.src} is an empty archive", archive=self.src)
        real_root = os.path.realpath(self.root)
        for link in sorted(self.links):
            real = os.path.realpath(self.root / link)
            if real != real_root and not real.startswith(real_root + os.sep):
                raise self.refuse(link, "symlink resolves outside the archive")

    def check_name(self, info: tarfile.TarInfo) -> str:
        raw = info.name
        if not raw or "\x00" in raw:
            raise self.refuse(raw, "empty or invalid name")
        if raw.startswith(("/", "\\")) or (len(raw) > 1 and raw[1] == ":"):
            raise self.refuse(raw, "absolute path")
        parts = [p for p in raw.replace("\\", "/").split("/") if p not in ("", ".")]
        if ".." in parts:
            raise self.refuse(raw, "path contains '..'")
        name = "/".join(parts)
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in self.links:
                raise self.refuse(raw, "path goes through a symlink from the archive")
        if name in self.files or name in self.links:
            raise self.refuse(raw, "duplicate member")
        if name in self.dirs and not info.isdir():
            raise self.refuse(raw, "replaces a folder")
        return name

    def ensure_parent(self, name: str) -> Path:
        parent = posixpath.dirname(name)
        if parent not in self.dirs:
            if parent in self.files:
                raise self.refuse(name, "parent is a file")
            os.makedirs(self.root / parent, exist_ok=True)
            while parent and parent not in self.dirs:
                self.dirs.add(parent)
                parent = posixpath.dirname(parent)
        return self.root / name

    def make_dir(self, raw: str, name: str) -> None:
        if name == "" or name in self.dirs:
            return
        if name in self.files:
            raise self.refuse(raw, "folder replaces a file")
        path = self.ensure_parent(name)
        path.mkdir(mode=0o755)
        self.dirs.add(name)

    def write_file(self, tar: tarfile.TarFile, info: tarfile.TarInfo, name: str) -> None:
        if info.size < 0 or self.written_bytes + info.size > self.max_bytes:
            raise UnsafeArchiveError(
                f"{self.src} unpacks to more than {self.max_bytes} bytes (max_unpacked_bytes); "
                f"member {info.name!r} alone declares {info.size}",
                archive=self.src,
                member=info.name,
            )
        path = self.ensure_parent(name)
        source = tar.extractfile(info)
        if source is None:  # pragma: no cover - isreg() members always have data
            raise self.refuse(info.name, "no data")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(path, flags, 0o600), "wb") as out:
            while True:
                chunk = source.read(_CHUNK_BYTES)
                if not chunk:
                    break
                self.written_bytes += len(chunk)
                if self.written_bytes > self.max_bytes:
                    raise UnsafeArchiveError(
                        f"{self.src} unpacks to more than {self.max_bytes} bytes "
                        "(max_unpacked_bytes)",
                        archive=self.src,
                        member=info.name,
                    )
                out.write(chunk)
        os.chmod(path, 0o755 if info.mode & 0o111 else 0o644)
        self.files.add(name)

    def link_target(self, info: tarfile.TarInfo, name: str, *, relative_to_member: bool) -> str:
        target = info.linkname.replace("\\", "/")
        if not target or target.startswith("/") or (len(target) > 1 and target[1] == ":"):
            raise self.refuse(info.name, f"link to absolute path {info.linkname!r}")
        base = posixpath.dirname(name) if relative_to_member else ""
        joined = posixpath.normpath(posixpath.join(base, target))
        if joined == ".." or joined.startswith("../"):
            raise self.refuse(info.name, f"link points outside the archive: {info.linkname!r}")
        return "" if joined == "." else joined

    def make_symlink(self, info: tarfile.TarInfo, name: str) -> None:
        self.link_target(info, name, relative_to_member=True)
        path = self.ensure_parent(name)
        os.symlink(info.linkname, path)
        self.links.add(name)

    def make_hardlink(self, info: tarfile.TarInfo, name: str) -> None:
        target = self.link_target(info, name, relative_to_member=False)
        if target not in self.files:
            raise self.refuse(info.name, f"hard link to {info.linkname!r}, not an earlier file")
        path = self.ensure_parent(name)
        os.link(self.root / target, path)
        self.files.add(name)


def is_gzip(path: Path | str) -> bool:
    """True when the file starts with the gzip magic bytes."""
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


__all__ = [
    "DEFAULT_MAX_MEMBERS",
    "DEFAULT_MAX_UNPACKED_BYTES",
    "TARBALL_SUFFIXES",
    "BadArchiveError",
    "create_folders_tarball",
    "create_model_tarball",
    "is_gzip",
    "safe_extract",
]
