"""Acceptance: `mmelocal loadtest` with the default shape, shortened, against the emulator."""

from __future__ import annotations

import csv
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from bench_helpers import open_every_png

from mmelocal.cli.main import main

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def _emulator_invocations(url: str) -> float:
    from mmelocal.emulator.metrics import parse_prometheus

    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        metrics = parse_prometheus(response.read().decode())
    return sum(v for k, v in metrics.items() if k == "Invocations" or k.startswith("Invocations{"))


def test_default_shape_shortened_on_four_copies(emulator_copies: Any, tmp_path: Path) -> None:
    emu = emulator_copies
    payload = tmp_path / "payload.json"
    payload.write_bytes(emu.payload)
    out_json, report = tmp_path / "loadtest.json", tmp_path / "report"
    code = main(
        [
            "loadtest",
            "--endpoint",
            emu.endpoint,
            "--targets",
            "model-{i}.tar.gz",
            "--count",
            str(emu.count),
            "--shape",
            "stages",
            "--duration",
            "22s",  # 11 steps of 2 s: every step still gets requests
            "--prewarm",
            "--payload",
            str(payload),
            "--seed",
            "7",
            "--json",
            str(out_json),
            "--report",
            str(report),
        ]
    )
    assert code == 0
    data = json.loads(out_json.read_text())
    assert data["kind"] == "loadtest"
    steps = data["steps"]
    assert [s["target_users"] for s in steps] == [10, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200]
    for step in steps:
        assert step["requests"] == step["successes"] + step["failures"]
        assert step["requests"] > 0 and step["throughput_rps"] > 0
        assert step["p50_latency_ms"] <= step["p95_latency_ms"] <= step["p99_latency_ms"]
        assert step["users"] >= 1
    total = sum(s["requests"] for s in steps)
    assert total == data["requests"] == data["locust_total_requests"]
    assert sum(s["failures"] for s in steps) == data["failures"] == data["locust_total_failures"]
    # an independent count: the emulator saw at least every request Locust counted
    assert _emulator_invocations(emu.url) >= total
    ceiling = data["max_users_without_failure"]
    assert ceiling is None or ceiling in [s["users"] for s in steps]
    rows = list(csv.DictReader((report / "loadtest-1-steps.csv").open()))
    assert len(rows) == len(steps)
    assert all(int(r["requests"]) == int(r["successes"]) + int(r["failures"]) for r in rows)
    assert len(open_every_png(report / "index.html")) == 2


@pytest.mark.parametrize("how", ["url", "env"])
def test_boto3_user_against_the_emulator(
    emulator_copies: Any, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The boto3 user (what a real SageMaker endpoint needs): an endpoint URL, or a bare
    endpoint name with boto3's AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME."""
    from mmelocal.bench.loadtest.runner import LoadTestConfig, expand_targets, run_loadtest
    from mmelocal.bench.loadtest.shape import shape_from_stages

    emu = emulator_copies
    endpoint = emu.endpoint
    if how == "env":
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", emu.url)
        endpoint = "local"
    result = run_loadtest(
        LoadTestConfig(
            endpoint=endpoint,
            mode="boto3",
            targets=expand_targets("model-{i}.tar.gz", emu.count),
            payload=emu.payload,
            shape=shape_from_stages([{"users": 4, "duration_s": 2}]),
            prewarm=True,
        )
    )
    assert result.mode == "boto3"
    assert result.requests > 0 and result.failures == 0, result.errors


@pytest.mark.parametrize("mode", ["boto3", "invocations"])
def test_prewarm_waits_out_model_not_ready(tmp_path: Path, mode: str) -> None:
    """A cold load longer than the platform's wait answers ModelNotReadyException (429) while
    it goes on; botocore's model says of it "Wait and try your request again", so the
    pre-warm asks again until the model answers, instead of failing the load test."""
    import numpy as np

    from mmelocal.bench.loadtest.runner import LoadTestConfig, prewarm
    from mmelocal.bench.loadtest.shape import shape_from_stages
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer
    from mmelocal.testing.tiny_model import request_json, write_tarball

    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / "slow.tar.gz")
    config = EmulatorConfig(
        store=str(store), cache_dir=tmp_path / "cache", load_wait_timeout_s=0.05
    )
    payload = json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()
    with EmulatorServer(config) as server:
        prewarm(
            LoadTestConfig(
                endpoint=f"{server.url}/endpoints/local",
                mode=mode,
                targets=("slow.tar.gz",),
                payload=payload,
                shape=shape_from_stages([{"users": 1, "duration_s": 1}]),
            )
        )
        state = json.loads(
            urllib.request.urlopen(f"{server.url}/emulator/state", timeout=30).read()
        )
    assert any(e["kind"] == "load" for e in state["events"])
