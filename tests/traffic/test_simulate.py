"""The fleet simulator on hand-made traces whose outcome follows from the rules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from mmelocal.errors import UserInputError
from mmelocal.traffic.simulate import LoadTimes, SimConfig, simulate
from mmelocal.traffic.trace import Trace


def trace_of(times: list[float], models: list[int], n_models: int | None = None) -> Trace:
    n = n_models or max(models) + 1
    return Trace(
        times_s=np.asarray(times, dtype=float),
        model_ids=np.asarray(models, dtype=np.int32),
        models=tuple(f"m{i}" for i in range(n)),
    )


def test_cycle_over_capacity_plus_one_always_misses_lru() -> None:
    k = 3
    models = [i % (k + 1) for i in range(40)]
    trace = trace_of([float(i) * 10 for i in range(40)], models)
    result = simulate(
        trace, SimConfig(models_per_instance=k, load=LoadTimes(samples_s=(1.0,)), service_s=0.01)
    ).data
    assert result["hit_ratio"] == 0.0  # LRU's worst case: every request evicts the next
    assert result["loads"] == 40 and result["max_loaded"] == k
    models = [i % k for i in range(40)]
    result = simulate(
        trace_of([float(i) * 10 for i in range(40)], models),
        SimConfig(models_per_instance=k, service_s=0.01),
    ).data
    assert result["loads"] == k and result["cold_starts"] == k
    assert result["hit_ratio"] == pytest.approx(37 / 40)


def test_waiters_on_a_load_are_misses_and_loads_queue() -> None:
    # two cold models at t=0 on one instance, loads of 2 s one at a time
    trace = trace_of([0.0, 0.0, 0.5, 5.0], [0, 1, 0, 1])
    data = simulate(
        trace, SimConfig(models_per_instance=4, load=LoadTimes(samples_s=(2.0,)), service_s=0.0)
    ).data
    assert data["cold_starts"] == 3 and data["loads"] == 2
    cold = data["latency_ms"]["cold"]
    assert data["latency_ms"]["warm"]["p50"] == 0.0
    # m0 ready at 2 s, m1 queued behind it: ready at 4 s (the slowest of the three)
    assert cold["p99"] == pytest.approx(4000)
    parallel = simulate(
        trace,
        SimConfig(
            models_per_instance=4, load=LoadTimes(samples_s=(2.0,)), service_s=0.0, parallel_loads=2
        ),
    ).data
    assert parallel["latency_ms"]["cold"]["p99"] == pytest.approx(2000)


def test_affinity_across_instances_and_hot_replica() -> None:
    times = [i * 0.001 for i in range(3000)]  # 1,000 req/s to one model
    trace = trace_of(times, [0] * 3000)
    data = simulate(
        trace,
        SimConfig(
            instances=2,
            models_per_instance=2,
            load=LoadTimes(samples_s=(0.1,)),
            service_s=0.001,
            hot_rps_threshold=50,
        ),
    ).data
    assert data["loads"] == 2  # the cold load, then one replica on the other instance
    alone = simulate(
        trace,
        SimConfig(
            instances=2,
            models_per_instance=2,
            service_s=0.001,
            load=LoadTimes(samples_s=(0.1,)),
            hot_rps_threshold=10_000,
        ),
    ).data
    assert alone["loads"] == 1


def test_long_waits_become_model_not_ready_errors() -> None:
    trace = trace_of([0.0, 1.0], [0, 0])
    data = simulate(
        trace, SimConfig(models_per_instance=1, load=LoadTimes(samples_s=(90.0,)), service_s=0.0)
    ).data
    assert data["errors_by_class"] == {"ModelNotReadyException": 2}
    assert data["answered"] == 0


def test_cost_and_capacity_from_footprints() -> None:
    trace = trace_of([0.0, 1800.0, 3600.0], [0, 1, 2])
    data = simulate(
        trace,
        SimConfig(
            instances=2,
            memory_limit_bytes=100,
            default_footprint_bytes=40,
            footprint_bytes={"m2": 30},
            price_per_hour=1.5,
            service_s=0.0,
            instance_type="ml.g5.xlarge",
        ),
    ).data
    assert data["instance_hours"] == pytest.approx(2.0)
    assert data["cost"]["total"] == pytest.approx(3.0)
    with pytest.raises(UserInputError, match="more than an instance's limit"):
        simulate(trace, SimConfig(memory_limit_bytes=10, default_footprint_bytes=40))
    with pytest.raises(UserInputError, match="give the capacity per instance"):
        SimConfig()


def test_autoscaling_follows_the_shared_target_tracking_rule() -> None:
    from mmelocal.facts.autoscaling import HIGH_ALARM_DATAPOINTS, METRIC_PERIOD_S
    from mmelocal.traffic.simulate import Autoscaling

    # 600 requests/minute to 2 models for 20 minutes, target 100 per instance per minute
    times = list(np.arange(0, 1200, 0.1))
    trace = trace_of(times, [i % 2 for i in range(len(times))])
    scaling = Autoscaling(
        min_instances=1,
        max_instances=4,
        target_invocations_per_instance=100,
        scale_out_cooldown_s=0,
        instance_start_s=120,
    )
    data = simulate(
        trace,
        SimConfig(
            models_per_instance=2,
            service_s=0.001,
            load=LoadTimes(samples_s=(0.5,)),
            autoscaling=scaling,
        ),
    ).data
    first = data["scaling_activities"][0]
    # the high alarm needs HIGH_ALARM_DATAPOINTS full periods over the target
    assert first["time_s"] == HIGH_ALARM_DATAPOINTS * METRIC_PERIOD_S
    assert data["max_instances"] == 4  # capped by max
    assert all(c <= 4 for _, c in data["instances"])
    # billed from each decision: more than one instance-hour for 20 minutes
    assert 1200 / 3600 < data["instance_hours"] < 4 * 1200 / 3600


def test_capacity_file_host_memory_refused_gpu_projected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from mmelocal.bench.capacity.result import CapacityResult, LoadRecord
    from mmelocal.bench.results import write_result
    from mmelocal.cli.traffic import _capacity_for, _CapacityArgs

    gib = 1024**3
    loads = tuple(
        LoadRecord(copies=i + 1, target=f"m{i}", used_bytes=(i + 2) * 4 * gib,
                   delta_bytes=4 * gib, load_s=1.0, warmup_s=0.0, marginal_bytes=3 * gib)
        for i in range(2)
    )  # fmt: skip
    measured = CapacityResult(
        source="m.tar.gz", label="m", model_format="onnx", probe="nvml:0", total_bytes=16 * gib,
        threshold=0.9, baseline_bytes=gib, loads=loads, next_copy=None, stopped_reason="done",
    )  # fmt: skip
    on_cpu = write_result(
        dataclasses.replace(measured, probe="host PSS of the Triton tree"), tmp_path / "cpu.json"
    )
    with pytest.raises(UserInputError, match=r"host-memory \(CPU\).*--models-per-instance"):
        _capacity_for("ml.g5.xlarge", _CapacityArgs(None, None, 0.0, on_cpu, 0.9))
    on_gpu = write_result(measured, tmp_path / "gpu.json")
    # A10G (22.5 GiB): the 1 GiB shared runtime once, 3 GiB a copy: (0.9*22.5 - 2) / 3 -> 6
    count, source = _capacity_for("ml.g5.xlarge", _CapacityArgs(None, None, 0.0, on_gpu, 0.9))
    assert (count, source) == (6, "measured on a GPU, projected on A10G")
    # a result with no per-model footprint (a projection, an empty list) is refused by name
    from mmelocal.bench.capacity.projection import GpuSpec, project

    a10g = GpuSpec(name="A10G", memory_bytes=23028 * 2**20, instances={"ml.g5.xlarge": 1})
    projection = project(per_model_bytes=3 * gib, baseline_bytes=gib, gpus=[a10g])
    other = write_result(projection, tmp_path / "projection.json")
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    for path in (other, empty):
        with pytest.raises(UserInputError, match=r"no per-model footprint"):
            _capacity_for("ml.g5.xlarge", _CapacityArgs(None, None, 0.0, path, 0.9))


def test_a_scale_in_of_several_instances_serves_their_queued_loads() -> None:
    """A scale-in that removes several instances at once: the loads queued on every one of
    them run (their callers get answers), not only those of the last instance."""
    from mmelocal.traffic.simulate import Autoscaling

    # a new model every 5 s for 20 minutes over 4 instances, loads of 30 s one at a time:
    # each instance always has loads queued; 12 requests a minute against a target of 100
    # per instance drive the low alarm, which scales 4 -> ceil(4 * 3 / 100) = 1 at once
    n = 240
    trace = trace_of([i * 5.0 for i in range(n)], list(range(n)))
    scaling = Autoscaling(
        min_instances=1,
        max_instances=4,
        target_invocations_per_instance=100,
        scale_in_cooldown_s=0,
    )
    data = simulate(
        trace,
        SimConfig(
            instances=4,
            models_per_instance=2,
            load=LoadTimes(samples_s=(30.0,)),
            service_s=0.01,
            autoscaling=scaling,
        ),
    ).data
    assert [a["capacity"] for a in data["scaling_activities"]] == [1]
    # every request was answered or failed with ModelNotReadyException, none lost
    assert data["answered"] + data["errors"] == n
    assert data["cold_starts"] == n  # every one a ModelCacheHit of 0, answered or not
    # all cold: each waited a 30 s load at least and at most the 60 s timeout (+ 10 ms)
    assert 30_000 <= data["latency_ms"]["p50"] <= data["latency_ms"]["p99"] <= 60_010 + 1e-6


def test_report_percentiles_are_mmelocals_nearest_rank() -> None:
    """The traffic reports' percentiles are the one definition of mmelocal.stats (nearest
    rank, a latency that was observed), as the emulator's /metrics and the load tests give."""
    from mmelocal.traffic.results import summarize

    # 99 answers of 10 ms and one of 5 s: the 99th percentile is the 99th value, 10 ms
    # (interpolating would give 10 + 0.01 * 4,990 = 59.9 ms, a latency no request had)
    n = 100
    latency = np.full(n, 0.010)
    latency[-1] = 5.0
    data = summarize(
        source="simulated",
        times_s=np.arange(n, dtype=float),
        latency_s=latency,
        hit=np.ones(n, dtype=np.bool_),
        ok=None,
        sampled=None,
        errors={},
        loaded=None,
        load_times_s=np.asarray([]),
        loads=0,
    ).data
    lat = data["latency_ms"]
    assert lat["p99"] == pytest.approx(10.0)
    assert lat["warm"]["p99"] == pytest.approx(10.0)
    assert lat["p50"] == pytest.approx(10.0) and lat["p90"] == pytest.approx(10.0)
    # on an even count the median is an observed value too: the lower middle one
    two = summarize(
        source="simulated",
        times_s=np.asarray([0.0, 0.5]),
        latency_s=np.asarray([0.001, 0.003]),
        hit=np.ones(2, dtype=np.bool_),
        ok=None,
        sampled=None,
        errors={},
        loaded=None,
        load_times_s=np.asarray([]),
        loads=0,
    ).data
    assert two["latency_ms"]["p50"] == pytest.approx(1.0)
    assert two["timeline"]["p99_ms"] == [pytest.approx(3.0)]  # one 1 s bin holds both


def test_scaling_takes_effect_when_decided_not_at_the_next_request() -> None:
    """A decision taken in a quiet spell (no request for hours) changes the fleet and its
    bill at the decision's time, the time scaling_activities report, not at the next
    request."""
    from mmelocal.traffic.simulate import Autoscaling

    # two requests a second for 20 minutes, then nothing until one request at 4 h
    busy = [i * 0.5 for i in range(2400)]
    trace = trace_of([*busy, 14_400.0], [i % 2 for i in range(2401)])
    scaling = Autoscaling(min_instances=1, max_instances=2, target_invocations_per_instance=100)
    data = simulate(
        trace,
        SimConfig(instances=2, models_per_instance=2, service_s=0.001, autoscaling=scaling),
    ).data
    (activity,) = data["scaling_activities"]
    assert activity["capacity"] == 1 and 1200 < activity["time_s"] < 14_400
    assert data["instances"] == [[0.0, 2], [activity["time_s"], 1]]
    expected = (2 * activity["time_s"] + (14_400 - activity["time_s"])) / 3600
    assert data["instance_hours"] == pytest.approx(expected)


def test_a_trace_that_spans_no_time_has_no_rate() -> None:
    """Every request at one instant (one request, or a burst at t=0): a per-minute rate over
    0 s is undefined, not 6e10/min."""
    from mmelocal.traffic.results import summary_rows

    for models in ([0], [0, 1]):
        trace = trace_of([0.0] * len(models), models)
        result = simulate(trace, SimConfig(models_per_instance=2, service_s=0.01))
        assert result["cold_starts"] == len(models)
        assert result["cold_starts_per_min"] is None
    one = simulate(trace_of([0.0], [0]), SimConfig(models_per_instance=1, service_s=0.01))
    assert dict(summary_rows(one))["cold starts"] == "1 (rate: the trace spans 0 s)"
    # a trace over 30 s: one cold start in half a minute is 2 a minute
    two = simulate(trace_of([0.0, 30.0], [0, 0]), SimConfig(models_per_instance=1))
    assert two["cold_starts_per_min"] == pytest.approx(2.0)


def test_callers_of_a_load_take_the_instances_slots_too() -> None:
    """Requests that waited for a load are then served like any other: ``concurrency`` at a
    time, each ``service_s`` long (the module's step 5), not all at the instant it is ready."""
    # ten callers of one cold model at t=0; a 1 s load; one slot; 1 s per request
    trace = trace_of([0.0] * 10, [0] * 10)
    data = simulate(
        trace,
        SimConfig(
            models_per_instance=1, load=LoadTimes(samples_s=(1.0,)), service_s=1.0, concurrency=1
        ),
    ).data
    # served one after the other from t=1 s: they finish at 2, 3, ..., 11 s
    assert data["latency_ms"]["p50"] == pytest.approx(6_000)
    assert data["latency_ms"]["p99"] == pytest.approx(11_000)
    # a request that arrives while they hold the slot waits behind them
    later = trace_of([0.0] * 10 + [5.0], [0] * 11)
    data = simulate(
        later,
        SimConfig(
            models_per_instance=1, load=LoadTimes(samples_s=(1.0,)), service_s=1.0, concurrency=1
        ),
    ).data
    assert data["latency_ms"]["warm"]["p50"] == pytest.approx(12_000 - 5_000)


def test_simulate_a_model_larger_than_the_card_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A footprint over the card's memory: simulate names the card and the footprint, not an
    option the user never gave (it said '--models-per-instance must be >= 1, got 0')."""
    from click.testing import CliRunner

    from mmelocal.cli.main import cli
    from mmelocal.traffic.trace import write_trace

    path = write_trace(trace_of([0.0, 1.0], [0, 0]), tmp_path / "t.csv")
    args = ["traffic", "simulate", str(path), "--footprint-mib", "20000"]
    with pytest.raises(UserInputError, match=r"not one model fits on ml\.g4dn\.xlarge") as info:
        CliRunner().invoke(
            cli, [*args, "--instance-type", "ml.g4dn.xlarge"], catch_exceptions=False
        )
    assert "--models-per-instance must be" not in str(info.value)


def test_load_time_medians_are_observed_loads() -> None:
    """``cold_load_s_p50`` and ``load_cycle_s_p50`` are p50s like the latencies': nearest
    rank, a load that happened (two loads of 1 s and 3 s: 1 s, not 2 s)."""
    from mmelocal.traffic.results import summarize

    data = summarize(
        source="replayed",
        times_s=np.asarray([0.0, 5.0]),
        latency_s=np.asarray([1.0, 3.0]),
        hit=np.zeros(2, dtype=np.bool_),
        ok=None,
        sampled=None,
        errors={},
        loaded=None,
        load_times_s=np.asarray([3.0, 1.0]),
        load_cycle_s=np.asarray([3.5, 1.5]),
        loads=2,
    ).data
    assert data["cold_load_s_p50"] == 1.0
    assert data["load_cycle_s_p50"] == 1.5


GIB = 1024**3


def test_a_load_past_the_platforms_limit_fails_and_its_callers_get_errors() -> None:
    """SageMaker lets a cold model download and load for up to 360 s, then the load has
    failed: a 400 s load never serves. The caller at 0 s got ModelNotReadyException at
    60 s; the one at 330 s was still waiting when the load failed at 360 s (ModelError,
    the emulator's answer to a load past its limit); the one at 400 s starts a new load,
    which fails again."""
    trace = trace_of([0.0, 330.0, 400.0], [0, 0, 0])
    data = simulate(
        trace, SimConfig(models_per_instance=1, load=LoadTimes(samples_s=(400.0,)), service_s=0.0)
    ).data
    assert data["errors_by_class"] == {"ModelNotReadyException": 2, "ModelError": 1}
    assert data["answered"] == 0 and data["loads"] == 0 and data["failed_loads"] == 2
    # the download counts against the same 360 s
    both = SimConfig(
        models_per_instance=1,
        load=LoadTimes(samples_s=(300.0,)),
        download=LoadTimes(samples_s=(100.0,)),
        service_s=0.0,
    )
    assert simulate(trace_of([0.0], [0]), both).data["failed_loads"] == 1
    within = dataclasses.replace(both, download=LoadTimes(samples_s=(59.0,)))
    ok = simulate(trace_of([0.0, 1000.0], [0, 0]), within).data
    assert ok["failed_loads"] == 0 and ok["loads"] == 1 and ok["answered"] == 1


def test_the_disk_keeps_artifacts_so_a_reload_skips_the_download() -> None:
    """One model in memory at a time, two artifacts on disk: a model unloaded from memory
    but still on disk loads without downloading; a full disk deletes the least recently
    used artifact whose model is not loaded."""
    config = SimConfig(
        models_per_instance=1,
        load=LoadTimes(samples_s=(1.0,)),
        download=LoadTimes(samples_s=(5.0,)),
        disk_bytes=2 * GIB,
        default_artifact_bytes=GIB,
        service_s=0.0,
    )
    trace = trace_of([0.0, 100.0, 200.0, 300.0, 400.0, 500.0], [0, 1, 0, 2, 1, 0])
    data = simulate(trace, config).data
    # m0 download+load; m1 the same; m0 from disk; m2 deletes m1 (m0's is newer); m1
    # downloads again and deletes m0's (m2's is newer); m0 downloads again, deleting m2's
    assert data["latency_ms"]["cold"]["p50"] == pytest.approx(6000)
    assert sorted(data["cold_load_s"]) == [1.0] * 6
    assert data["downloads"] == 5 and data["artifacts_deleted"] == 3
    no_disk_limit = simulate(trace, dataclasses.replace(config, disk_bytes=None)).data
    assert no_disk_limit["downloads"] == 3  # each artifact once
    assert no_disk_limit["latency_ms"]["cold"]["p50"] == pytest.approx(1000)  # 1,1,1,6,6,6


def test_disk_options_are_checked() -> None:
    with pytest.raises(UserInputError, match="artifact"):
        SimConfig(models_per_instance=1, download=LoadTimes(), disk_bytes=GIB)
    with pytest.raises(UserInputError, match="download"):
        SimConfig(models_per_instance=1, disk_bytes=GIB, default_artifact_bytes=1)
    with pytest.raises(UserInputError, match="more than an instance's disk"):
        simulate(
            trace_of([0.0], [0]),
            SimConfig(
                models_per_instance=1,
                download=LoadTimes(),
                disk_bytes=GIB,
                default_artifact_bytes=2 * GIB,
            ),
        )


@pytest.mark.parametrize("command", ["simulate", "size"])
def test_capacity_result_picks_one_result_of_a_file_of_several(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`capacity --format onnx,torchscript --json FILE` writes one result per format:
    deploy --capacity FILE --capacity-result onnx reads one, but traffic's --capacity had
    no such option and refused the file ("give a file of one"). Now simulate and size take
    the same --capacity-result, and it is refused without --capacity as deploy refuses it."""
    from mmelocal.bench.capacity.result import CapacityResult, LoadRecord
    from mmelocal.bench.results import write_results
    from mmelocal.cli.main import main
    from mmelocal.traffic.trace import write_trace

    def measured(fmt: str, marginal_gib: int) -> CapacityResult:
        loads = tuple(
            LoadRecord(copies=i + 1, target=f"m{i}", used_bytes=(i + 2) * 4 * GIB,
                       delta_bytes=4 * GIB, load_s=1.0, warmup_s=0.0,
                       marginal_bytes=marginal_gib * GIB)
            for i in range(2)
        )  # fmt: skip
        return CapacityResult(
            source="m.tar.gz", label="m", model_format=fmt, probe="nvml:0",
            total_bytes=16 * GIB, threshold=0.9, baseline_bytes=GIB, loads=loads,
            next_copy=None, stopped_reason="done",
        )  # fmt: skip

    both = write_results([measured("onnx", 3), measured("torchscript", 6)], tmp_path / "c.json")
    trace = write_trace(trace_of([0.0, 1.0], [0, 1]), tmp_path / "t.csv")
    args = ["traffic", command, str(trace), "--service-ms", "10", "--load-seconds", "1"]
    args += ["--instance-type", "ml.g5.xlarge", "--json", str(tmp_path / "out.json")]
    if command == "size":
        args += ["--slo-p99-ms", "100000"]
    # A10G (22.5 GiB): the 1 GiB shared runtime once, 3 GiB (onnx) or 6 GiB a copy
    for pick, count in (("onnx", 6), ("2", 3)):
        code = main([*args, "--capacity", str(both), "--capacity-result", pick])
        out, err = capsys.readouterr()
        assert code == 0, out + err
        data = json.loads((tmp_path / "out.json").read_text())
        found = data if command == "simulate" else data["best"]
        assert found["models_per_instance"] == count, data
    assert main([*args, "--capacity", str(both)]) == 2
    assert "say which with --capacity-result" in " ".join(capsys.readouterr().err.split())
    assert main([*args, "--models-per-instance", "3", "--capacity-result", "onnx"]) == 2
    assert "--capacity-result is only read with --capacity" in capsys.readouterr().err


def test_the_cli_takes_the_disk(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mmelocal.cli.main import cli
    from mmelocal.traffic.trace import write_trace

    path = write_trace(trace_of([0.0, 100.0, 200.0, 300.0], [0, 1, 0, 2]), tmp_path / "t.csv")
    args = ["traffic", "simulate", str(path), "--models-per-instance", "1"]
    args += ["--load-seconds", "1", "--service-ms", "1", "--json", str(tmp_path / "s.json")]
    disk = ["--download-seconds", "5", "--disk-budget", "1GiB", "--artifact-mib", "1024"]
    result = CliRunner().invoke(cli, [*args, *disk])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "s.json").read_text())
    assert (data["downloads"], data["artifacts_deleted"], data["disk_bytes"]) == (4, 3, GIB)
    refused = CliRunner().invoke(cli, [*args, "--disk-budget", "1GiB"])
    assert refused.exit_code != 0 and "--download-seconds" in str(refused.exception)


CAPACITY_REFUSALS = {
    # two answers to one question: the second was dropped without a word
    "count and footprint": (
        ["--models-per-instance", "5", "--footprint-mib", "100000"],
        "give one of --models-per-instance, --footprint-mib or --capacity, not several",
    ),
    "footprint and file": (
        ["--footprint-mib", "400", "--capacity", "{d}/t.csv"],
        "give one of --models-per-instance, --footprint-mib or --capacity, not several",
    ),
    "threshold with a count": (
        ["--models-per-instance", "5", "--threshold", "0.5"],
        "--threshold is the fraction of the card's memory a footprint is projected into",
    ),
    "baseline without a footprint": (
        ["--models-per-instance", "5", "--baseline-mib", "300"],
        "--baseline-mib is only read with --footprint-mib",
    ),
    # named by the option, not by an internal field in bytes
    "negative footprint": (["--footprint-mib", "-5"], "'--footprint-mib'"),
    "negative baseline": (["--footprint-mib", "5", "--baseline-mib", "-1"], "'--baseline-mib'"),
    "count 0": (["--models-per-instance", "0"], "--models-per-instance"),
    "threshold in percent": (["--footprint-mib", "5", "--threshold", "90"], "(e.g. 0.9)"),
}


@pytest.mark.parametrize("command", ["simulate", "size"])
@pytest.mark.parametrize("case", list(CAPACITY_REFUSALS))
def test_the_capacity_options_refuse_what_they_would_ignore(
    tmp_path: Path, command: str, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmelocal.cli.main import main
    from mmelocal.traffic.trace import write_trace

    path = write_trace(trace_of([0.0, 1.0], [0, 1]), tmp_path / "t.csv")
    options, expected = CAPACITY_REFUSALS[case]
    args = ["traffic", command, str(path), "--service-ms", "10"]
    args += ["--instance-type", "ml.g4dn.xlarge"]
    args += [o.replace("{d}", str(tmp_path)) for o in options]
    if command == "size":
        args += ["--slo-p99-ms", "100000"]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert expected in " ".join(err.split()), err


def test_model_cache_hit_counts_the_failed_callers_too() -> None:
    """``ModelCacheHit`` is one sample per InvokeEndpoint call that reached its model, 1 when
    the model was already loaded, a failed call too (the SageMaker Developer Guide, MME
    metrics: "The number of InvokeEndpoint requests sent to the multi-model endpoint for
    which the model was already loaded. The Average statistic shows the ratio of requests
    for which the model was already loaded"; the emulator's ``record_invocation``). A
    caller that got ModelNotReadyException waited for a cold load: a 0, and a cold start;
    so is one whose load failed past the limit."""
    # m0's 2 s load outlasts the 1 s wait: the caller at 0 s is answered
    # ModelNotReadyException (a miss), the two after the load are hits
    waited = simulate(
        trace_of([0.0, 3.0, 4.0], [0, 0, 0]),
        SimConfig(
            models_per_instance=1,
            load=LoadTimes(samples_s=(2.0,)),
            service_s=0.0,
            load_wait_timeout_s=1.0,
        ),
    ).data
    assert waited["errors_by_class"] == {"ModelNotReadyException": 1}
    assert (waited["hit_ratio"], waited["cold_starts"]) == (pytest.approx(2 / 3), 1)
    # every load fails past a 1 s limit: three calls, three misses, no answer
    failed = simulate(
        trace_of([0.0, 0.5, 1.5], [0, 0, 0]),
        SimConfig(
            models_per_instance=1,
            load=LoadTimes(samples_s=(2.0,)),
            service_s=0.0,
            load_limit_s=1.0,
        ),
    ).data
    assert failed["errors"] == 3 and failed["answered"] == 0
    assert (failed["hit_ratio"], failed["cold_starts"]) == (0.0, 3)
    assert failed["timeline"]["hit_ratio"][0] == 0.0


def test_the_load_limit_runs_from_the_call_that_asked_for_the_load() -> None:
    """The platform's 360 s cover the wait for the loads before it (one at a time per
    instance), the download and the load, from the call that asked (the emulator's
    ``load_deadline_s``): three cold models at 0 s with 200 s loads, one instance. m0 is
    ready at 200 s; m1's turn comes at 200 s and its load would end at 400 s, past 360 s:
    it fails at 360 s holding its slot till then; m2, still queued at 360 s, fails then
    without starting. A later call loads m2 alone, within the limit."""
    config = SimConfig(
        models_per_instance=3,
        load=LoadTimes(samples_s=(200.0,)),
        service_s=0.0,
        load_wait_timeout_s=1000.0,  # the callers wait: the loads' own fate shows
    )
    data = simulate(trace_of([0.0, 0.0, 0.0, 1000.0], [0, 1, 2, 2]), config).data
    assert data["failed_loads"] == 2 and data["loads"] == 2
    assert data["errors_by_class"] == {"ModelError": 2} and data["answered"] == 2
    # the answered ones: m0 at 0 s and m2 at 1,000 s, each after its own 200 s load
    assert data["latency_ms"]["cold"]["p50"] == pytest.approx(200_000)
    failed = simulate(trace_of([0.0, 0.0], [0, 1]), config).data
    assert failed["errors_by_class"] == {"ModelError": 1}
    # without the queue the limit holds: each model alone
    alone = simulate(trace_of([0.0, 400.0, 800.0], [0, 1, 2]), config).data
    assert alone["failed_loads"] == 0 and alone["loads"] == 3


def test_each_eviction_before_a_load_takes_its_unload_time() -> None:
    """The emulator unloads a load's victims one after the other, each awaited until its
    memory is back (``Evictor.make_room``), before the load: a model that needs the room of
    two others waits two unloads. m2 (2 GiB) needs both 1 GiB models gone on a 2 GiB
    instance: its load starts after 2 x 3 s."""
    gib = 1024**3
    config = SimConfig(
        memory_limit_bytes=2 * gib,
        default_footprint_bytes=gib,
        footprint_bytes={"m2": 2 * gib},
        load=LoadTimes(samples_s=(1.0,)),
        unload_s=3.0,
        service_s=0.0,
    )
    data = simulate(trace_of([0.0, 0.0, 10.0], [0, 1, 2]), config).data
    # m2's caller at 10 s: two unloads (6 s), then its 1 s load
    assert data["latency_ms"]["cold"]["p99"] == pytest.approx(7_000)


def test_a_load_evicts_the_models_idle_when_it_starts() -> None:
    """Room is made when a load starts, from the models idle then (the emulator's
    ``make_room``, in its load lock): three cold models at once, two fit, loads of 1 s one
    at a time, calls of 0.5 s. m0's caller is done at 1.5 s, so m2's load at 2 s evicts m0
    and the instance never holds more than two. The simulator looked at the calls in flight
    as of the previous request (0 s): m0 seemed busy, and m2 loaded over the capacity."""
    trace = trace_of([0.0, 0.0, 0.0, 10.0], [0, 1, 2, 1])
    data = simulate(
        trace, SimConfig(models_per_instance=2, load=LoadTimes(samples_s=(1.0,)), service_s=0.5)
    ).data
    assert data["loads_over_capacity"] == 0 and data["max_loaded"] == 2


def test_least_recently_used_is_by_the_last_call_to_end() -> None:
    """The emulator orders eviction by each model's last use: a call's start, the end of
    its wait for a load (``TritonInstance.acquire``) and its end (``release``). B is loaded
    and called at 25 s; A's caller asked at 20 s and was served when A's 10 s load ended
    at 30 s: A was used last. C's load at 40 s evicts B, and A at 50 s is a hit. The
    simulator ordered by the calls' starts only (A's at 20 s) and evicted A."""
    trace = trace_of([0.0, 20.0, 25.0, 40.0, 50.0], [1, 0, 1, 2, 0])
    data = simulate(
        trace, SimConfig(models_per_instance=2, load=LoadTimes(samples_s=(10.0,)), service_s=0.0)
    ).data
    assert data["loads"] == 3 and data["hit_ratio"] == pytest.approx(2 / 5)


def test_downloads_run_beside_the_load_queue() -> None:
    """In the emulator a cold call's download starts at once, in its own thread, and only
    the load itself takes the instance's load lock (``_fetch_and_load``: the download,
    then ``load_lock``); downloads of different models run together. Two cold models at
    0 s, 10 s downloads, 1 s loads, one load at a time: both downloads end at 10 s, m0 is
    ready at 11 s and m1 at 12 s. The simulator ran each download inside the load slot:
    m1 was ready at 22 s."""
    config = SimConfig(
        models_per_instance=2,
        load=LoadTimes(samples_s=(1.0,)),
        download=LoadTimes(samples_s=(10.0,)),
        service_s=0.0,
    )
    data = simulate(trace_of([0.0, 0.0], [0, 1]), config).data
    assert data["latency_ms"]["cold"]["p99"] == pytest.approx(12_000)
    assert data["downloads"] == 2
    # the load lock goes to the load whose download ended first: at 40 s m0 needs a
    # download and m1's artifact is still on the disk (m1 was unloaded at 20 s to make
    # room for m2, one model at a time): m1, asked at 40.5 s, loads at once (ready at
    # 41.5 s) and m0 after its download (51 s). Every cold call waited at most 11 s; the
    # simulator loaded in the order asked: m1 waited for m0's download and load (11.5 s)
    config = dataclasses.replace(config, models_per_instance=1)
    data = simulate(trace_of([0.0, 20.0, 40.0, 40.5], [1, 2, 0, 1]), config).data
    assert data["downloads"] == 3 and data["loads"] == 4
    assert data["latency_ms"]["cold"]["p99"] == pytest.approx(11_000)


def test_a_load_waits_for_a_busy_model_to_make_room_then_fails_507() -> None:
    """The emulator never loads past its memory limit while other loaded models serve
    calls: the load (holding the instance's load lock) evicts what is idle, then waits for
    a busy model to go idle and evicts it; after ``busy_wait_s`` (30 s) with no room it
    fails, its callers answered 507 InsufficientMemory (``Evictor.make_room``,
    ``_until_changed``). One model fits: m0's call runs from 1 s to 11 s; m1, asked at
    2 s, loads when m0 goes idle at 11 s. With 40 s calls m0 stays busy past 2 + 30 s: m1's
    load fails at 32 s. The simulator loaded m1 over the capacity at once."""
    config = SimConfig(models_per_instance=1, load=LoadTimes(samples_s=(1.0,)), service_s=10.0)
    data = simulate(trace_of([0.0, 2.0], [0, 1]), config).data
    assert data["loads_over_capacity"] == 0 and data["max_loaded"] == 1
    # m1: room at 11 s, loaded at 12 s, served until 22 s
    assert data["latency_ms"]["cold"]["p99"] == pytest.approx(20_000)
    busy = simulate(trace_of([0.0, 2.0], [0, 1]), dataclasses.replace(config, service_s=40.0))
    assert busy["errors_by_class"] == {"InsufficientMemory": 1}
    assert busy["loads"] == 1 and busy["failed_loads"] == 1 and busy["max_loaded"] == 1


def test_a_long_simulations_metric_history_is_the_alarms_window() -> None:
    """The autoscaler keeps only the datapoints target tracking's alarms evaluate (their
    evaluation range: the longer alarm's periods and CloudWatch's extra periods), not one
    per period of the whole simulation: 2,000 periods (over a day) leave that many."""
    from mmelocal.facts.autoscaling import HIGH_ALARM, LOW_ALARM, METRIC_PERIOD_S
    from mmelocal.facts.cloudwatch import EVALUATION_RANGE_EXTRA_PERIODS
    from mmelocal.traffic.simulate import Autoscaling
    from mmelocal.traffic.simulate.fleet import _Scaler

    window = (
        max(HIGH_ALARM.evaluation_periods, LOW_ALARM.evaluation_periods)
        + EVALUATION_RANGE_EXTRA_PERIODS
    )
    scaler = _Scaler(
        Autoscaling(min_instances=1, max_instances=4, target_invocations_per_instance=100), 1
    )
    lengths = set()
    for period in range(1, 2001):
        scaler.count = 50 if period % 30 < 15 else 500  # quiet and busy spells
        scaler.evaluate(period * METRIC_PERIOD_S, 2)
        lengths.add(len(scaler.metric))
    assert max(lengths) == window
    assert len(scaler.metric) == window
