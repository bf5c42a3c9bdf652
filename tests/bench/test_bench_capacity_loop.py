"""The capacity loop on a fake instance (no server): stop rules and the recorded numbers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from mmelocal.bench.capacity import CapacityResult, measure_instance
from mmelocal.errors import ModelLoadError

MIB = 1024 * 1024


@dataclass
class _Reading:
    used_bytes: int
    total_bytes: int


class FakeInstance:
    """Each load adds ``footprint`` bytes, the first inference ``lazy`` more."""

    def __init__(
        self,
        *,
        total: int,
        baseline: int,
        footprint: int,
        lazy: int = 0,
        fail_at: int | None = None,
    ) -> None:
        self.total, self.used = total, baseline
        self.footprint, self.lazy, self.fail_at = footprint, lazy, fail_at
        self.loaded: list[str] = []
        self.invoked: set[str] = set()
        self.in_flight = 0

    async def acquire(self, target: str, *, wait_timeout_s: float | None = None) -> Any:
        if self.fail_at is not None and len(self.loaded) + 1 == self.fail_at:
            raise ModelLoadError("boom", model_name=target)
        self.loaded.append(target)
        self.used += self.footprint
        self.in_flight += 1

    def release(self, target: str) -> None:
        self.in_flight -= 1

    async def invoke(self, target: str, body: bytes, headers: list[tuple[str, str]]) -> Any:
        if target not in self.invoked:
            self.invoked.add(target)
            self.used += self.lazy
        return 200, b"{}", {}

    async def read_memory(self) -> _Reading:
        return _Reading(self.used, self.total)


def _result(measurement: Any) -> CapacityResult:
    return CapacityResult(
        source="fake",
        label="",
        model_format="x",
        probe="fake",
        threshold=0.9,
        total_bytes=measurement.total_bytes,
        baseline_bytes=measurement.baseline_bytes,
        loads=measurement.loads,
        next_copy=measurement.next_copy,
        stopped_reason=measurement.stopped_reason,
    )


def _run(instance: FakeInstance, **kwargs: Any) -> CapacityResult:
    targets = [f"model-{i}.tar.gz" for i in range(50)]
    coro = measure_instance(instance, targets, payload=b"{}", **kwargs)
    return _result(asyncio.run(coro))


def test_counts_copies_until_one_crosses_and_counts_lazy_memory() -> None:
    inst = FakeInstance(total=1000 * MIB, baseline=100 * MIB, footprint=150 * MIB, lazy=50 * MIB)
    result = _run(inst)
    # (900 - 100) / 200 = 4 copies within the threshold; the 5th crossed
    assert result.count == 4
    assert result.next_copy is not None and result.next_copy.used_bytes > 900 * MIB
    assert result.per_model_mean_bytes == 200 * MIB  # lazy allocation included
    assert result.projected_count == 4
    assert inst.in_flight == 0
    assert [row["copies"] for row in result.load_rows()] == [0, 1, 2, 3, 4, 5]


def test_prediction_mode_never_goes_over_the_threshold() -> None:
    inst = FakeInstance(total=1000 * MIB, baseline=100 * MIB, footprint=200 * MIB)
    result = _run(inst, verify_next=False)
    assert result.count == 4 and result.next_copy is None
    assert len(inst.loaded) == 4 and "would cross" in result.stopped_reason


def test_max_copies_and_load_failure_stop_the_run() -> None:
    big = FakeInstance(total=100_000 * MIB, baseline=0, footprint=MIB)
    assert _run(big, max_copies=3).count == 3
    failing = FakeInstance(total=1000 * MIB, baseline=0, footprint=100 * MIB, fail_at=3)
    result = _run(failing)
    assert result.count == 2 and "failed to load" in result.stopped_reason


def test_baseline_over_threshold_is_an_error() -> None:
    from mmelocal.errors import BenchError

    with pytest.raises(BenchError, match="raise the memory budget"):
        _run(FakeInstance(total=100 * MIB, baseline=95 * MIB, footprint=MIB))
