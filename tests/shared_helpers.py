"""What tests in several folders share (``from shared_helpers import ...``; ``tests/`` is on
the path through ``tests/conftest.py``): polling, and the tiny model as a reference tarball."""

from __future__ import annotations

import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from mmelocal.testing.tiny_model import expected, write_model

T = TypeVar("T")


def wait_for(
    check: Callable[[], T], *, timeout_s: float = 120.0, interval_s: float = 0.05, what: str = ""
) -> T:
    """Poll ``check`` until it returns something true (returned), or fail after
    ``timeout_s`` (generous: loads crawl on a busy 2-core CI box) saying ``what`` was
    awaited. The one polling loop of the suite: tests do not write their own."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'waited'}: still {value!r} after {timeout_s:g}s")
        time.sleep(interval_s)


def write_reference_tarball(path: Path, *, scale: float, name: str = "tiny") -> Path:
    """The tiny model as ``path`` with the reference data a build records (inputs and the
    outputs the model must answer: the bench's payload)."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    with tempfile.TemporaryDirectory() as work:
        model = write_model(Path(work), name=name, scale=scale)
        np.savez(
            model / "mmelocal_reference.npz",
            **{"input:INPUT0": x, "output:OUTPUT0": expected(x, scale)},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz") as tar:
            tar.add(model, arcname=name)
    return path
