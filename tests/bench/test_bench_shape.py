"""Load shapes: the default stepped shape, scaling, shape files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.bench.loadtest.runner import LoadTestConfig, expand_targets
from mmelocal.bench.loadtest.shape import LoadShape, load_shape, shape_from_stages, stepped_shape
from mmelocal.bench.loadtest.stepstats import (
    StepStats,
    max_users_before_first_failure,
    stage_steps,
)
from mmelocal.errors import UserInputError


def test_default_shape_is_the_stepped_one() -> None:
    shape = stepped_shape()
    users = [stage.users for stage in shape.stages]
    assert users == [10, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200]
    assert shape.stages[0].name == "warmup" and shape.stages[0].duration_s == 30
    assert shape.stages[1].spawn_rate == 2.0  # +2 users/s up to 20
    assert all(stage.duration_s == 30 for stage in shape.stages)
    assert shape.duration_s == 330


def test_max_users_caps_the_steps() -> None:
    assert [s.users for s in stepped_shape(max_users=50).stages] == [10, 20, 40, 50]
    assert [s.users for s in stepped_shape(max_users=5).stages] == [5]


def test_scaling_keeps_the_stages_and_fits_the_duration() -> None:
    shape = stepped_shape().fitted(33)
    assert [s.users for s in shape.stages] == [s.users for s in stepped_shape().stages]
    assert shape.duration_s == pytest.approx(33)
    assert shape.stage_at(0.0) == 0 and shape.stage_at(3.1) == 1 and shape.stage_at(40) is None
    with pytest.raises(UserInputError, match=r">= 1\.0 s"):
        LoadShape.from_dict({"stages": [{"users": 1, "duration_s": 0.2}]})


def test_shape_files(tmp_path: Path) -> None:
    yml = tmp_path / "shape.yaml"
    yml.write_text("stages:\n  - {name: a, users: 5, spawn_rate: 5, duration_s: 10}\n")
    assert load_shape(yml).stages[0].users == 5
    js = tmp_path / "shape.json"
    js.write_text('{"stages": [{"users": 3, "duration_s": 2}]}')
    assert load_shape(js).stages[0].spawn_rate == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages:\n  - {users: 5, duration_s: 10, colour: red}\n")
    with pytest.raises(UserInputError, match=r"bad.yaml: stages\[0\] has unknown field"):
        load_shape(bad)
    with pytest.raises(UserInputError, match="'stages' or a YAML/JSON file"):
        load_shape(tmp_path / "missing.yaml")


def _step(users: int, failures: int) -> StepStats:
    return StepStats(
        name=str(users),
        target_users=users,
        users=users,
        duration_s=1.0,
        requests=10,
        successes=10 - failures,
        failures=failures,
        throughput_rps=10.0,
        avg_latency_ms=1.0,
        p50_latency_ms=1.0,
        p95_latency_ms=1.0,
        p99_latency_ms=1.0,
        max_latency_ms=1.0,
    )


def test_highest_user_count_before_first_failure() -> None:
    assert max_users_before_first_failure([_step(10, 0), _step(20, 0), _step(40, 1)]) == 20
    assert max_users_before_first_failure([_step(10, 0), _step(20, 0)]) == 20
    assert max_users_before_first_failure([_step(10, 2)]) is None


def test_a_step_where_no_request_completed_is_no_proof_of_its_users() -> None:
    """The endpoint stalled at 20 users: nothing completed in that step (its timeouts land
    in the next one). 20 users were never shown to work: the ceiling is 10."""
    from dataclasses import replace

    from bench_helpers import fake_loadtest

    from mmelocal.bench.loadtest.result import summary_lines

    stalled = replace(
        _step(20, 0), requests=0, successes=0, throughput_rps=0.0, avg_latency_ms=None,
        p50_latency_ms=None, p95_latency_ms=None, p99_latency_ms=None, max_latency_ms=None,
    )  # fmt: skip
    steps = [_step(10, 0), stalled, _step(40, 10)]
    assert max_users_before_first_failure(steps) == 10
    assert max_users_before_first_failure([_step(10, 0), stalled]) == 10
    assert max_users_before_first_failure([stalled]) is None
    result = replace(fake_loadtest(), steps=(_step(10, 0), stalled))
    assert "no failed request up to 20 users" not in "\n".join(summary_lines(result))


def test_endpoint_forms() -> None:
    shape = stepped_shape(max_users=10)
    targets = expand_targets("model-{i}.tar.gz", 3)
    assert targets == ("model-0.tar.gz", "model-1.tar.gz", "model-2.tar.gz")

    def config(endpoint: str, mode: str = "auto") -> dict[str, object]:
        return LoadTestConfig(
            endpoint=endpoint, targets=targets, payload=b"{}", shape=shape, mode=mode
        ).worker_config()

    emu = config("http://127.0.0.1:8080/endpoints/demo/invocations")
    assert (emu["mode"], emu["host"], emu["endpoint_name"]) == (
        "invocations",
        "http://127.0.0.1:8080",
        "demo",
    )
    assert config("my-endpoint")["mode"] == "boto3"
    assert config("http://127.0.0.1:8000", "triton-v2")["mode"] == "triton-v2"
    with pytest.raises(UserInputError, match="SageMaker endpoint name"):
        config("my-endpoint", "invocations")
    with pytest.raises(UserInputError, match="/endpoints/NAME"):
        config("http://127.0.0.1:8080/other")
    with pytest.raises(UserInputError, match="'\\{i\\}'"):
        expand_targets("model.tar.gz", 2)


def test_importing_bench_never_imports_locust() -> None:
    """Locust monkey-patches the process it is imported in: only the worker may import it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import mmelocal.bench.loadtest.runner, mmelocal.bench.sweep.runner\n"
        "import mmelocal.bench.capacity.loop\n"
        "import mmelocal.bench.report.page, mmelocal.cli.loadtest, mmelocal.cli.sweep\n"
        "bad = [m for m in ('locust', 'gevent', 'matplotlib') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_ramp_time_of_each_stage() -> None:
    shape = stepped_shape(max_users=60)  # warmup 10 @10/s, 20 @2/s, 40 @10/s, 60 @10/s
    assert [shape.ramp_s(i) for i in range(len(shape.stages))] == [1.0, 5.0, 2.0, 2.0]
    slow = shape_from_stages([{"users": 50, "spawn_rate": 1, "duration_s": 10}])
    assert slow.ramp_s(0) == 10.0  # never reached: the whole stage


def test_a_step_rate_and_latency_are_those_of_its_hold_not_its_ramp() -> None:
    shape = shape_from_stages(
        [
            {"users": 10, "spawn_rate": 10, "duration_s": 10},
            {"users": 20, "spawn_rate": 2, "duration_s": 10},  # 5 s ramp, 5 s hold
            {"users": 40, "spawn_rate": 1, "duration_s": 10},  # ramp longer than the stage
        ]
    )
    ramp = [5.0] * 150  # 150 requests at 5 ms while users rose
    hold = [10.0] * 400 + [50.0] * 100  # 500 requests in the 5 s hold
    steps = stage_steps(
        shape,
        started_at=[0.0, 10.0, 20.0],
        end_s=30.0,
        users_seen=[10, 20, 30],
        latencies_ms=[[1.0] * 100, ramp + hold, [7.0] * 300],
        failures=[0, 2, 0],
        hold_at=[1.0, 15.0, 30.0],
        held_ms=[[1.0] * 90, hold, []],
    )
    second = steps[1]
    assert second["requests"] == 650 and second["failures"] == 2 and second["successes"] == 648
    assert second["duration_s"] == 5.0
    assert second["throughput_rps"] == 500 / 5.0  # not 650 / 10
    assert second["avg_latency_ms"] == (400 * 10.0 + 100 * 50.0) / 500  # 18.0, not 14.0
    assert second["p50_latency_ms"] == 10.0 and second["p99_latency_ms"] == 50.0
    assert steps[0]["throughput_rps"] == 90 / 9.0
    # a stage that ended inside its ramp is summed over all of it
    assert steps[2]["duration_s"] == 10.0 and steps[2]["throughput_rps"] == 30.0
    # so is one whose hold is too short to take a rate over (under a second)
    (short,) = stage_steps(
        shape_from_stages([{"users": 10, "spawn_rate": 1, "duration_s": 10}]),
        started_at=[0.0], end_s=10.0, users_seen=[10], latencies_ms=[[5.0] * 200],
        failures=[0], hold_at=[9.8], held_ms=[[5.0]],
    )  # fmt: skip
    assert short["duration_s"] == 10.0 and short["throughput_rps"] == 20.0
