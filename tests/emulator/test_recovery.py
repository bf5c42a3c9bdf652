"""Triton killed with SIGKILL during traffic: prompt retryable errors, restart, models back."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from emulator_helpers import output_of, payload, raw_request, wait_for

from mmelocal.emulator.platform import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton


def test_sigkill_during_traffic_recovers_within_10s(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    for i in range(2):
        write_tarball(store / f"model-{i}.tar.gz", scale=float(i + 1))
    config = EmulatorConfig(store=str(store), cache_dir=tmp_path / "cache")
    with EmulatorServer(config) as server:
        mme = MmeEndpoint(url=server.url, store=store, server=server)
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
        assert state["restarts"] == 1
        assert state["instances"][0]["pid"] != before["pid"]
        both = {"model-0.tar.gz", "model-1.tar.gz"}
        wait_for(lambda: {m["target"] for m in mme.state()["instances"][0]["loaded"]} == both)
        np.testing.assert_array_equal(
            output_of(mme.invoke("model-1.tar.gz", body)), expected(x, 2.0)
        )
