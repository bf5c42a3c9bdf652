"""Sweep results: one row per configuration, the sizing arithmetic and the recommendation.

Pure functions over plain data (no server): :func:`row_from_loadtest` picks, from a
configuration's load test, the highest request rate reached with no failure and the
latency percentile under the limit; :func:`recommend` chooses the cheapest configuration
that meets the target rate (fewest instances when there is no price), and says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mmelocal.bench.loadtest.result import LoadTestResult
from mmelocal.bench.loadtest.stepstats import StepStats
from mmelocal.bench.results import BenchResult

STATUSES = ("ok", "skipped", "failed")


@dataclass(frozen=True, kw_only=True)
class SweepRow:
    """One configuration (e.g. ``pt-ig-db``) and what it achieved.

    ``throughput_rps`` is the best step rate with no failure and ``p99_latency_ms`` within the
    limit (None when no step qualified); ``instances_needed`` = ceil(target / throughput);
    ``model_latency_ms`` is Triton's own mean time per request (queue + compute) over the test;
    ``peak_throughput_rps`` is the best step rate with no failure, whatever its latency (None
    when every step had one: a rate of failed requests is no rate of the configuration).
    """

    name: str
    model_format: str
    dynamic_batching: bool
    instance_count: int
    status: str
    reason: str = ""
    throughput_rps: float | None = None
    users_at_load: int | None = None
    p50_latency_ms: float | None = None
    p99_latency_ms: float | None = None
    peak_throughput_rps: float | None = None
    model_latency_ms: float | None = None
    instances_needed: int | None = None
    cost_per_hour: float | None = None
    load_s: float | None = None
    loadtest: LoadTestResult | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")
        if self.instance_count < 1:
            raise ValueError(f"instance_count must be >= 1, got {self.instance_count}")

    @property
    def invocations_per_minute(self) -> float | None:
        """Invocations per minute per instance at the chosen load."""
        return None if self.throughput_rps is None else self.throughput_rps * 60.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the load test nested with its own ``kind``)."""
        data = {k: v for k, v in vars(self).items() if k != "loadtest"}
        data["invocations_per_minute"] = self.invocations_per_minute
        data["loadtest"] = self.loadtest.to_dict() if self.loadtest else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepRow:
        """Inverse of :meth:`to_dict`."""
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "loadtest"}
        loadtest = LoadTestResult.from_dict(data["loadtest"]) if data.get("loadtest") else None
        return cls(**fields, loadtest=loadtest)


def config_name(short_format: str, *, dynamic_batching: bool, instance_count: int) -> str:
    """``pt-base``, ``pt-db``, ``pt-ig``, ``pt-ig-db`` (``-ig3`` for three instances...)."""
    parts = [short_format]
    if instance_count == 2:
        parts.append("ig")
    elif instance_count > 2:
        parts.append(f"ig{instance_count}")
    if dynamic_batching:
        parts.append("db")
    return "-".join(parts) if len(parts) > 1 else f"{short_format}-base"


def best_step(steps: Sequence[StepStats], *, max_latency_ms: float) -> StepStats | None:
    """The step with the highest rate among those with no failure and p99 within the limit."""
    good = [
        s
        for s in steps
        if s.failures == 0
        and s.requests > 0
        and s.p99_latency_ms is not None
        and s.p99_latency_ms <= max_latency_ms
    ]
    return max(good, key=lambda s: s.throughput_rps, default=None)


def peak_step_rps(steps: Sequence[StepStats]) -> float | None:
    """The highest step rate among the steps with requests and no failure (None if none)."""
    return max(
        (s.throughput_rps for s in steps if s.failures == 0 and s.requests > 0), default=None
    )


def row_from_loadtest(
    row: SweepRow,
    loadtest: LoadTestResult,
    *,
    target_rps: float,
    max_latency_ms: float,
    price_per_hour: float | None,
    model_latency_ms: float | None = None,
) -> SweepRow:
    """``row`` filled in from its load test (see :class:`SweepRow`)."""
    step = best_step(loadtest.steps, max_latency_ms=max_latency_ms)
    row = replace(
        row,
        loadtest=loadtest,
        peak_throughput_rps=peak_step_rps(loadtest.steps),
        model_latency_ms=model_latency_ms,
    )
    if step is None or step.throughput_rps <= 0:
        return replace(
            row, reason=f"no tested load kept p99 <= {max_latency_ms:g} ms without failures"
        )
    needed = max(1, math.ceil(target_rps / step.throughput_rps))
    return replace(
        row,
        throughput_rps=step.throughput_rps,
        users_at_load=step.users,
        p50_latency_ms=step.p50_latency_ms,
        p99_latency_ms=step.p99_latency_ms,
        instances_needed=needed,
        cost_per_hour=None if price_per_hour is None else needed * price_per_hour,
    )


def recommend(
    rows: Sequence[SweepRow],
    *,
    target_rps: float,
    max_latency_ms: float,
    instance_type: str,
    currency: str = "USD",
    price_origin: str = "",
) -> str:
    """The recommendation line, with why (a cost names ``price_origin``, the price file)."""
    candidates = [r for r in rows if r.status == "ok" and r.instances_needed is not None]
    if not any(r.status == "ok" for r in rows):
        return "none: no configuration could be built, loaded and measured (see the notes)"
    if not candidates:
        return (
            f"none: no configuration kept p99 latency <= {max_latency_ms:g} ms without failures "
            "at any tested load; try fewer users, a longer latency limit or another format"
        )

    def key(row: SweepRow) -> tuple[float, float, float]:
        cost = (
            row.cost_per_hour if row.cost_per_hour is not None else float(row.instances_needed or 0)
        )
        return (cost, float(row.instances_needed or 0), row.p99_latency_ms or 0.0)

    ranked = sorted(candidates, key=key)
    best = ranked[0]
    assert best.throughput_rps is not None and best.instances_needed is not None
    cost = ""
    if best.cost_per_hour is not None:
        cost = f" = {best.cost_per_hour:,.2f} {currency}/h" + (
            f" (hourly price from {price_origin})" if price_origin else ""
        )
    text = (
        f"{best.name}: {best.instances_needed} x {instance_type}{cost} for {target_rps:g} req/s; "
        f"why: it sustains {best.throughput_rps:,.1f} req/s per instance "
        f"({best.invocations_per_minute:,.0f} invocations/min) at p99 "
        f"{best.p99_latency_ms:,.1f} ms (limit {max_latency_ms:g} ms)"
    )
    base = next((r for r in candidates if r.name.endswith("-base")), None)
    if base is not None and base is not best and base.throughput_rps:
        text += f", {best.throughput_rps / base.throughput_rps:.1f}x {base.name}"
    if len(ranked) > 1:
        second = ranked[1]
        text += f"; next best {second.name} needs {second.instances_needed}"
    skipped = [r.name for r in rows if r.status != "ok"]
    if skipped:
        text += f"; not measured: {', '.join(skipped)}"
    return text


def relative_effects(rows: Sequence[SweepRow]) -> str:
    """Each measured configuration's peak rate against its format's ``-base`` row:
    ``pt-db 1.9x, pt-ig 1.1x, pt-ig-db 2.0x pt-base``."""
    parts: list[str] = []
    for fmt in dict.fromkeys(r.model_format for r in rows):
        group = [r for r in rows if r.model_format == fmt and r.status == "ok"]
        base = next((r for r in group if r.name.endswith("-base")), None)
        if base is None or not base.peak_throughput_rps:
            continue
        others = [
            f"{r.name} {r.peak_throughput_rps / base.peak_throughput_rps:.1f}x"
            for r in group
            if r is not base and r.peak_throughput_rps
        ]
        if others:
            parts.append(f"{', '.join(others)} {base.name}")
    return "; ".join(parts) or "no two configurations of one format were measured"


def cpu_summary(rows: Sequence[SweepRow], *, instance_type: str) -> str:
    """What a sweep on a CPU host says about a GPU instance type: the relative effect of
    batching and instances, no instance count, and where GPU numbers come from."""
    return (
        f"none: no instance count for {instance_type} from this run, which measured a CPU, not "
        f"the instance's GPU. What it shows (peak rate, relative): {relative_effects(rows)}. "
        f"For GPU numbers: `mmelocal capacity estimate SOURCE --instance-type {instance_type}` "
        "(footprint and copies per card, from the model), `mmelocal capacity --endpoint NAME` "
        "or `mmelocal sweep --endpoint NAME` on a deployed endpoint, or this sweep on a "
        "machine with an NVIDIA GPU"
    )


class SweepResult(BenchResult, kind="sweep"):
    """A finished sweep; JSON-able with ``kind = "sweep"``."""

    source: str
    instance_type: str
    target_rps: float
    max_latency_ms: float
    rows: tuple[SweepRow, ...]
    recommendation: str
    price_note: str
    currency: str = "USD"
    machine: str = ""
    started_at: str = ""
    relative_only: bool = False
    """True when measured on a CPU for a GPU instance type: no counts or costs, ratios only."""

    def notes(self) -> list[str]:
        """One line per distinct (status, reason): ``trt-base, trt-db (skipped): no GPU``."""
        groups: dict[tuple[str, str], list[str]] = {}
        for row in self.rows:
            if row.reason:
                groups.setdefault((row.status, row.reason), []).append(row.name)
        return [
            f"{', '.join(names)} ({status}): {reason}" for (status, reason), names in groups.items()
        ]

    def table_rows(self) -> list[dict[str, Any]]:
        """One flat row per configuration for CSV and tables."""
        return [
            {
                "config": r.name,
                "status": r.status,
                "format": r.model_format,
                "dynamic_batching": r.dynamic_batching,
                "instances_per_model": r.instance_count,
                "invocations_per_minute": r.invocations_per_minute,
                "throughput_rps": r.throughput_rps,
                "users_at_load": r.users_at_load,
                "p50_latency_ms": r.p50_latency_ms,
                "p99_latency_ms": r.p99_latency_ms,
                "peak_throughput_rps": r.peak_throughput_rps,
                "model_latency_ms": r.model_latency_ms,
                "instances_needed": r.instances_needed,
                f"cost_per_hour_{self.currency}": r.cost_per_hour,
                "reason": r.reason,
            }
            for r in self.rows
        ]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``kind`` tells ``mmelocal report`` what this is)."""
        return {
            "kind": self.kind,
            "source": self.source,
            "instance_type": self.instance_type,
            "target_rps": self.target_rps,
            "max_latency_ms": self.max_latency_ms,
            "currency": self.currency,
            "price_note": self.price_note,
            "machine": self.machine,
            "started_at": self.started_at,
            "relative_only": self.relative_only,
            "recommendation": self.recommendation,
            "rows": [row.to_dict() for row in self.rows],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepResult:
        """Inverse of :meth:`to_dict`."""
        return cls(
            source=str(data["source"]),
            instance_type=str(data["instance_type"]),
            target_rps=float(data["target_rps"]),
            max_latency_ms=float(data["max_latency_ms"]),
            currency=str(data.get("currency", "USD")),
            price_note=str(data.get("price_note", "")),
            machine=str(data.get("machine", "")),
            started_at=str(data.get("started_at", "")),
            relative_only=bool(data.get("relative_only", False)),
            recommendation=str(data["recommendation"]),
            rows=tuple(SweepRow.from_dict(row) for row in data["rows"]),
        )


__all__ = [
    "STATUSES",
    "SweepResult",
    "SweepRow",
    "best_step",
    "config_name",
    "cpu_summary",
    "peak_step_rps",
    "recommend",
    "relative_effects",
    "row_from_loadtest",
]
