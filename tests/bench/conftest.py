"""Fixtures for the bench tests: a running MME emulator with copies of a tiny model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest


@dataclass
class EmulatorWithCopies:
    """An emulator serving ``count`` copies named model-0.tar.gz ... of a tiny model."""

    url: str
    store: Path
    count: int
    payload: bytes
    server: object

    @property
    def endpoint(self) -> str:
        """The invocations URL form ``mmelocal loadtest --endpoint`` takes."""
        return f"{self.url}/endpoints/local"


#: copies the load-test emulator serves: several targets for Locust's users to spread over
#: (each copy is one more cold load, about 1.6 s, in every pre-warm of the module)
COPIES = 4


@pytest.fixture(scope="module")
def emulator_copies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorWithCopies]:
    """The MME emulator (real tritonserver) with :data:`COPIES` copies of the tiny numpy
    model."""
    from mmelocal.builder.package import package_copies
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer
    from mmelocal.testing.tiny_model import request_json, write_tarball

    root = tmp_path_factory.mktemp("bench-emulator")
    tarball = write_tarball(root / "tiny.tar.gz")
    package_copies(tarball, root / "store", copies=COPIES)
    config = EmulatorConfig(
        store=str(root / "store"), cache_dir=root / "cache", memory_budget_bytes=2 * 1024**3
    )
    payload = json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()
    with EmulatorServer(config) as server:
        yield EmulatorWithCopies(
            url=server.url, store=root / "store", count=COPIES, payload=payload, server=server
        )
