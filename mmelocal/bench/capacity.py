"""How many copies of a model fit: load copy after copy and read the memory probe.

The loop (:func:`measure_instance`) drives one emulator :class:`TritonInstance` — the same
loading path as ``mmelocal serve``: artifact cache, safe extraction, ``POST /models`` through
Triton's SageMaker front end and the platform's memory waits — and after each load runs one
inference (so lazily allocated memory is counted) and reads the probe until it settles:
NVML device memory on a GPU, the host RSS of the Triton process tree against a budget
otherwise.

It stops when a copy crosses ``threshold x total``: the copies before it are the count, the
one that crossed is kept as the proof (``next_copy``). With ``verify_next=False`` it stops
earlier, as soon as the next copy is *predicted* to cross (mean footprint so far), and loads
nothing over the threshold.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from mmelocal.bench.projection import Projection, project_count, validate_threshold
from mmelocal.errors import BenchError, MmeLocalError, UserInputError

logger = logging.getLogger(__name__)

MIB = 1024 * 1024


class _Reading(Protocol):
    used_bytes: int
    total_bytes: int


class CapacityInstance(Protocol):
    """What the loop needs of an emulator instance (``TritonInstance`` provides it)."""

    async def acquire(self, target: str, *, wait_timeout_s: float | None = None) -> Any: ...

    def release(self, target: str) -> None: ...

    async def invoke(
        self, target: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, Any]: ...

    async def read_memory(self) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class LoadRecord:
    """One copy loaded: memory in use after it (and its warm-up inference), times taken."""

    copies: int
    target: str
    used_bytes: int
    delta_bytes: int
    load_s: float
    warmup_s: float

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON/CSV."""
        return dict(vars(self))


@dataclass(frozen=True, kw_only=True)
class CapacityResult:
    """A capacity measurement; JSON-able with ``kind = "capacity"``.

    ``count`` copies stayed within ``threshold x total_bytes``; ``loads`` are those copies;
    ``next_copy`` is the copy that crossed (None when the run stopped on a prediction, a
    load failure or ``max_copies``).
    """

    kind: ClassVar[str] = "capacity"
    source: str
    label: str
    model_format: str
    probe: str
    total_bytes: int
    threshold: float
    baseline_bytes: int
    loads: tuple[LoadRecord, ...]
    next_copy: LoadRecord | None
    stopped_reason: str
    started_at: str = ""
    projection: Projection | None = None

    @property
    def count(self) -> int:
        """Copies loaded within the threshold."""
        return len(self.loads)

    @property
    def limit_bytes(self) -> int:
        """``threshold x total``."""
        return int(self.threshold * self.total_bytes)

    @property
    def deltas_bytes(self) -> list[int]:
        """Memory each copy added (first one against the baseline)."""
        return [load.delta_bytes for load in self.loads]

    @property
    def per_model_mean_bytes(self) -> float | None:
        """Mean footprint per copy (None before any copy)."""
        return statistics.fmean(self.deltas_bytes) if self.loads else None

    @property
    def per_model_stdev_bytes(self) -> float | None:
        """Spread of the footprint (sample standard deviation; None under two copies)."""
        return statistics.stdev(self.deltas_bytes) if len(self.loads) >= 2 else None

    @property
    def projected_count(self) -> int | None:
        """The projection formula applied to the measured card itself (should be ``count``)."""
        mean = self.per_model_mean_bytes
        if not mean or mean <= 0:
            return None
        return project_count(
            total_bytes=self.total_bytes,
            baseline_bytes=self.baseline_bytes,
            per_model_bytes=mean,
            threshold=self.threshold,
        )

    def summary_lines(self) -> list[str]:
        """Plain-text summary for the CLI and the report."""
        mean, spread = self.per_model_mean_bytes, self.per_model_stdev_bytes
        lines = [
            f"{self.count} copies fit under {self.threshold:.0%} of {self.total_bytes / MIB:,.0f}"
            f" MiB ({self.probe}); stopped: {self.stopped_reason}",
            f"baseline (server, no model): {self.baseline_bytes / MIB:,.1f} MiB",
        ]
        if mean is not None:
            lines.append(
                f"per model: {mean / MIB:,.1f} MiB mean"
                + (f", ±{spread / MIB:,.1f} MiB (stdev)" if spread is not None else "")
                + f", min {min(self.deltas_bytes) / MIB:,.1f}"
                + f", max {max(self.deltas_bytes) / MIB:,.1f}"
            )
            lines.append(f"projection onto this card gives {self.projected_count} copies")
        if self.next_copy is not None:
            lines.append(
                f"copy {self.next_copy.copies} crossed the threshold: "
                f"{self.next_copy.used_bytes / MIB:,.1f} MiB > {self.limit_bytes / MIB:,.1f} MiB"
            )
        if self.loads:
            load_times = [load.load_s for load in self.loads]
            lines.append(f"load time per copy: mean {statistics.fmean(load_times):.2f} s")
        return lines

    def load_rows(self) -> list[dict[str, Any]]:
        """One row per reading (baseline, each copy, the crossing copy) for CSV/tables."""
        rows: list[dict[str, Any]] = [
            {
                "copies": 0,
                "target": "(baseline)",
                "used_mib": self.baseline_bytes / MIB,
                "delta_mib": None,
                "load_s": None,
                "warmup_s": None,
                "within_threshold": True,
            }
        ]
        records = [*self.loads, *([self.next_copy] if self.next_copy else [])]
        for record in records:
            rows.append(
                {
                    "copies": record.copies,
                    "target": record.target,
                    "used_mib": record.used_bytes / MIB,
                    "delta_mib": record.delta_bytes / MIB,
                    "load_s": record.load_s,
                    "warmup_s": record.warmup_s,
                    "within_threshold": record.used_bytes <= self.limit_bytes,
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (``kind`` tells ``mmelocal report`` what this is)."""
        return {
            "kind": self.kind,
            "source": self.source,
            "label": self.label,
            "model_format": self.model_format,
            "probe": self.probe,
            "started_at": self.started_at,
            "total_bytes": self.total_bytes,
            "threshold": self.threshold,
            "limit_bytes": self.limit_bytes,
            "baseline_bytes": self.baseline_bytes,
            "count": self.count,
            "per_model_mean_bytes": self.per_model_mean_bytes,
            "per_model_stdev_bytes": self.per_model_stdev_bytes,
            "projected_count": self.projected_count,
            "stopped_reason": self.stopped_reason,
            "loads": [load.to_dict() for load in self.loads],
            "next_copy": self.next_copy.to_dict() if self.next_copy else None,
            "projection": self.projection.to_dict() if self.projection else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CapacityResult:
        """Inverse of :meth:`to_dict` (derived numbers are recomputed)."""
        return cls(
            source=str(data["source"]),
            label=str(data.get("label", "")),
            model_format=str(data.get("model_format", "")),
            probe=str(data["probe"]),
            started_at=str(data.get("started_at", "")),
            total_bytes=int(data["total_bytes"]),
            threshold=float(data["threshold"]),
            baseline_bytes=int(data["baseline_bytes"]),
            loads=tuple(LoadRecord(**load) for load in data["loads"]),
            next_copy=LoadRecord(**data["next_copy"]) if data.get("next_copy") else None,
            stopped_reason=str(data["stopped_reason"]),
            projection=Projection.from_dict(data["projection"]) if data.get("projection") else None,
        )


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """What :func:`measure_instance` read (before it becomes a :class:`CapacityResult`)."""

    total_bytes: int
    baseline_bytes: int
    loads: tuple[LoadRecord, ...]
    next_copy: LoadRecord | None
    stopped_reason: str


async def settle_reading(
    read: Callable[[], Any], *, interval_s: float = 0.2, max_s: float = 3.0
) -> Any:
    """Read until two readings in a row differ by < max(1 MiB, 0.5 %) (or ``max_s`` passed)."""
    previous = await read()
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        await asyncio.sleep(interval_s)
        reading = await read()
        if abs(reading.used_bytes - previous.used_bytes) < max(MIB, previous.used_bytes // 200):
            return reading
        previous = reading
    return previous


async def measure_instance(
    instance: CapacityInstance,
    targets: Sequence[str],
    *,
    threshold: float = 0.9,
    max_copies: int = 200,
    payload: bytes | None = None,
    content_type: str = "application/json",
    verify_next: bool = True,
    progress: Callable[[LoadRecord], None] | None = None,
) -> Measurement:
    """Load ``targets`` one by one on ``instance`` (see the module docstring)."""
    validate_threshold(threshold)
    if max_copies < 1:
        raise UserInputError(f"max_copies must be >= 1, got {max_copies}")
    if not targets:
        raise UserInputError("capacity needs at least one copy to load")
    baseline = await settle_reading(instance.read_memory)
    total, limit = int(baseline.total_bytes), threshold * baseline.total_bytes
    if baseline.used_bytes > limit:
        raise BenchError(
            f"the empty server already uses {baseline.used_bytes / MIB:,.0f} MiB, over "
            f"{threshold:.0%} of {total / MIB:,.0f} MiB: raise the memory budget"
        )
    loads: list[LoadRecord] = []
    previous = int(baseline.used_bytes)
    reason = f"all {len(targets)} copies available were loaded"
    for target in targets:
        if len(loads) >= max_copies:
            reason = f"reached max copies ({max_copies})"
            break
        if not verify_next and loads:
            mean = (previous - baseline.used_bytes) / len(loads)
            if previous + mean > limit:
                reason = (
                    f"the next copy would cross the threshold (predicted "
                    f"{(previous + mean) / MIB:,.0f} MiB > {limit / MIB:,.0f} MiB)"
                )
                break
        copies = len(loads) + 1
        try:
            record = await _load_one(instance, target, copies, previous, payload, content_type)
        except (MmeLocalError, OSError) as exc:
            reason = f"copy {copies} ({target}) failed to load: {exc}"
            logger.warning("capacity: %s", reason)
            return Measurement(
                total_bytes=total,
                baseline_bytes=int(baseline.used_bytes),
                loads=tuple(loads),
                next_copy=None,
                stopped_reason=reason,
            )
        if progress is not None:
            progress(record)
        if record.used_bytes > limit:
            reason = f"copy {copies} crossed {threshold:.0%} of the total"
            logger.info("capacity: %s (%d bytes in use)", reason, record.used_bytes)
            return Measurement(
                total_bytes=total,
                baseline_bytes=int(baseline.used_bytes),
                loads=tuple(loads),
                next_copy=record,
                stopped_reason=reason,
            )
        loads.append(record)
        previous = record.used_bytes
    return Measurement(
        total_bytes=total,
        baseline_bytes=int(baseline.used_bytes),
        loads=tuple(loads),
        next_copy=None,
        stopped_reason=reason,
    )


async def _load_one(
    instance: CapacityInstance,
    target: str,
    copies: int,
    previous_bytes: int,
    payload: bytes | None,
    content_type: str,
) -> LoadRecord:
    t0 = time.perf_counter()
    await instance.acquire(target)
    load_s = time.perf_counter() - t0
    warmup_s = 0.0
    try:
        if payload is not None:
            t1 = time.perf_counter()
            status, body, _ = await instance.invoke(target, payload, {"Content-Type": content_type})
            warmup_s = time.perf_counter() - t1
            if status != 200:
                raise BenchError(
                    f"warm-up inference on {target} answered HTTP {status}: "
                    f"{body[:300].decode('utf-8', 'replace')}"
                )
    finally:
        instance.release(target)
    reading = await settle_reading(instance.read_memory)
    used = int(reading.used_bytes)
    logger.info(
        "capacity: copy %d (%s) loaded in %.2f s, %d bytes in use (+%d)",
        copies,
        target,
        load_s,
        used,
        used - previous_bytes,
    )
    return LoadRecord(
        copies=copies,
        target=target,
        used_bytes=used,
        delta_bytes=used - previous_bytes,
        load_s=round(load_s, 4),
        warmup_s=round(warmup_s, 4),
    )


def copies_needed(max_copies: int, *, verify_next: bool) -> int:
    """How many tarball copies a run may load."""
    return max_copies + (1 if verify_next else 0)


def footprint_ratio(a: CapacityResult, b: CapacityResult) -> float | None:
    """``b``'s mean per-model footprint over ``a``'s (to compare formats)."""
    ma, mb = a.per_model_mean_bytes, b.per_model_mean_bytes
    if not ma or not mb or math.isclose(ma, 0.0):
        return None
    return mb / ma


__all__ = [
    "CapacityInstance",
    "CapacityResult",
    "LoadRecord",
    "Measurement",
    "copies_needed",
    "footprint_ratio",
    "measure_instance",
    "settle_reading",
]
