"""Locust's distributed mode: local workers, a worker started apart, a worker killed mid-run.

The server is a tiny aiohttp app in this process; stages last seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from bench_helpers import invocations_server

from mmelocal.bench.loadtest.result import LoadProgress, LoadTestResult, summary_lines
from mmelocal.bench.loadtest.runner import LoadTestConfig, expand_targets, run_loadtest
from mmelocal.bench.loadtest.shape import shape_from_stages
from mmelocal.bench.loadtest.workers import (
    BATCH_INTERVAL_S,
    SATURATED_CPU_PERCENT,
    TARGET_CPU_PERCENT,
    TINY_RUN_USERS,
    LoadGenerators,
    default_workers,
    endpoint_is_local,
)
from mmelocal.cli.main import main
from mmelocal.errors import UserInputError
from mmelocal.runtime.server_config import pick_free_port


@pytest.fixture(scope="module")
def trivial_endpoint() -> Iterator[str]:
    """Answers every invocation with ``{}`` at once."""
    from aiohttp import web

    async def invocations(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"{}", content_type="application/json")

    with invocations_server(invocations) as url:
        yield url


def _config(endpoint: str, stages: list[dict[str, Any]], **generators: object) -> LoadTestConfig:
    return LoadTestConfig(
        endpoint=endpoint,
        targets=expand_targets("model-{i}.tar.gz", 3),
        payload=b"{}",
        shape=shape_from_stages(stages),
        wait_s=0.005,
        seed=7,
        generators=LoadGenerators(**generators),  # type: ignore[arg-type]
    )


def _keys(data: dict[str, object]) -> dict[str, object]:
    """The shape of a result: its keys, its steps' keys, its workers' keys."""
    steps = data["steps"]
    workers = data["worker_details"]
    assert isinstance(steps, list) and isinstance(workers, list)
    return {
        "top": sorted(data),
        "step": sorted({key for step in steps for key in step}),
        "worker": sorted({key for worker in workers for key in worker}),
    }


def test_two_workers_give_one_result_shaped_like_one_worker(
    trivial_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = {}
    for workers in (1, 2):
        out = tmp_path / f"{workers}.json"
        code = main(
            [
                "loadtest",
                "--endpoint",
                trivial_endpoint,
                "--count",
                "3",
                "--payload",
                str(_payload(tmp_path)),
                "--shape",
                str(_shape_file(tmp_path)),
                "--workers",
                str(workers),
                "--json",
                str(out),
            ]
        )
        assert code in (0, None), capsys.readouterr().err
        outputs[workers] = json.loads(out.read_text())
    one, two = outputs[1], outputs[2]
    assert _keys(one) == _keys(two)
    assert [s["name"] for s in one["steps"]] == [s["name"] for s in two["steps"]]
    assert one["workers"] == 1 and len(one["worker_details"]) == 1
    assert two["workers"] == 2 and len(two["worker_details"]) == 2
    details = two["worker_details"]
    assert all(w["status"] == "ok" and w["requests"] > 0 for w in details)
    assert len({w["pid"] for w in details}) == 2
    # one merged result: its counts are the sum of what each worker sent
    assert two["requests"] == sum(w["requests"] for w in details) > 0
    assert two["failures"] == sum(w["failures"] for w in details) == 0
    assert sum(step["requests"] for step in two["steps"]) == two["requests"]
    # and Locust's own counting, from the same workers by its own reports, agrees
    assert two["locust_total_requests"] == two["requests"]
    for data in (one, two):
        for worker in data["worker_details"]:
            assert len(worker["stage_cpu_percent"]) == len(data["steps"])
            assert all(cpu is not None and cpu > 0 for cpu in worker["stage_cpu_percent"])


def test_master_and_worker_started_apart_complete_a_run(trivial_endpoint: str) -> None:
    """One of the two workers the master waits for is started apart (as on another
    machine); the other never comes and is reported."""
    port = pick_free_port()
    command = ["loadtest-worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    worker = subprocess.Popen(
        [sys.executable, "-m", "mmelocal", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        result = run_loadtest(
            _config(
                trivial_endpoint,
                [{"name": "only", "users": 3, "spawn_rate": 100, "duration_s": 1}],
                workers=0,
                remote_workers=2,
                master_port=port,
                # the worker started above has had the master's own start-up time already
                connect_timeout_s=4.0,
            )
        )
        code = worker.wait(timeout=30)  # it leaves by itself when the master's test ends
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert code == 0
    assert result.workers == 2
    came, never = result.worker_details
    assert came.status == "ok" and came.requests == result.requests > 0
    assert never.status == "never connected" and never.requests == 0
    assert never.missed_stages == ("only",)


def test_a_worker_killed_mid_run_is_reported(trivial_endpoint: str) -> None:
    killed: list[int] = []
    kill_at_s = 1 + 2 * BATCH_INTERVAL_S  # both workers have reported from "during"

    def kill_one_during(sample: LoadProgress) -> None:
        if sample.elapsed_s >= kill_at_s and not killed:
            workers = [
                p
                for p in psutil.Process().children(recursive=True)
                if "_locust_dist" in " ".join(p.cmdline()) and "worker" in p.cmdline()
            ]
            workers[0].send_signal(signal.SIGKILL)
            killed.append(workers[0].pid)

    stages = [
        {"name": "before", "users": 4, "spawn_rate": 100, "duration_s": 1},
        # holds the kill and Locust's verdict (3 missed heartbeats 1 s apart: 4-5 s seen)
        {"name": "during", "users": 4, "spawn_rate": 100, "duration_s": 2 * BATCH_INTERVAL_S + 6},
        {"name": "after", "users": 4, "spawn_rate": 100, "duration_s": 1},
    ]
    result = run_loadtest(_config(trivial_endpoint, stages, workers=2), progress=kill_one_during)
    assert killed
    (lost,) = result.lost_workers
    assert lost.pid == killed[0] and lost.status == "missing"
    assert lost.missed_stages == ("during", "after")
    survivor = next(w for w in result.worker_details if w.status == "ok")
    assert survivor.requests > 0
    assert "users on the other workers" in result.to_dict()["lost_workers_note"]
    # Locust moved the lost worker's users to the survivor: the last stage ran them all
    assert result.steps[-1].users == 4 and result.steps[-1].requests > 0


def _payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload.json"
    path.write_bytes(b"{}")
    return path


def _shape_file(tmp_path: Path) -> Path:
    path = tmp_path / "shape.json"
    stages = [
        {"users": 2, "spawn_rate": 100, "duration_s": 1},
        {"users": 4, "spawn_rate": 100, "duration_s": 1},
    ]
    path.write_text(json.dumps({"stages": stages}))
    return path


def test_default_worker_count_leaves_room_for_a_local_server() -> None:
    assert default_workers(endpoint_is_local=True, max_users=200, cpus=8) == 4
    assert default_workers(endpoint_is_local=False, max_users=200, cpus=8) == 7
    assert default_workers(endpoint_is_local=True, max_users=200, cpus=2) == 1
    assert default_workers(endpoint_is_local=False, max_users=TINY_RUN_USERS - 1, cpus=8) == 1
    assert endpoint_is_local({"host": "http://localhost:8080"})
    assert not endpoint_is_local({"endpoint_url": None})  # a SageMaker endpoint by name
    with pytest.raises(UserInputError, match="--remote-workers"):
        LoadGenerators(workers=0)


def test_a_stage_with_a_busy_worker_is_flagged_with_the_workers_that_would_fix_it() -> None:
    steps = [
        {
            "name": name,
            "target_users": users,
            "users": users,
            "duration_s": 1.0,
            "requests": 10,
            "successes": 10,
            "failures": 0,
            "throughput_rps": 10.0,
            "avg_latency_ms": 1.0,
            "p50_latency_ms": 1.0,
            "p95_latency_ms": 1.0,
            "p99_latency_ms": 1.0,
            "max_latency_ms": 1.0,
        }
        for name, users in (("low", 10), ("high", 20))
    ]
    busy = SATURATED_CPU_PERCENT + 5
    worker = {"host": "h", "pid": 1, "status": "ok", "requests": 10, "failures": 0}
    result = LoadTestResult.from_dict(
        {
            "endpoint": "http://127.0.0.1:1/endpoints/x",
            "mode": "invocations",
            "target_count": 1,
            "shape": {
                "stages": [{"name": s["name"], "users": s["users"], "duration_s": 1} for s in steps]
            },
            "steps": steps,
            "wall_s": 2.0,
            "loadgen_cpu_percent": busy,
            "locust_total_requests": 20,
            "locust_total_failures": 0,
            "first_failure_users": None,
            "workers": 2,
            "worker_details": [
                {**worker, "name": "worker 1", "cpu_percent": 50, "stage_cpu_percent": [10, busy]},
                {**worker, "name": "worker 2", "cpu_percent": 50, "stage_cpu_percent": [10, busy]},
            ],
        }
    )
    (flag,) = result.saturated
    assert flag.stage == "high" and flag.cpu_percent == busy
    assert flag.workers_needed >= 3 and flag.workers_needed * TARGET_CPU_PERCENT >= 2 * busy
    assert "client queueing" in flag.message() and str(flag.workers_needed) in flag.message()
    assert flag.message() in summary_lines(result)
    assert LoadTestResult.from_dict(result.to_dict()) == result


#: how long the slow endpoint takes to answer: longer than the first stage
SLOW_ANSWER_S = 1.3


@pytest.fixture(scope="module")
def slow_endpoint() -> Iterator[str]:
    """Answers every invocation after SLOW_ANSWER_S (the delay is what is tested: a request
    sent in one stage completes in the next)."""
    import asyncio

    from aiohttp import web

    async def invocations(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(SLOW_ANSWER_S)
        return web.Response(body=b"{}", content_type="application/json")

    with invocations_server(invocations) as url:
        yield url


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "distributed"])
def test_a_request_counts_in_the_stage_it_was_sent_in(slow_endpoint: str, workers: int) -> None:
    """One user; the first request is sent at the start of a 1 s stage and answered
    1.3 s later, in the next stage. It measures the first stage's load (one user waiting on
    the server), so it counts there; counted where it completed, the first stage showed no
    request at all (and its latency landed in the next stage's percentiles)."""
    config = LoadTestConfig(
        endpoint=slow_endpoint,
        targets=("model-0.tar.gz",),
        payload=b"{}",
        shape=shape_from_stages(
            [
                {"users": 1, "spawn_rate": 10, "duration_s": 1},
                {"users": 2, "spawn_rate": 10, "duration_s": 2},
            ]
        ),
        generators=LoadGenerators(workers=workers),
    )
    result = run_loadtest(config)
    first, second = result.steps
    assert first.requests == 1, [s.to_dict() for s in result.steps]
    assert first.max_latency_ms is not None and first.max_latency_ms >= SLOW_ANSWER_S * 1000
    assert second.requests >= 1


def test_stage_clock_files_by_send_time_and_forgets_a_hold_that_never_began() -> None:
    from mmelocal.bench.loadtest.stepstats import StageClock

    clock = StageClock()
    clock.mark(0.0, 0, False)
    clock.mark(5.0, 0, True)  # stage 0's hold, planned past stage 1's start
    clock.mark(3.0, 1, False)  # stage 1 began first: stage 0's hold never did
    clock.mark(3.5, 1, True)
    assert clock.at(-1.0) == (0, False)
    assert clock.at(2.9) == (0, False)
    assert clock.at(3.2) == (1, False)
    assert clock.at(6.0) == (1, True)


def test_a_worker_with_no_master_says_it_waits_and_gives_up_with_a_clear_error() -> None:
    """It printed one line and then waited in silence (Locust retries for about 5 min and
    then raised a traceback); it now says where it waits and stops after --master-timeout."""
    port = pick_free_port()
    command = ["loadtest-worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "mmelocal", *command, "--master-timeout", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = " ".join(result.stderr.split())
    assert result.returncode == 1, err
    assert f"waiting for the master at 127.0.0.1:{port}" in err
    assert f"no load-test master answered at 127.0.0.1:{port} within 2 s" in err
    assert "Traceback" not in err
    assert time.monotonic() - started < 60
