"""Sweep arithmetic without a server: names, the qualifying step, sizing, recommendation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from bench_helpers import fake_loadtest
from shared_helpers import StandInNvml

from mmelocal.bench.loadtest.result import LoadTestResult
from mmelocal.bench.prices import load_prices
from mmelocal.bench.sweep.result import (
    SweepResult,
    SweepRow,
    best_step,
    config_name,
    recommend,
    row_from_loadtest,
)
from mmelocal.errors import UserInputError
from mmelocal.units import MiB as MIB


def test_config_names() -> None:
    names = [
        config_name("pt", dynamic_batching=db, instance_count=n)
        for n in (1, 2)
        for db in (False, True)
    ]
    assert names == ["pt-base", "pt-db", "pt-ig", "pt-ig-db"]
    assert config_name("trt", dynamic_batching=True, instance_count=3) == "trt-ig3-db"


def test_best_step_respects_failures_and_latency() -> None:
    steps = fake_loadtest(failing_from=60).steps  # p99 = 1.5 x users ms; failures from 60 users
    loose, tight = best_step(steps, max_latency_ms=1000), best_step(steps, max_latency_ms=35)
    assert loose is not None and loose.users == 40  # 60+ users failed
    assert tight is not None and tight.users == 20  # 40 users: p99 60 ms > 35
    assert best_step(steps, max_latency_ms=1) is None


def _row(name: str, **kw: object) -> SweepRow:
    base = {
        "model_format": "torchscript",
        "dynamic_batching": False,
        "instance_count": 1,
        "status": "ok",
    }
    base.update(kw)
    return SweepRow(name=name, **base)  # type: ignore[arg-type]


def test_sizing_and_recommendation() -> None:
    loadtest = fake_loadtest(failing_from=60)
    row = row_from_loadtest(
        _row("pt-base"), loadtest, target_rps=500, max_latency_ms=1000, price_per_hour=2.0
    )
    # 40 users step: 4000 requests / 30 s = 133.3 req/s -> ceil(500 / 133.3) = 4 instances
    assert row.users_at_load == 40 and row.instances_needed == 4 and row.cost_per_hour == 8.0
    assert row.invocations_per_minute == pytest.approx(8000)
    faster = _row(
        "pt-ig-db", throughput_rps=400.0, instances_needed=2, cost_per_hour=4.0, p99_latency_ms=30.0
    )
    skipped = _row("trt-base", status="skipped", reason="no GPU")
    text = recommend(
        [row, faster, skipped], target_rps=500, max_latency_ms=1000, instance_type="ml.g4dn.xlarge"
    )
    assert text.startswith("pt-ig-db: 2 x ml.g4dn.xlarge = 4.00 USD/h for")
    priced = recommend(
        [row, faster],
        target_rps=500,
        max_latency_ms=1000,
        instance_type="ml.g4dn.xlarge",
        price_origin="the packaged prices.yaml",
    )
    assert "4.00 USD/h (hourly price from the packaged prices.yaml) for 500 req/s" in priced
    assert "3.0x pt-base" in text and "not measured: trt-base" in text
    assert recommend([skipped], target_rps=1, max_latency_ms=1, instance_type="x").startswith(
        "none"
    )
    result = SweepResult(
        source="s",
        instance_type="ml.g4dn.xlarge",
        target_rps=500,
        max_latency_ms=1000,
        rows=(row, faster, skipped),
        recommendation=text,
        price_note="n",
    )
    assert SweepResult.from_dict(result.to_dict()) == result
    assert result.notes() == ["trt-base (skipped): no GPU"]
    twice = replace(result, rows=(row, skipped, replace(skipped, name="trt-db")))
    assert twice.notes() == ["trt-base, trt-db (skipped): no GPU"]


def test_prices_are_labelled_inputs(tmp_path: Path) -> None:
    table = load_prices()
    assert table.price_for("ml.g4dn.xlarge") is not None
    assert "not a fact" in table.note("ml.g4dn.xlarge")
    assert "No hourly price" in table.note("ml.nothing")
    mine = tmp_path / "p.yaml"
    mine.write_text("currency: EUR\nprices:\n  ml.g5.xlarge: 1.0\n")
    assert load_prices(mine).price_for("ml.g4dn.xlarge") is None
    mine.write_text("prices:\n  ml.g5.xlarge: cheap\n")
    with pytest.raises(UserInputError, match="must be a number"):
        load_prices(mine)


def _steps(*rows: tuple[int, float, float | None, int]) -> LoadTestResult:
    """A load test whose steps are (users, req/s, p99 ms, failures)."""
    from bench_helpers import fake_loadtest

    from mmelocal.bench.loadtest.stepstats import StepStats

    steps = tuple(
        StepStats(
            name=f"{users} users",
            target_users=users,
            users=users,
            duration_s=10.0,
            requests=int(rps * 10),
            successes=int(rps * 10) - failures,
            failures=failures,
            throughput_rps=rps,
            avg_latency_ms=p99,
            p50_latency_ms=p99,
            p95_latency_ms=p99,
            p99_latency_ms=p99,
            max_latency_ms=p99,
        )
        for users, rps, p99, failures in rows
    )
    return replace(fake_loadtest(), steps=steps)


def _sized(loadtest: LoadTestResult, **kw: float | None) -> SweepRow:
    args: dict[str, float | None] = {
        "target_rps": 500.0,
        "max_latency_ms": 100.0,
        "price_per_hour": 1.5,
    }
    args.update(kw)
    return row_from_loadtest(_row("pt-base"), loadtest, **args)  # type: ignore[arg-type]


def test_zero_throughput_cannot_meet_the_target() -> None:
    row = _sized(_steps((5, 0.0, None, 0)))
    assert row.instances_needed is None and row.cost_per_hour is None
    assert row.throughput_rps is None and "no tested load" in row.reason


def test_latency_never_under_the_limit_cannot_meet_the_target() -> None:
    row = _sized(_steps((5, 100.0, 150.0, 0), (10, 150.0, 300.0, 0)))
    assert row.instances_needed is None and "p99 <= 100 ms" in row.reason
    assert row.peak_throughput_rps == 150.0  # still reported, but not used for sizing
    text = recommend([row], target_rps=500, max_latency_ms=100, instance_type="ml.g4dn.xlarge")
    assert text.startswith("none: no configuration kept p99 latency <= 100 ms")


def test_failing_steps_do_not_count_even_when_fast() -> None:
    row = _sized(_steps((5, 100.0, 10.0, 0), (10, 400.0, 20.0, 1)))
    assert row.throughput_rps == 100.0 and row.users_at_load == 5 and row.instances_needed == 5


def test_one_instance_when_it_already_beats_the_target_and_rounding_up() -> None:
    assert _sized(_steps((5, 900.0, 10.0, 0))).instances_needed == 1
    assert _sized(_steps((5, 500.0, 10.0, 0))).instances_needed == 1  # exactly the target
    row = _sized(_steps((5, 499.0, 10.0, 0)))
    assert row.instances_needed == 2 and row.cost_per_hour == pytest.approx(3.0)


def test_no_price_means_no_cost_and_ranking_by_instances() -> None:
    slow = replace(_sized(_steps((5, 100.0, 10.0, 0)), price_per_hour=None), name="pt-base")
    fast = replace(_sized(_steps((5, 260.0, 50.0, 0)), price_per_hour=None), name="pt-db")
    assert slow.cost_per_hour is None and (slow.instances_needed, fast.instances_needed) == (5, 2)
    text = recommend([slow, fast], target_rps=500, max_latency_ms=100, instance_type="t")
    assert text.startswith("pt-db: 2 x t for 500 req/s") and "USD" not in text.split(";")[0]


def test_nothing_measured_is_not_blamed_on_latency() -> None:
    rows = [_row("pt-base", status="failed", reason="build failed: x")]
    text = recommend(rows, target_rps=500, max_latency_ms=100, instance_type="t")
    assert text.startswith("none: no configuration could be built, loaded and measured")


def test_sweep_options_reject_a_zero_target() -> None:
    from mmelocal.bench.sweep.runner import SweepOptions

    with pytest.raises(UserInputError, match="target_rps must be > 0"):
        SweepOptions(target_rps=0)
    with pytest.raises(UserInputError, match="max_latency_ms must be > 0"):
        SweepOptions(max_latency_ms=-1)


def test_a_configuration_whose_requests_all_failed_has_no_peak_rate() -> None:
    from mmelocal.bench.sweep.result import relative_effects

    base = replace(_sized(_steps((5, 100.0, 10.0, 0), (10, 150.0, 20.0, 0))), name="pt-base")
    # every request of pt-db failed, fast: 900 failures/s is no rate of the model's
    all_failed = replace(
        _sized(_steps((5, 900.0, 1.0, 9000), (10, 900.0, 1.0, 9000))), name="pt-db"
    )
    assert all_failed.throughput_rps is None
    assert all_failed.peak_throughput_rps is None
    # a step with a failure does not set the peak either (as the published summary)
    some_failed = replace(_sized(_steps((5, 100.0, 10.0, 0), (10, 300.0, 20.0, 5))), name="pt-ig")
    assert some_failed.peak_throughput_rps == 100.0
    assert relative_effects([base, all_failed, some_failed]) == "pt-ig 0.7x pt-base"


#: NVML's memory total (MiB) of the cards these tests stand in: Modal's table of NVML totals
#: ("Why does an NVIDIA H100 80GB card offer 85.52 GB?"), the A10G as gpus.yaml has it
NVML_TOTAL_MIB = {
    "Tesla T4": 15360,
    "NVIDIA A10G": 23028,
    "NVIDIA L40S": 46068,
    "NVIDIA A100-SXM4-40GB": 40960,
    "NVIDIA A100-SXM4-80GB": 81920,
    "NVIDIA H100 80GB HBM3": 81559,
    "NVIDIA H200": 143771,
}


def _read(name: str, total_mib: int | None = None) -> tuple[str, int]:
    """NVML's (name, memory total in bytes) of a card named ``name``."""
    return name, (total_mib or NVML_TOTAL_MIB[name]) * MIB


def _OneCardNvml(*names: str) -> StandInNvml:
    """One card per name (no GPU here), with its memory total, nothing in use."""
    totals = tuple(NVML_TOTAL_MIB[name] * MIB for name in names)
    return StandInNvml(dict.fromkeys(range(len(names)), 0), names=names, totals_bytes=totals)


def test_a_local_sweep_on_another_card_refuses_to_size_the_instance_type(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On an H200 machine, `sweep --instance-type ml.g4dn.xlarge` measured the H200 and
    sized (and priced) T4 instances from it. It must refuse before building anything, name
    both cards and say what to do instead."""
    import sys

    from mmelocal.bench.sweep.runner import SweepOptions, run_sweep

    monkeypatch.setitem(sys.modules, "pynvml", _OneCardNvml("NVIDIA H200"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(UserInputError) as info:
        run_sweep(tmp_path / "no-such-model.onnx", options=SweepOptions(workdir=tmp_path))
    message = str(info.value)
    assert "NVIDIA H200" in message and "1 x T4" in message and "ml.g4dn.xlarge" in message
    assert "--gpus FILE" in message and "--endpoint" in message
    assert list(tmp_path.iterdir()) == []  # nothing was built


def test_a_local_sweep_on_a_cpu_reads_the_users_card_table_for_a_gpu_type(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A CPU-measured sweep of a GPU instance type keeps ratios only. A type that only the
    user's card table (``--gpus FILE``) names was taken for a CPU type: instance counts and
    costs came from a CPU's throughput (`sweep --endpoint` read the table)."""
    import sys

    from mmelocal.bench.sweep.runner import SweepOptions, run_sweep

    monkeypatch.setitem(sys.modules, "pynvml", _OneCardNvml())  # no card here
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    table = tmp_path / "gpus.yaml"
    table.write_text(
        "gpus:\n  - name: X1\n    nominal: 32 GB\n    memory_mib: 32768\n"
        "    instances:\n      ml.x1.xlarge: 1\n"
    )
    options = SweepOptions(
        instance_type="ml.x1.xlarge", gpus_file=table, workdir=tmp_path, instances=(1,)
    )
    result = run_sweep(tmp_path / "none.onnx", options=options)
    assert result.relative_only, result


@pytest.mark.parametrize(
    ("local", "instance_type", "fits"),
    [
        (["Tesla T4"], "ml.g4dn.xlarge", True),
        (["NVIDIA A10G"], "ml.g5.2xlarge", True),
        (["NVIDIA A100-SXM4-80GB"], "ml.g5.2xlarge", False),
        (["NVIDIA L40S"], "ml.g6.xlarge", False),  # L40S is not an L4
        (["Tesla T4"], "ml.g4dn.12xlarge", False),  # 4 T4s there, one here
        (["Tesla T4"] * 4, "ml.g4dn.12xlarge", True),
        (["Tesla T4"], "ml.c5.xlarge", False),  # a CPU type: this GPU's rate is not it
        (["NVIDIA H100 80GB HBM3"], "ml.p5.4xlarge", True),
    ],
)
def test_cards_match_by_name_and_count(local: list[str], instance_type: str, fits: bool) -> None:
    from mmelocal.bench.capacity.projection import load_gpus
    from mmelocal.bench.sweep.runner import check_cards

    readings = [_read(name) for name in local]
    if fits:
        check_cards(readings, instance_type, load_gpus())
    else:
        with pytest.raises(UserInputError, match="would show this machine's throughput"):
            check_cards(readings, instance_type, load_gpus())


def test_a_94_gb_h100_is_not_the_h100_of_ml_p5() -> None:
    """NVML names the 94 GB H100 SXM5 "NVIDIA H100" (95,830 MiB; no size in the name): a
    sweep here sized ml.p5.4xlarge (one 80 GB H100) from it, and built TensorRT plans here
    for an ml.p5 endpoint. Its memory total says it is not that card."""
    from mmelocal.bench.capacity.projection import load_gpus
    from mmelocal.bench.endpoint.sweep import tensorrt_skip_reason
    from mmelocal.bench.sweep.runner import check_cards
    from mmelocal.runtime.visible_gpus import ServerGpus

    h100_94gb = _read("NVIDIA H100", 95830)
    with pytest.raises(UserInputError, match=r"1 x NVIDIA H100 of 95830 MiB \(not in the card"):
        check_cards([h100_94gb], "ml.p5.4xlarge", load_gpus())
    here = ServerGpus(names=(h100_94gb[0],), indices=(0,), total_bytes=(h100_94gb[1],))
    reason = tensorrt_skip_reason("ep", "ml.p5.48xlarge", on_cpu=False, here=here, gpus=load_gpus())
    assert reason is not None and "NVIDIA H100 of 95830 MiB" in reason and "the H100" in reason


@pytest.mark.parametrize(
    ("instance_type", "on_cpu", "here", "reason"),
    [
        # a laptop sweeping a real ml.g5 endpoint: it runs engines, none can be built here
        ("ml.g5.xlarge", False, (), "none is here"),
        ("ml.g5.xlarge", False, ("NVIDIA A10G",), None),  # built here, for that card
        (
            "ml.g5.xlarge",
            False,
            ("Tesla T4",),
            "Tesla T4 of 15360 MiB (every GPU NVML sees) is not the A10G",
        ),
        ("ml.g5.12xlarge", False, ("NVIDIA A10G", "Tesla T4"), "Tesla T4 of 15360 MiB (every GPU"),
        # a CPU endpoint, swept from a GPU machine: no engine runs there
        ("ml.m5.xlarge", True, ("NVIDIA A10G",), "serves on a CPU"),
        ("ml.m5.xlarge", False, ("NVIDIA A10G",), "serves on a CPU"),
        # a GPU type served on a CPU (the local AWS): its probe reads host memory
        ("ml.g5.xlarge", True, ("NVIDIA A10G",), "serves on a CPU"),
        ("ml.g6e.xlarge", False, ("NVIDIA L40S",), None),  # not in the table: its load says
    ],
)
def test_tensorrt_on_an_endpoint_follows_its_instance_type_and_this_machines_cards(
    instance_type: str, on_cpu: bool, here: tuple[str, ...], reason: str | None
) -> None:
    from mmelocal.bench.capacity.projection import load_gpus
    from mmelocal.bench.endpoint.sweep import tensorrt_skip_reason
    from mmelocal.runtime.visible_gpus import ServerGpus

    gpus = ServerGpus(
        names=here,
        indices=tuple(range(len(here))),
        total_bytes=tuple(_read(name)[1] for name in here),
    )
    found = tensorrt_skip_reason("ep", instance_type, on_cpu=on_cpu, here=gpus, gpus=load_gpus())
    if reason is None:
        assert found is None
    else:
        assert found is not None and reason in found, found


def test_the_refusal_names_the_instance_types_of_this_card() -> None:
    from mmelocal.bench.capacity.projection import card_named, load_gpus
    from mmelocal.bench.sweep.runner import check_cards

    gpus = load_gpus()
    card = card_named("NVIDIA A100-SXM4-40GB", gpus, total_bytes=_read("NVIDIA A100-SXM4-40GB")[1])
    assert card is not None and card.name == "A100-40GB"
    with pytest.raises(UserInputError, match=r"size one of ml\.g4dn\.16xlarge, .*ml\.g4dn\.xlarge"):
        check_cards([_read("Tesla T4")], "ml.g5.xlarge", gpus)


#: CUDA_VISIBLE_DEVICES on a machine with 4 T4s (UUIDs GPU-00000000-... to GPU-00000003-...)
#: -> the T4s the sweep's server sees (CUDA Programming Guide, "CUDA Environment Variables":
#: indices or UUID prefixes, in order; CUDA stops at the first that names no GPU)
FOUR_T4_VISIBLE = {
    "2": 1,
    "GPU-00000003": 1,
    "1,-1,2": 1,
    "3,7,0": 1,
    "0,GPU-00000001-0000": 2,
    "0,1,2,3": 4,
}


@pytest.mark.parametrize("visible", list(FOUR_T4_VISIBLE))
def test_a_sweep_sizes_the_instance_type_on_the_gpus_cuda_visible_devices_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, visible: str
) -> None:
    """On a 4-T4 machine a local sweep refused ml.g4dn.xlarge (1 T4) whatever the user did:
    NVML sees the 4 cards, CUDA_VISIBLE_DEVICES or not. The sweep now counts the cards its
    server will see, as CUDA reads the variable."""
    import sys

    from mmelocal.bench.sweep.runner import SweepOptions, run_sweep

    monkeypatch.setitem(sys.modules, "pynvml", _OneCardNvml(*["Tesla T4"] * 4))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    count = FOUR_T4_VISIBLE[visible]
    fits = {1: "ml.g4dn.xlarge", 4: "ml.g4dn.12xlarge"}
    for instance_type in ("ml.g4dn.xlarge", "ml.g4dn.12xlarge"):
        options = SweepOptions(instance_type=instance_type, workdir=tmp_path, instances=(1,))
        if fits.get(count) != instance_type:
            with pytest.raises(UserInputError, match=f"{count} x Tesla T4"):
                run_sweep(tmp_path / "no-such-model.onnx", options=options)
            continue
        # past the check, the missing model is each row's failure
        result = run_sweep(tmp_path / "no-such-model.onnx", options=options)
        assert f"{count} x Tesla T4 (CUDA_VISIBLE_DEVICES={visible}" in result.machine
        assert {row.status for row in result.rows} == {"failed"}


def test_the_gpus_chosen_by_number_override_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import sys

    from mmelocal.bench.sweep.runner import SweepOptions, run_sweep
    from mmelocal.runtime.visible_gpus import server_gpus

    monkeypatch.setitem(sys.modules, "pynvml", _OneCardNvml(*["Tesla T4"] * 4))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    # the server gets the chosen cards by UUID: the cards NVML numbered, in any CUDA order
    used = server_gpus(chosen=(2,))
    assert used.names == ("Tesla T4",)
    assert dict(used.env) == {"CUDA_VISIBLE_DEVICES": "GPU-00000002-0000-0000-0000-000000000002"}
    options = SweepOptions(workdir=tmp_path, instances=(1,), gpu_indices=(2,))
    assert "1 x Tesla T4 (GPU 2" in run_sweep(tmp_path / "none.onnx", options=options).machine
    # all four: ml.g4dn.xlarge has one, and the refusal says how to choose it
    with pytest.raises(UserInputError) as info:
        run_sweep(tmp_path / "none.onnx", options=replace(options, gpu_indices=None))
    assert "--gpu 0" in str(info.value) and "CUDA_VISIBLE_DEVICES=0" in str(info.value)
    for bad in ((4,), (1, 1)):
        with pytest.raises(UserInputError, match=r"this machine's are 0\.\.3"):
            run_sweep(tmp_path / "none.onnx", options=replace(options, gpu_indices=bad))


@pytest.mark.parametrize(
    ("visible", "order", "words"),
    [
        ("MIG-GPU-00000001-0000/1/0", None, "names a MIG instance"),
        ("1", None, "set CUDA_DEVICE_ORDER=PCI_BUS_ID"),  # unlike cards, CUDA's own order
        ("0,0", "PCI_BUS_ID", "names GPU 0 twice"),
    ],
)
def test_what_cannot_be_read_exactly_is_refused_with_what_to_set(
    monkeypatch: pytest.MonkeyPatch, visible: str, order: str | None, words: str
) -> None:
    import sys

    from mmelocal.runtime.visible_gpus import server_gpus

    monkeypatch.setitem(sys.modules, "pynvml", _OneCardNvml("Tesla T4", "NVIDIA A10G"))
    environ = {"CUDA_VISIBLE_DEVICES": visible} | ({"CUDA_DEVICE_ORDER": order} if order else {})
    with pytest.raises(UserInputError, match=words):
        server_gpus(environ=environ)
    # numbered as nvidia-smi does, an index names one known card
    used = server_gpus(environ={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert used.names == ("NVIDIA A10G",)
    assert dict(used.env) == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    # an empty value hides every GPU: the sweep runs on the CPU, as the server would
    assert server_gpus(environ={"CUDA_VISIBLE_DEVICES": ""}).names == ()
