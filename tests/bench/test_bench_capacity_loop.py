"""The capacity loop on a fake instance (no server): stop rules and the recorded numbers."""

from __future__ import annotations

from typing import Any

import pytest
from bench_helpers import FakeInstance, run_fake_capacity

MIB = 1024 * 1024


def test_counts_copies_until_one_crosses_and_counts_lazy_memory() -> None:
    inst = FakeInstance(total=1000 * MIB, baseline=100 * MIB, footprint=150 * MIB, lazy=50 * MIB)
    result = run_fake_capacity(inst)
    # (900 - 100) / 200 = 4 copies within the threshold; the 5th crossed
    assert result.count == 4
    assert result.next_copy is not None and result.next_copy.used_bytes > 900 * MIB
    assert result.per_model_mean_bytes == 200 * MIB  # lazy allocation included
    assert result.projected_count == 4
    assert inst.in_flight == 0
    assert [row["copies"] for row in result.load_rows()] == [0, 1, 2, 3, 4, 5]


def test_prediction_mode_never_goes_over_the_threshold() -> None:
    inst = FakeInstance(total=1000 * MIB, baseline=100 * MIB, footprint=200 * MIB)
    result = run_fake_capacity(inst, verify_next=False)
    assert result.count == 4 and result.next_copy is None
    assert len(inst.loaded) == 4 and "would cross" in result.stopped_reason


def test_prediction_mode_predicts_a_copy_without_the_first_copys_runtime() -> None:
    """The first copy brings a 300 MiB runtime that no later copy repeats: predicting the
    next copy with the mean growth (runtime included) stopped one copy short."""

    # limit 0.8 x 1600 = 1280 MiB: 100 + 300 + 4 x (150 + 50) = 1200 fits, a fifth does not
    def fake() -> FakeInstance:
        return FakeInstance(
            total=1600 * MIB, baseline=100 * MIB, footprint=150 * MIB, lazy=50 * MIB,
            shared=300 * MIB,
        )  # fmt: skip

    assert run_fake_capacity(fake(), threshold=0.8).count == 4
    predicted = run_fake_capacity(fake(), threshold=0.8, verify_next=False)
    assert predicted.count == 4 and predicted.next_copy is None
    assert "predicted 1,400 MiB" in predicted.stopped_reason


def test_max_copies_and_load_failure_stop_therun_fake_capacity() -> None:
    big = FakeInstance(total=100_000 * MIB, baseline=0, footprint=MIB)
    assert run_fake_capacity(big, max_copies=3).count == 3
    failing = FakeInstance(total=1000 * MIB, baseline=0, footprint=100 * MIB, fail_at=3)
    result = run_fake_capacity(failing)
    assert result.count == 2 and "failed to load" in result.stopped_reason


def test_baseline_over_threshold_is_an_error() -> None:
    from mmelocal.errors import BenchError

    with pytest.raises(BenchError, match="raise the memory budget"):
        run_fake_capacity(FakeInstance(total=100 * MIB, baseline=95 * MIB, footprint=MIB))


def test_footprint_in_two_parts_implies_the_measured_count() -> None:
    # the first copy brings a 300 MiB runtime: 100 + 300 + 4 x (150 + 50) = 1200 > 1080
    inst = FakeInstance(
        total=1200 * MIB, baseline=100 * MIB, footprint=150 * MIB, lazy=50 * MIB, shared=300 * MIB
    )
    result = run_fake_capacity(inst)
    assert [load.marginal_bytes for load in result.loads] == [200 * MIB] * result.count
    assert result.marginal_mean_bytes == 200 * MIB
    assert result.shared_runtime_bytes == 300 * MIB
    # floor((1080 - 100 - 300) / 200) = 3, and 3 is what was loaded before one crossed
    assert result.implied_count == result.count == 3
    # the mean growth mixes the runtime into every copy and predicts too few on bigger cards
    assert result.per_model_mean_bytes == 300 * MIB
    line = result.footprint_line()
    assert line is not None and "copy: 200 MiB, torch runtime once: 300 MiB -> 3 copies" in line
    assert line in result.summary_lines()
    data = result.to_dict()
    assert data["shared_runtime_bytes"] == 300 * MIB and data["implied_count"] == 3
    again = type(result).from_dict(data)
    assert again.implied_count == 3 and again.loads == result.loads


def test_the_runtime_in_the_first_copys_own_memory_is_counted_once() -> None:
    """On a real host the first stub is the only process mapping the runtime, so its USS
    holds it: the copy's own part is read from the second copy on, the runtime is what the
    first copy added beyond it, and the parts imply the measured count."""
    inst = FakeInstance(
        total=1200 * MIB,
        baseline=100 * MIB,
        footprint=150 * MIB,
        lazy=50 * MIB,
        shared=300 * MIB,
        runtime_in_first=True,
    )
    result = run_fake_capacity(inst)
    marginals = [load.marginal_bytes for load in result.loads]
    assert marginals[0] == 500 * MIB and marginals[1:] == [200 * MIB] * (result.count - 1)
    assert result.marginal_mean_bytes == 200 * MIB
    assert result.shared_runtime_bytes == 300 * MIB
    assert result.implied_count == result.count == 3


def test_the_projection_and_the_footprint_in_two_parts_give_one_count() -> None:
    """The summary printed "projection onto this memory budget gives 3 copies" from the mean
    growth (the first copy's runtime in every copy) beside "copy: 297 MiB, torch runtime
    once: 76 MiB -> 4 copies": two counts for one budget. Both now use the parts, as the
    projection onto other cards does; the parts are right (the fake fits 7)."""
    inst = FakeInstance(
        total=2000 * MIB,
        baseline=100 * MIB,
        footprint=200 * MIB,
        shared=300 * MIB,
        runtime_in_first=True,
    )
    result = run_fake_capacity(inst, threshold=0.9, max_copies=2)
    assert result.per_model_mean_bytes == 350 * MIB  # floor(1700 / 350) = 4: too few
    # 100 + 300 + 7 x 200 = 1800 = 0.9 x 2000: seven copies fit
    assert result.implied_count == 7
    assert result.projected_count == 7
    lines = "\n".join(result.summary_lines())
    assert "gives 7 copies" in lines and "-> 7 copies" in lines, lines


def test_one_copy_splits_on_its_own_figure() -> None:
    inst = FakeInstance(total=1200 * MIB, baseline=100 * MIB, footprint=150 * MIB, shared=300 * MIB)
    result = run_fake_capacity(inst, max_copies=1)
    assert result.count == 1 and result.marginal_mean_bytes == 150 * MIB
    assert result.shared_runtime_bytes == 300 * MIB


def test_without_per_process_figures_there_is_no_split() -> None:
    result = run_fake_capacity(FakeInstance(total=1000 * MIB, baseline=0, footprint=100 * MIB))
    assert result.loads[0].marginal_bytes is None
    assert result.shared_runtime_bytes is None and result.implied_count is None
    assert result.footprint_line() is None


def test_a_reading_still_moving_on_a_large_card_is_not_settled() -> None:
    """An 80 GB card 70 GiB full whose memory still grows 100 MiB a reading (a model still
    allocating) has not settled: 0.5 % of the used memory (350 MiB) took the second
    reading. Settled is the probe's own jitter, whatever the card's size."""
    import asyncio
    from types import SimpleNamespace

    from mmelocal.bench.capacity.loop import SETTLE_TOLERANCE_BYTES, settle_reading

    gib = 1024 * MIB
    growing = [70 * gib + k * 100 * MIB for k in (0, 1, 2, 3, 3)]
    jitter = [70 * gib, 70 * gib + SETTLE_TOLERANCE_BYTES - 1]

    def reader(values: list[int]) -> Any:
        readings = iter(values)

        async def read() -> Any:
            return SimpleNamespace(used_bytes=next(readings), total_bytes=80 * gib)

        return read

    settled = asyncio.run(settle_reading(reader(growing), interval_s=0.0, max_s=60.0))
    assert settled.used_bytes == 70 * gib + 300 * MIB
    settled = asyncio.run(settle_reading(reader(jitter), interval_s=0.0, max_s=60.0))
    assert settled.used_bytes == jitter[1]  # within the jitter bound: settled at once


class _StillAllocating(FakeInstance):
    """The first copy's memory keeps growing 2 MiB a reading: it never settles."""

    async def read_memory(self) -> Any:
        if self.loaded:
            self.used += 2 * MIB
        return await super().read_memory()


def test_memory_that_never_settles_is_logged_and_shown_in_the_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Memory still moving when the settling wait (3 s) ends: the last reading is taken, as
    before, but a warning says so and the result names the copy (before: silently)."""
    import asyncio

    from mmelocal.bench.capacity.loop import measure_instance

    inst = _StillAllocating(total=1000 * MIB, baseline=100 * MIB, footprint=100 * MIB)
    with caplog.at_level("WARNING", logger="mmelocal.bench.capacity.loop"):
        measurement = asyncio.run(
            measure_instance(inst, ["model-0.tar.gz"], payload=b"{}", max_copies=1)
        )
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "copy 1 (model-0.tar.gz)" in warnings[0], warnings
    assert "had not settled" in warnings[0]
    assert measurement.unsettled_copies == (1,)  # the baseline (copy 0) settled
    result = measurement.result(
        source="fake",
        label="",
        model_format="torchscript",
        probe="fake",
        threshold=0.9,
        started_at="",
        gpus=(),
    )
    assert any("had not settled" in line and "copy 1" in line for line in result.summary_lines())
    assert result.to_dict()["unsettled_copies"] == [1]
    assert type(result).from_dict(result.to_dict()).unsettled_copies == (1,)
