"""Sizing: the cheapest configuration that meets the SLO, or the closest when none does."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mmelocal.errors import UserInputError
from mmelocal.traffic.make import Popularity, make_trace
from mmelocal.traffic.simulate import LoadTimes, SimConfig, simulate
from mmelocal.traffic.size import Candidate, size


@pytest.fixture(scope="module")
def trace():  # type: ignore[no-untyped-def]
    return make_trace(
        models=40, rate_rps=20, duration_s=300, popularity=Popularity(zipf_s=1.0), seed=4
    )


def test_cheapest_configuration_that_meets_the_slo(trace) -> None:  # type: ignore[no-untyped-def]
    base = SimConfig(models_per_instance=1, load=LoadTimes(samples_s=(2.0,)), service_s=0.02)
    small = Candidate(
        instance_type="small", models_per_instance=10, capacity_source="given", price_per_hour=1.0
    )
    big = Candidate(
        instance_type="big", models_per_instance=40, capacity_source="given", price_per_hour=5.0
    )
    # one big instance holds every model: its cold rate (the first loads) is the bar
    everything = simulate(trace, replace(base, models_per_instance=40)).data
    bar = everything["cold_starts_per_min"] * 1.2
    answer = size(trace, [small, big], base, slo_p99_ms=None, max_cold_per_min=bar)
    best = answer.best
    assert best is not None and best.meets and best.cost_per_hour is not None
    tried = {(r.instance_type, r.count): r for r in answer.rows}
    assert best.cold_starts_per_min <= bar
    assert not tried[("small", 1)].meets  # 10 of 40 models: misses all along
    cheaper_failing = [
        r
        for r in tried.values()
        if r.cost_per_hour is not None and r.cost_per_hour < best.cost_per_hour
    ]
    assert all(not r.meets for r in cheaper_failing)


def test_no_service_time_ranks_without_p99(trace) -> None:  # type: ignore[no-untyped-def]
    base = SimConfig(models_per_instance=1, service_s=None)
    cand = Candidate(
        instance_type="x", models_per_instance=40, capacity_source="estimate", price_per_hour=None
    )
    answer = size(trace, [cand], base, slo_p99_ms=1.0)
    assert answer.best is not None and answer.best.p99_ms is None
    assert answer.best.latency_source == "needs a measurement"
    assert any("p99 needs a measurement" in n for n in answer.notes)


def test_unreachable_slo_gives_the_closest(trace) -> None:  # type: ignore[no-untyped-def]
    base = SimConfig(models_per_instance=1, load=LoadTimes(samples_s=(2.0,)), service_s=0.02)
    cand = Candidate(
        instance_type="x", models_per_instance=2, capacity_source="given", price_per_hour=1.0
    )
    answer = size(trace, [cand], base, slo_p99_ms=1.0, max_count=3)
    assert answer.best is None
    closest = answer.closest()
    assert closest is not None and "p99" in closest.why_not
    with pytest.raises(UserInputError, match="--slo-p99-ms must be > 0"):
        size(trace, [cand], base, slo_p99_ms=-1)


def test_the_closest_is_never_a_type_that_holds_no_model(trace) -> None:  # type: ignore[no-untyped-def]
    """When nothing meets the SLO, the closest configuration shown is one that was simulated,
    not an instance type on whose card not one model fits (it has no p99 at all)."""
    base = SimConfig(models_per_instance=1, load=LoadTimes(samples_s=(2.0,)), service_s=0.02)
    tiny = Candidate(
        instance_type="tiny", models_per_instance=0, capacity_source="given", price_per_hour=0.5
    )
    small = Candidate(
        instance_type="small", models_per_instance=2, capacity_source="given", price_per_hour=1.0
    )
    answer = size(trace, [tiny, small], base, slo_p99_ms=1.0, max_count=3)
    assert answer.best is None
    closest = answer.closest()
    assert closest is not None
    assert closest.instance_type == "small" and closest.count >= 1
    assert closest.p99_ms is not None
    assert closest.p99_ms == min(r.p99_ms for r in answer.rows if r.p99_ms is not None)


def test_a_configuration_whose_callers_get_errors_does_not_meet_the_slo() -> None:
    """Requests that fail (ModelNotReadyException after 60 s in the load queue) are not in
    the p99 of answered requests nor in the cold starts: a configuration that fails them must
    not pass for one that meets the SLO."""
    import numpy as np

    from mmelocal.traffic.trace import Trace

    # six cold models at t=0, loads of 18 s one at a time, then 1,000 warm requests to m0
    times = [0.0] * 6 + [200.0 + 0.1 * i for i in range(1000)]
    models = list(range(6)) + [0] * 1000
    trace = Trace(
        times_s=np.asarray(times),
        model_ids=np.asarray(models, dtype=np.int32),
        models=tuple(f"m{i}" for i in range(6)),
    )
    base = SimConfig(models_per_instance=1, load=LoadTimes(samples_s=(18.0,)), service_s=0.01)
    cand = Candidate(
        instance_type="x", models_per_instance=8, capacity_source="given", price_per_hour=1.0
    )
    # one instance: ready at 18, 36, 54 s, then 72, 90, 108 s: three callers time out;
    # two instances: 18, 36, 54 s each, every caller answered
    one = simulate(trace, replace(base, models_per_instance=8)).data
    assert one["errors_by_class"] == {"ModelNotReadyException": 3}
    assert one["latency_ms"]["p99"] == pytest.approx(10.0)  # of the answered ones
    answer = size(trace, [cand], base, slo_p99_ms=100.0)
    first = answer.rows[0]
    assert first.count == 1 and not first.meets and "failed" in first.why_not
    assert answer.best is not None and answer.best.count == 2
    # with none meeting, the closest is the one whose callers got no error
    only_one = size(trace, [cand], base, slo_p99_ms=100.0, max_count=1)
    assert only_one.best is None and only_one.rows[0].errors == 3
    failing = replace(first, p99_ms=10.0)
    answering = replace(first, count=2, errors=0, p99_ms=20_000.0, why_not="p99")
    from mmelocal.traffic.size import SizeAnswer

    assert SizeAnswer(None, [failing, answering], []).closest() is answering


def test_a_trace_that_spans_no_time_is_refused() -> None:
    """Rates per minute over a trace whose requests all come at one instant are undefined:
    size says so instead of judging 6e10 cold starts a minute."""
    import numpy as np

    from mmelocal.traffic.trace import Trace

    one = Trace(
        times_s=np.asarray([0.0]), model_ids=np.asarray([0], dtype=np.int32), models=("m0",)
    )
    cand = Candidate(
        instance_type="x", models_per_instance=1, capacity_source="given", price_per_hour=1.0
    )
    base = SimConfig(models_per_instance=1, service_s=0.01)
    with pytest.raises(UserInputError, match="spans 0 s"):
        size(one, [cand], base, slo_p99_ms=100.0, max_cold_per_min=10)


def test_the_cli_answer_is_readable_in_an_80_column_terminal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``traffic size`` prints its answer whole at 80 columns (the default width of a
    terminal and of a pipe): before, its ten columns were cut to 'cou…', 'p99 ms' '1,0…'."""
    from click.testing import CliRunner

    from mmelocal.cli.main import cli
    from mmelocal.traffic.trace import write_trace

    trace = make_trace(models=20, rate_rps=5, duration_s=60, seed=0)
    path = write_trace(trace, tmp_path / "t.csv")
    args = ["traffic", "size", str(path), "--slo-p99-ms", "100000", "--service-ms", "10"]
    args += ["--instance-type", "ml.g5.xlarge", "--models-per-instance", "3"]
    args += ["--json", str(tmp_path / "z.json")]
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, args)
    assert result.exit_code == 0, result.output
    best = json.loads((tmp_path / "z.json").read_text())["best"]
    assert "…" not in result.output, result.output
    words = " ".join(result.output.split())
    for shown in (
        "ml.g5.xlarge",
        f"{best['count']}",
        f"{best['p99_ms']:,.0f}",
        f"{best['cost_per_month']:,.0f}",
        "given (--service-ms)",
    ):
        assert shown in words, result.output


def test_no_configuration_meeting_the_slo_exits_1_not_the_usage_code(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The answer "none meets it" is a result, like a failed check (exit 1); 2 is bad input."""
    from mmelocal.cli.main import main
    from mmelocal.traffic.trace import write_trace

    trace = make_trace(models=20, rate_rps=5, duration_s=60, seed=0)
    path = write_trace(trace, tmp_path / "t.csv")
    args = ["traffic", "size", str(path), "--slo-p99-ms", "1", "--service-ms", "10"]
    args += ["--instance-type", "ml.g5.xlarge", "--models-per-instance", "3", "--max-count", "2"]
    assert main(args) == 1
    assert "no configuration meets the SLO" in " ".join(capsys.readouterr().err.split())
