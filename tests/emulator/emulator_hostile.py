"""Hostile and broken tarballs for the emulator's bad-input tests."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

from mmelocal.testing.tiny_model import CONFIG, MODEL_PY


def _tar(path: Path, add: Callable[[tarfile.TarFile], object]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        add(tar)
    return path


# each adds to ``tar`` and returns it, so that one lambda can add several members


def _file(tar: tarfile.TarFile, name: str, data: bytes) -> tarfile.TarFile:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return tar


def _model(tar: tarfile.TarFile, name: str = "m") -> tarfile.TarFile:
    _file(tar, f"{name}/config.pbtxt", CONFIG.format(name=name, scale=2.0).encode())
    return _file(tar, f"{name}/1/model.py", MODEL_PY.encode())


def _special(tar: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> tarfile.TarFile:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    tar.addfile(info)
    return tar


def make_hostile(store: Path, escape_dir: Path) -> dict[str, str]:
    """Write hostile tarballs into ``store``; {target: what it tries}. Escapes aim at escape_dir."""
    cases: dict[str, Callable[[tarfile.TarFile], object]] = {
        "evil-traversal.tar.gz": lambda t: (_model(t), _file(t, "../../evil.txt", b"x")),
        "evil-absolute.tar.gz": lambda t: (_model(t), _file(t, str(escape_dir / "abs.txt"), b"x")),
        "evil-symlink.tar.gz": lambda t: (
            _model(t),
            _special(t, "m/link", tarfile.SYMTYPE, str(escape_dir)),
            _file(t, "m/link/through.txt", b"x"),
        ),
        "evil-hardlink.tar.gz": lambda t: (
            _model(t),
            _special(t, "m/hard", tarfile.LNKTYPE, str(escape_dir / "target.txt")),
        ),
        "evil-device.tar.gz": lambda t: (_model(t), _special(t, "m/dev", tarfile.CHRTYPE)),
        "evil-fifo.tar.gz": lambda t: (_model(t), _special(t, "m/fifo", tarfile.FIFOTYPE)),
        "no-config.tar.gz": lambda t: _file(t, "m/1/model.py", MODEL_PY.encode()),
        "failing-init.tar.gz": lambda t: (
            _file(t, "m/config.pbtxt", CONFIG.format(name="m", scale=2.0).encode()),
            _file(t, "m/1/model.py", b"raise RuntimeError('this model fails to import')\n"),
        ),
        "broken-config.tar.gz": lambda t: (
            _file(t, "m/config.pbtxt", b"name: [[[ not protobuf"),
            _file(t, "m/1/model.py", MODEL_PY.encode()),
        ),
    }
    for target, add in cases.items():
        _tar(store / target, add)
    (store / "not-gzip.tar.gz").write_text("this is not an archive")
    (store / "empty.tar.gz").write_bytes(b"")
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w:gz") as tar:
        _model(tar)
    (store / "truncated.tar.gz").write_bytes(good.getvalue()[: len(good.getvalue()) // 2])
    bomb = store / "evil-bomb.tar.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        _model(tar)
        size = 96 * 1024 * 1024
        info = tarfile.TarInfo("m/1/zeros.bin")
        info.size = size
        tar.addfile(info, _Zeros(size))
    return {
        "evil-traversal.tar.gz": "member ../../evil.txt",
        "evil-absolute.tar.gz": "absolute member path",
        "evil-symlink.tar.gz": "symlink out of the folder, then a file through it",
        "evil-hardlink.tar.gz": "hard link to a file outside",
        "evil-device.tar.gz": "character device",
        "evil-fifo.tar.gz": "fifo",
        "no-config.tar.gz": "no config.pbtxt",
        "broken-config.tar.gz": "config.pbtxt that does not parse",
        "failing-init.tar.gz": "model.py that raises when Triton loads it",
        "not-gzip.tar.gz": "plain text",
        "empty.tar.gz": "empty file",
        "truncated.tar.gz": "truncated gzip",
        "evil-bomb.tar.gz": "96 MB of zeros (over the unpacked limit)",
    }


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n
