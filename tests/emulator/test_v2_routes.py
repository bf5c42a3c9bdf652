"""The KServe v2 routes on a real Triton: the statuses Triton's own HTTP server gives
(``src/http_server.cc``, 2.51: ``HttpCodeFromError`` and ``HandleModelReady``), and reads
that are no use of a model (no load, no recency)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from emulator_helpers import payload, raw_request

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import CONFIG, write_tarball

pytestmark = pytest.mark.triton

MiB = 1024 * 1024
JSON = [("Content-Type", "application/json")]
_, BODY = payload(rows=1)


def _failing_tarball(path: Path, raises: str) -> None:
    """A tarball whose model.py raises ``raises`` when Triton loads it."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (
            ("m/config.pbtxt", CONFIG.format(name="m", scale=2.0).encode()),
            ("m/1/model.py", f"raise {raises}\n".encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def mme(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MmeEndpoint]:
    root = tmp_path_factory.mktemp("v2")
    store = root / "store"
    store.mkdir()
    for name in ("model-a", "model-b", "model-c"):
        write_tarball(store / f"{name}.tar.gz", scale=2.0)
    _failing_tarball(store / "failing-init.tar.gz", "RuntimeError('this model fails to import')")
    _failing_tarball(
        store / "oom-init.tar.gz", "MemoryError('CUDA out of memory. Tried to allocate 2 GiB')"
    )
    config = EmulatorConfig(
        store=str(store),
        cache_dir=root / "cache",
        disk_budget_bytes=64 * MiB,
        memory_budget_bytes=2048 * MiB,
        endpoint_name="ep",
    )
    with EmulatorServer(config) as server:
        yield MmeEndpoint(url=server.url, store=store, server=server, endpoint_name="ep")


def _error(data: bytes) -> str:
    message: str = json.loads(data)["error"]
    return message


@pytest.mark.parametrize(
    ("target", "words"),
    [("failing-init.tar.gz", "fails to import"), ("oom-init.tar.gz", "out of memory")],
)
def test_a_failed_load_is_tritons_400_on_the_v2_routes(
    mme: MmeEndpoint, target: str, words: str
) -> None:
    """Triton's v2 HTTP server answers a load that failed (the model raised, out-of-memory
    included) 400, as ``HttpCodeFromError`` maps the load's error; 424 (ModelError) and
    507 are SageMaker's statuses, which tritonclient never sees from Triton."""
    for method, path, body in (
        ("POST", f"/v2/models/{target}/infer", BODY),
        ("GET", f"/v2/models/{target}", b""),
        ("POST", f"/v2/repository/models/{target}/load", b""),
    ):
        status, _, data = raw_request(mme.url, method, path, JSON, body)
        assert status == 400, (method, path, data)
        assert words in _error(data), data
    # InvokeEndpoint keeps SageMaker's answers
    status, headers, data = raw_request(
        mme.url,
        "POST",
        "/endpoints/ep/invocations",
        [*JSON, ("X-Amzn-SageMaker-Target-Model", "failing-init.tar.gz")],
        BODY,
    )
    assert status == 424 and headers["x-amzn-errortype"] == "ModelError", data
