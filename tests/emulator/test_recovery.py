"""Triton killed with SIGKILL during traffic, or crashed by one hostile request: prompt
retryable errors, restart, models back. One emulator for the module."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from emulator_helpers import output_of, payload, raw_request, wait_for

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorServer]:
    root = tmp_path_factory.mktemp("recovery")
    store = root / "store"
    store.mkdir()
    for i in range(2):
        write_tarball(store / f"model-{i}.tar.gz", scale=float(i + 1))
    config = EmulatorConfig(store=str(store), cache_dir=root / "cache")
    with EmulatorServer(config) as running:
        yield running


def endpoint(server: EmulatorServer) -> MmeEndpoint:
    return MmeEndpoint(url=server.url, store=Path(server.emulator.store.description), server=server)


def test_sigkill_during_traffic_recovers_within_10s(server: EmulatorServer) -> None:
    mme = endpoint(server)
    restarts = mme.state()["restarts"]
    x, body = payload(rows=1)
    for i in range(2):
        mme.invoke(f"model-{i}.tar.gz", body)
    before = mme.state()["instances"][0]
    calls: list[tuple[float, float, int, bytes]] = []
    stop = threading.Event()

    def traffic() -> None:
        k = 0
        while not stop.is_set():
            target = f"model-{k % 2}.tar.gz"
            t0 = time.monotonic()
            status, _, data = raw_request(
                server.url,
                "POST",
                "/endpoints/local/invocations",
                [
                    ("Content-Type", "application/json"),
                    ("X-Amzn-SageMaker-Target-Model", target),
                ],
                body,
                timeout_s=30,
            )
            calls.append((t0, time.monotonic(), status, data))
            if status == 200:
                np.testing.assert_array_equal(output_of(data), expected(x, float(k % 2 + 1)))
            k += 1
            time.sleep(0.01)

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    wait_for(lambda: len(calls) >= 3)  # traffic flows before the kill
    killed_at = time.monotonic()
    os.kill(before["pid"], signal.SIGKILL)  # our own child: the emulator started it
    # served again: a few answers from calls sent after the kill
    wait_for(
        lambda: sum(s == 200 and t0 > killed_at for t0, _, s, _ in calls) >= 3,
        timeout_s=30,
    )
    stop.set()
    thread.join(timeout=30)

    after_kill = [c for c in calls if c[1] > killed_at]
    statuses = {s for _, _, s, _ in after_kill}
    assert statuses <= {200, 503}, statuses
    failed = [c for c in after_kill if c[2] == 503]
    assert failed, "no request fell into the gap"
    assert all(b"ServiceUnavailable" in c[3] for c in failed)
    assert max(end - start for start, end, s, _ in failed) < 5.0  # prompt, no hang
    first_ok = min(t0 for t0, _, s, _ in after_kill if s == 200 and t0 > killed_at)
    assert first_ok - killed_at <= 10.0
    state = mme.state()
    assert state["restarts"] == restarts + 1
    assert state["instances"][0]["pid"] != before["pid"]
    both = {"model-0.tar.gz", "model-1.tar.gz"}
    wait_for(lambda: {m["target"] for m in mme.state()["instances"][0]["loaded"]} == both)
    np.testing.assert_array_equal(output_of(mme.invoke("model-1.tar.gz", body)), expected(x, 2.0))


def _hostile_shape() -> bytes:
    tensor = {"name": "INPUT0", "shape": [9999999999, 4], "datatype": "FP32", "data": [1] * 4}
    return json.dumps({"inputs": [tensor]}).encode()


def _deep_json() -> bytes:
    depth = 1_000_000
    return b'{"inputs": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("hostile", [_hostile_shape, _deep_json], ids=["shape", "deep-json"])
def test_a_request_that_crashes_triton_gets_503_then_the_endpoint_recovers(
    server: EmulatorServer, hostile: object
) -> None:
    """tritonserver itself dies of these (std::bad_alloc; stack): the platform restarts the
    container, the emulator restarts Triton and reloads its models. The caller of the
    hostile request, and callers meanwhile, get 503 ServiceUnavailable (boto3 retries it)."""
    mme = endpoint(server)
    target = "model-0.tar.gz"
    x, body = payload(rows=1)
    mme.invoke(target, body)
    before = mme.state()
    headers = [("Content-Type", "application/json"), ("X-Amzn-SageMaker-Target-Model", target)]
    assert callable(hostile)
    status, out, data = raw_request(
        server.url, "POST", "/endpoints/local/invocations", headers, hostile(), timeout_s=60
    )
    if status != 503:  # this Triton build survived it: nothing to recover from
        assert status in (413, 424), data
        assert mme.state()["instances"][0]["pid"] == before["instances"][0]["pid"]
        pytest.skip("this Triton build survived the request: no crash to recover from")
    assert out["x-amzn-errortype"] == "ServiceUnavailable"
    assert b"restart" in data

    def served() -> bytes | None:
        code, _, answer = raw_request(
            server.url, "POST", "/endpoints/local/invocations", headers, body, timeout_s=60
        )
        assert code in (200, 503), answer  # nothing else while it recovers
        return answer if code == 200 else None

    np.testing.assert_array_equal(output_of(wait_for(served, timeout_s=60)), expected(x, 1.0))
    after = mme.state()
    assert after["restarts"] == before["restarts"] + 1
    assert after["instances"][0]["pid"] != before["instances"][0]["pid"]
    assert psutil_gone(before["instances"][0]["pid"])


def psutil_gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_local_servers_exit_is_noticed_at_once_not_at_the_next_poll(tmp_path: Path) -> None:
    """The local launcher's tritonserver is watched through a pidfd: its death marks the
    instance down and begins the restart at once, whatever the poll interval (the watchdog
    polled ``is_alive`` in an executor every ``watchdog_interval_s``: here a restart only
    after 120 s)."""
    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / "model-0.tar.gz", scale=1.0)
    config = EmulatorConfig(store=str(store), cache_dir=tmp_path / "cache", watchdog_interval_s=120)
    with EmulatorServer(config) as running:
        mme = endpoint(running)
        x, body = payload(rows=1)
        mme.invoke("model-0.tar.gz", body)
        pid = mme.state()["instances"][0]["pid"]
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)  # our own child: the emulator started it
        wait_for(lambda: mme.state()["restarts"] == 1, timeout_s=60)
        assert time.monotonic() - killed_at < 60
        assert mme.state()["instances"][0]["pid"] != pid
        np.testing.assert_array_equal(
            output_of(wait_for(lambda: _served(running, body), timeout_s=60)), expected(x, 1.0)
        )


def _served(server: EmulatorServer, body: bytes) -> bytes | None:
    headers = [
        ("Content-Type", "application/json"),
        ("X-Amzn-SageMaker-Target-Model", "model-0.tar.gz"),
    ]
    status, _, answer = raw_request(
        server.url, "POST", "/endpoints/local/invocations", headers, body, timeout_s=60
    )
    return answer if status == 200 else None


def test_a_shared_memory_region_outlives_a_triton_restart(server: EmulatorServer) -> None:
    """A region registered through the emulator is registered again on the Triton that
    a crash restarts (and one unregistered is not): an inference naming it is served
    after the restart as before (the new Triton had no region: Triton's 400 "Unable to
    find system shared memory region")."""
    from multiprocessing.shared_memory import SharedMemory

    mme = endpoint(server)
    json_header = [("Content-Type", "application/json")]
    x = np.arange(4, dtype=np.float32).reshape(1, 4) + 3.0
    # one key per region: Triton 2.51 reuses the closed descriptor of a key registered
    # before (shared_memory_manager.cc: "FIXME: Consider invalid file descriptors")
    regions = {
        name: SharedMemory(name=f"mmelocal-{name}-{os.getpid()}", create=True, size=x.nbytes)
        for name in ("kept", "dropped")
    }
    np.ndarray(x.shape, x.dtype, buffer=regions["kept"].buf)[:] = x
    base = "/v2/systemsharedmemory/region"
    infer = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 4],
                "datatype": "FP32",
                "parameters": {"shared_memory_region": "kept", "shared_memory_byte_size": 16},
            }
        ]
    }
    request = json.dumps(infer).encode()

    def served() -> bytes | None:
        path = "/v2/models/model-1.tar.gz/infer"
        status, _, data = raw_request(server.url, "POST", path, json_header, request)
        assert status in (200, 503), data  # nothing else while it recovers
        return data if status == 200 else None

    try:
        for name, region in regions.items():
            key = {"key": f"/{region.name}", "offset": 0, "byte_size": x.nbytes}
            status, _, data = raw_request(
                server.url, "POST", f"{base}/{name}/register", json_header, json.dumps(key).encode()
            )
            assert status == 200, data
        assert raw_request(server.url, "POST", f"{base}/dropped/unregister")[0] == 200
        np.testing.assert_array_equal(output_of(wait_for(served)), expected(x, 2.0))
        before = mme.state()["instances"][0]
        os.kill(before["pid"], signal.SIGKILL)  # our own child: the emulator started it
        wait_for(lambda: mme.state()["instances"][0]["pid"] != before["pid"], timeout_s=60)
        np.testing.assert_array_equal(output_of(wait_for(served, timeout_s=60)), expected(x, 2.0))
        triton_url = mme.state()["instances"][0]["http_url"]
        status, _, data = raw_request(triton_url, "GET", "/v2/systemsharedmemory/status")
        assert [r["name"] for r in json.loads(data)] == ["kept"], data
    finally:
        raw_request(server.url, "POST", "/v2/systemsharedmemory/unregister")
        for region in regions.values():
            region.close()
            region.unlink()
