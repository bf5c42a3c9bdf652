"""The comparison table of benchmarked frameworks (pure data, no server): the published
summary (models loaded, lowest latency, highest throughput, most users, all among steps
without a failed request) and TensorRT's difference from PyTorch in percent."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mmelocal.bench.capacity.result import CapacityResult, LoadRecord
from mmelocal.bench.endpoint.result import (
    BenchmarkResult,
    comparison_rows,
    framework_of,
    percent_difference,
)
from mmelocal.bench.loadtest.result import LoadTestResult
from mmelocal.bench.loadtest.shape import LoadShape, Stage
from mmelocal.bench.loadtest.stepstats import StepStats
from mmelocal.bench.results import result_from_dict

MIB = 1024 * 1024


def _capacity(count: int, fmt: str, instance_type: str) -> CapacityResult:
    loads = tuple(
        LoadRecord(copies=i + 1, target=f"m-v{i}.tar.gz", used_bytes=(i + 2) * 100 * MIB,
                   delta_bytes=100 * MIB, load_s=1.0, warmup_s=0.0)
        for i in range(count)
    )  # fmt: skip
    return CapacityResult(
        source="m.tar.gz", label="m", model_format=fmt, probe="nvml: 1 x Tesla T4",
        total_bytes=15360 * MIB, threshold=0.9, baseline_bytes=100 * MIB, loads=loads,
        next_copy=None, stopped_reason="test", instance_type=instance_type,
    )  # fmt: skip


def _step(users: int, rps: float, avg_ms: float, failures: int = 0) -> StepStats:
    return StepStats(
        name=f"{users} users", target_users=users, users=users, duration_s=30.0,
        requests=int(rps * 30), successes=int(rps * 30) - failures, failures=failures,
        throughput_rps=rps, avg_latency_ms=avg_ms, p50_latency_ms=avg_ms,
        p95_latency_ms=avg_ms, p99_latency_ms=avg_ms, max_latency_ms=avg_ms,
    )  # fmt: skip


def _loadtest(steps: list[StepStats]) -> LoadTestResult:
    shape = LoadShape(stages=tuple(Stage(users=s.users, spawn_rate=1.0, duration_s=30.0)
                                   for s in steps))  # fmt: skip
    return LoadTestResult(
        endpoint="ep", mode="boto3", target_count=3, shape=shape, steps=tuple(steps),
        wall_s=90.0, loadgen_cpu_percent=10.0, locust_total_requests=0,
        locust_total_failures=0, first_failure_users=None,
    )  # fmt: skip


def _bench(fmt: str, count: int, steps: list[StepStats], instance: str = "ml.g4dn.xlarge"):  # type: ignore[no-untyped-def]
    return BenchmarkResult(
        model="resnet50", framework=framework_of(fmt), instance_type=instance, endpoint="ep",
        capacity=_capacity(count, fmt, instance), loadtest=_loadtest(steps),
    )  # fmt: skip


def test_the_summary_takes_only_steps_without_failures() -> None:
    pt = _bench("torchscript", 4, [_step(20, 10.0, 300.0), _step(40, 18.0, 250.0),
                                   _step(60, 25.0, 900.0, failures=3)])  # fmt: skip
    assert pt.framework == "pt" and pt.max_models_loaded == 4
    assert pt.latency_ms == 250.0  # the failed step's rate and latency do not count
    assert pt.throughput_rps == 18.0
    assert pt.max_users == 40


def test_the_summary_leaves_out_the_warm_up_step() -> None:
    # the published summary keeps only the steps of 20, 40, ... users: the 10-user warm-up
    # (lowest concurrency, so lowest latency) is never the "lowest latency" of a framework
    warmup = replace(_step(10, 9.0, 90.0), name="warmup")
    pt = _bench("torchscript", 4, [warmup, _step(20, 10.0, 300.0), _step(40, 18.0, 250.0)])
    assert pt.latency_ms == 250.0
    assert pt.throughput_rps == 18.0
    # a test that was only its warm-up (--max-users 10 or fewer) has nothing else to show
    only_warmup = _bench("torchscript", 4, [replace(_step(10, 30.0, 90.0), name="warmup")])
    assert only_warmup.latency_ms == 90.0 and only_warmup.throughput_rps == 30.0
    failed = [replace(_step(10, 9.0, 90.0), name="warmup"), _step(20, 10.0, 300.0, failures=1)]
    assert _bench("torchscript", 4, failed).latency_ms is None


def test_trt_against_pt_in_percent_per_instance_type() -> None:
    pt = _bench("torchscript", 40, [_step(20, 20.0, 400.0), _step(40, 25.0, 500.0)])
    trt = _bench("tensorrt", 20, [_step(20, 30.0, 300.0), _step(40, 35.0, 320.0),
                                  _step(60, 36.0, 330.0)])  # fmt: skip
    other = _bench("torchscript", 60, [_step(20, 22.0, 380.0)], instance="ml.g5.xlarge")
    rows = comparison_rows([trt, other, pt])
    assert [(r["instance_type"], r["framework"]) for r in rows] == [
        ("ml.g4dn.xlarge", "pt"),
        ("ml.g4dn.xlarge", "trt"),
        ("ml.g4dn.xlarge", "trt vs pt (%)"),
        ("ml.g5.xlarge", "pt"),
    ]
    diff = rows[2]
    assert diff["max_models_loaded"] == -50.0  # 20 vs 40
    assert diff["latency_ms"] == -25.0  # 300 vs 400
    assert diff["throughput_rps"] == 44.0  # 36 vs 25
    assert diff["max_users"] == 50.0  # 60 vs 40
    assert percent_difference(0.0, 1.0) is None and percent_difference(None, 1.0) is None


def test_a_cpu_run_names_where_its_figures_come_from(tmp_path: Path) -> None:
    import dataclasses

    from rich.console import Console

    from mmelocal.bench.endpoint.result import step_rows
    from mmelocal.bench.report import write_report
    from mmelocal.cli.benchmark import _comparison_table

    pt = _bench("torchscript", 5, [_step(20, 11.4, 2220.0)])
    host = "host PSS of the Triton tree via probe on endpoint ep, budget 8,192 MiB"
    cpu = dataclasses.replace(pt, capacity=dataclasses.replace(pt.capacity, probe=host))
    where = "local AWS, CPU host memory, as ml.g4dn.xlarge; latency and throughput on CPU"
    assert cpu.on_cpu and cpu.figures_from == where
    assert comparison_rows([cpu])[0]["figures_from"] == where
    steps = step_rows([cpu])
    assert list(steps[0])[-1] == "figures_from" and steps[0]["figures_from"] == where
    # the published columns stay, in their order, before the new one
    assert list(steps[0])[:-1] == list(step_rows([pt])[0])[:-1]
    assert step_rows([pt])[0]["figures_from"] == "ml.g4dn.xlarge, GPU memory"
    console = Console(width=300, record=True)
    console.print(_comparison_table([cpu]))
    printed = console.export_text()
    assert "CPU figures" in printed and "(CPU)" in printed and "local AWS" in printed
    page = write_report([cpu], tmp_path).html.read_text()
    assert "local AWS, CPU host memory, as ml.g4dn.xlarge" in page
    assert "not GPU figures" in page and "measured on ml.g4dn.xlarge" not in page


def test_a_benchmark_result_survives_json() -> None:
    bench = _bench("tensorrt", 3, [_step(20, 30.0, 300.0)])
    again = result_from_dict(json.loads(json.dumps(bench.to_dict())))
    assert isinstance(again, BenchmarkResult)
    assert again.to_dict() == bench.to_dict()
    assert again.capacity.instance_type == "ml.g4dn.xlarge"


@pytest.mark.parametrize("fmt, short", [("torchscript", "pt"), ("tensorrt", "trt"), ("x", "x")])
def test_framework_names(fmt: str, short: str) -> None:
    assert framework_of(fmt) == short


@pytest.mark.parametrize(
    "stems, name",
    [(["resnet50-pt", "resnet50-trt"], "resnet50"), (["bert"], "bert"), (["a", "b"], "a")],
)
def test_the_model_name_is_the_stems_common_start(stems: list[str], name: str) -> None:
    from mmelocal.cli.benchmark import common_name

    assert common_name(stems) == name


def test_step_rows_are_the_published_summary_per_step() -> None:
    from mmelocal.bench.endpoint.result import step_rows

    pt = _bench("torchscript", 4, [_step(20, 10.0, 300.0), _step(40, 18.0, 250.0, failures=2)])
    rows = step_rows([pt])
    assert [(r["platform"], r["max_models_loaded"], r["users"]) for r in rows] == [
        ("pt", 4, 20),
        ("pt", 4, 40),
    ]
    assert rows[1]["failed_requests"] == 2 and rows[1]["successful_requests"] == 538
    assert rows[0]["model_name"] == "resnet50" and rows[0]["instance_type"] == "ml.g4dn.xlarge"


def test_the_report_opens_with_the_comparison(tmp_path: Path) -> None:
    from mmelocal.bench.report.page import write_report

    pt = _bench("torchscript", 40, [_step(20, 20.0, 400.0)])
    trt = _bench("tensorrt", 20, [_step(20, 30.0, 300.0)])
    files = write_report([pt, trt], tmp_path)
    page = files.html.read_text()
    assert page.index("Comparison per model and framework") < page.index("Capacity: m")
    assert "trt vs pt (%)" in page
    names = {path.name for path in files.csv}
    assert {"benchmark-comparison.csv", "benchmark-steps.csv"} <= names
    steps = (tmp_path / "benchmark-steps.csv").read_text().splitlines()
    assert steps[0].startswith("model_name,instance_type,platform,max_models_loaded,users")
    assert len(steps) == 3


def test_mmelocal_report_reads_benchmark_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmelocal.bench.results import write_results
    from mmelocal.cli.main import main

    pt = _bench("torchscript", 40, [_step(20, 20.0, 400.0)])
    trt = _bench("tensorrt", 20, [_step(20, 30.0, 300.0)])
    source = write_results([pt, trt], tmp_path / "results.json")
    assert main(["report", str(source), "--out", str(tmp_path / "out")]) == 0
    rows = (tmp_path / "out" / "benchmark-comparison.csv").read_text().splitlines()
    assert [row.split(",")[2] for row in rows[1:]] == ["pt", "trt", "trt vs pt (%)"]
    assert rows[3].split(",")[3:5] == ["-50.0", "-25.0"]  # models loaded, latency
    assert "report:" in capsys.readouterr().out


def test_a_plan_that_deploys_needs_a_deployer(tmp_path: Path) -> None:
    from mmelocal.bench.endpoint.benchmark import BenchmarkPlan
    from mmelocal.errors import UserInputError

    fields: dict[str, Any] = dict(
        tarballs=(tmp_path / "m.tar.gz",),
        model="m",
        shape=LoadShape(stages=(Stage(users=1, spawn_rate=1, duration_s=10),)),
        endpoint_name="rn50",
        s3_uri="s3://b/p/",
        role_arn="arn:aws:iam::123456789012:role/r",
        instance_type="ml.g5.xlarge",
    )
    with pytest.raises(UserInputError, match="deployer="):
        BenchmarkPlan(**fields)
    deploying: dict[str, Any] = {**fields, "deployer": lambda **kw: None}  # never called
    assert BenchmarkPlan(**deploying).endpoint_for("pt") == "rn50-pt"
    assert BenchmarkPlan(**{**fields, "existing": "live"}).endpoint_for("pt") == "live"
    long = BenchmarkPlan(**{**deploying, "endpoint_name": "a" * 62})
    assert long.endpoint_for("pt") == "a" * 62  # cut to 63, never ending with '-'


def test_old_module_paths_name_the_moved_modules() -> None:
    import mmelocal.bench.capacity_result as old_capacity
    import mmelocal.bench.remote_capacity as old_remote
    import mmelocal.deploy.session as old_session
    import mmelocal.deploy.sizing as old_sizing

    from mmelocal.aws import session
    from mmelocal.bench.capacity import measure_capacity, sizing
    from mmelocal.bench.capacity.loop import measure_capacity as loop_measure
    from mmelocal.bench.endpoint import capacity

    assert old_capacity.CapacityResult is CapacityResult
    assert old_remote is capacity
    assert old_session is session
    assert old_sizing is sizing
    assert measure_capacity is loop_measure


def test_every_result_kind_names_a_frozen_keyword_only_bench_result() -> None:
    """``RESULT_TYPES`` and the classes agree on ``kind``; each class, given its kind once
    through :class:`BenchResult`, is a frozen dataclass that takes keywords only."""
    import dataclasses
    import importlib

    from mmelocal.bench.results import RESULT_TYPES, BenchResult

    for kind, (module, name) in RESULT_TYPES.items():
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, BenchResult) and cls.kind == kind
        params = cls.__dataclass_params__
        assert params.frozen and all(f.kw_only for f in dataclasses.fields(cls))
        assert "kind" not in {f.name for f in dataclasses.fields(cls)}
