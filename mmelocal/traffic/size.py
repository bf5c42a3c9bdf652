"""Sizing an endpoint for a trace: instance types x counts through the simulator.

For each instance type (one GPU each, as every MME GPU type has), the capacity per instance
is ``--models-per-instance`` or projected from the footprints onto the card's memory
(``floor((threshold * card - baseline) / per_model)``, :func:`project_count`). Counts grow
from 1 until the configuration meets the SLO; the cheapest one that does wins. A
configuration whose callers get errors (``ModelNotReadyException`` after a long wait in the
load queue) never meets it: those requests are in neither the p99 of answered requests nor
the cold starts.

Service time and cold-load time on a GPU type come only from measurements (a benchmark /
loadtest of a real endpoint, or the user's ``--service-ms`` / ``--load-seconds``). Without
a service time, p99 is unknown: configurations are ranked by hit ratio and cold-start rate
and the table says p99 needs a measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mmelocal.errors import UserInputError
from mmelocal.traffic.simulate import SimConfig, simulate
from mmelocal.traffic.trace import Trace

HOURS_PER_MONTH = 730.0


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One instance type the search may use: its capacity per instance and price."""

    instance_type: str
    models_per_instance: int
    capacity_source: str  # "measured", "estimate" or "given"
    price_per_hour: float | None


@dataclass(frozen=True, kw_only=True)
class SizeRow:
    """One simulated configuration."""

    instance_type: str
    count: int
    models_per_instance: int
    capacity_source: str
    invocations_per_min_per_instance: float
    hit_ratio: float
    cold_starts_per_min: float
    p99_ms: float | None
    latency_source: str
    price_per_hour: float | None
    meets: bool
    why_not: str = ""
    errors: int = 0

    @property
    def cost_per_hour(self) -> float | None:
        """Hourly cost of the fleet (None without a price)."""
        return None if self.price_per_hour is None else self.price_per_hour * self.count

    @property
    def cost_per_month(self) -> float | None:
        """Monthly cost of the fleet (730 hours)."""
        c = self.cost_per_hour
        return None if c is None else c * HOURS_PER_MONTH

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "instance_type": self.instance_type,
            "count": self.count,
            "models_per_instance": self.models_per_instance,
            "capacity_source": self.capacity_source,
            "invocations_per_min_per_instance": self.invocations_per_min_per_instance,
            "hit_ratio": self.hit_ratio,
            "cold_starts_per_min": self.cold_starts_per_min,
            "p99_ms": self.p99_ms,
            "latency_source": self.latency_source,
            "cost_per_hour": self.cost_per_hour,
            "cost_per_month": self.cost_per_month,
            "meets": self.meets,
            "why_not": self.why_not,
            "errors": self.errors,
        }


@dataclass(frozen=True)
class SizeAnswer:
    """The cheapest configuration that meets the SLO (None when none does) and every
    configuration tried."""

    best: SizeRow | None
    rows: list[SizeRow]
    notes: list[str]

    def closest(self) -> SizeRow | None:
        """The configuration nearest the SLO when none meets it: fewest failed requests, then
        lowest p99 (or cold rate), among those simulated (a type that holds no model has no
        figures to be near with)."""
        simulated = [r for r in self.rows if r.count > 0] or self.rows
        if not simulated:
            return None
        return min(
            simulated,
            key=lambda r: (
                r.errors,
                r.p99_ms if r.p99_ms is not None else 0.0,
                r.cold_starts_per_min,
                -r.hit_ratio,
            ),
        )


def size(
    trace: Trace,
    candidates: Sequence[Candidate],
    base: SimConfig,
    *,
    slo_p99_ms: float | None,
    max_cold_per_min: float | None = None,
    max_count: int = 16,
    latency_source: str = "measured",
    progress: Callable[[str], None] | None = None,
) -> SizeAnswer:
    """Search counts 1..``max_count`` of each candidate (see the module docstring);
    ``latency_source`` says where the service time came from."""
    if not candidates:
        raise UserInputError("no instance type to size: give --instance-type or a price table")
    if slo_p99_ms is not None and slo_p99_ms <= 0:
        raise UserInputError(f"--slo-p99-ms must be > 0, got {slo_p99_ms:g}")
    if max_count < 1:
        raise UserInputError(f"--max-count must be >= 1, got {max_count}")
    latency_known = base.service_s is not None
    notes: list[str] = []
    if not latency_known:
        notes.append(
            "p99 needs a measurement: no service time (--service-ms, or a benchmark/loadtest "
            "result of a real endpoint), so configurations are ranked by hit ratio and cold "
            "starts only and the p99 SLO is not checked."
        )
    if trace.duration_s <= 0:
        raise UserInputError(
            f"the trace spans 0 s (its {len(trace):,} request(s) all at "
            f"t={trace.duration_s:g} s): sizing needs rates per minute, so give a trace whose "
            "requests spread over time"
        )
    minutes = trace.duration_s / 60.0
    rows: list[SizeRow] = []
    for cand in candidates:
        if cand.models_per_instance < 1:
            rows.append(
                SizeRow(
                    instance_type=cand.instance_type,
                    count=0,
                    models_per_instance=0,
                    capacity_source=cand.capacity_source,
                    invocations_per_min_per_instance=0.0,
                    hit_ratio=0.0,
                    cold_starts_per_min=float("inf"),
                    p99_ms=None,
                    latency_source="-",
                    price_per_hour=cand.price_per_hour,
                    meets=False,
                    why_not="not one model fits on its card",
                )
            )
            continue
        for count in range(1, max_count + 1):
            if progress is not None:
                progress(f"{cand.instance_type} x {count}")
            config = replace(
                base,
                instances=count,
                models_per_instance=cand.models_per_instance,
                memory_limit_bytes=None,
                autoscaling=None,
                instance_type=cand.instance_type,
                price_per_hour=cand.price_per_hour,
            )
            result = simulate(trace, config).data
            p99 = result["latency_ms"]["p99"] if latency_known else None
            why: list[str] = []
            errors = int(result["errors"])
            if errors:
                classes = ", ".join(f"{k} {v:,}" for k, v in result["errors_by_class"].items())
                why.append(f"{errors:,} requests failed ({classes})")
            if slo_p99_ms is not None and p99 is not None and p99 > slo_p99_ms:
                why.append(f"p99 {p99:,.0f} ms > {slo_p99_ms:g}")
            cold = result["cold_starts_per_min"]
            if max_cold_per_min is not None and cold > max_cold_per_min:
                why.append(f"{cold:.2f} cold starts/min > {max_cold_per_min:g}")
            row = SizeRow(
                instance_type=cand.instance_type,
                count=count,
                models_per_instance=cand.models_per_instance,
                capacity_source=cand.capacity_source,
                invocations_per_min_per_instance=len(trace) / minutes / count,
                hit_ratio=result["hit_ratio"] or 0.0,
                cold_starts_per_min=cold,
                p99_ms=p99,
                latency_source=latency_source if latency_known else "needs a measurement",
                price_per_hour=cand.price_per_hour,
                meets=not why,
                why_not="; ".join(why),
                errors=errors,
            )
            rows.append(row)
            if row.meets:
                break
            if count > 1 and _no_better(rows[-2], row):
                row = replace(row, why_not=row.why_not + "; more instances stopped helping")
                rows[-1] = row
                break
    meeting = [r for r in rows if r.meets]
    priced = [r for r in meeting if r.cost_per_hour is not None]
    if priced:
        best: SizeRow | None = min(priced, key=lambda r: (r.cost_per_hour, -r.hit_ratio))
    elif meeting:
        best = min(meeting, key=lambda r: (r.count, -r.hit_ratio))
        notes.append("no price for the configurations that meet the SLO: the fewest instances win")
    else:
        best = None
    return SizeAnswer(best=best, rows=rows, notes=notes)


def _no_better(before: SizeRow, after: SizeRow) -> bool:
    """True when one more instance changed nothing the SLO looks at (a plateau)."""
    same_cold = abs(after.cold_starts_per_min - before.cold_starts_per_min) < 1e-9
    same_p99 = (after.p99_ms or 0.0) >= (before.p99_ms or 0.0) * 0.999
    same_errors = after.errors >= before.errors
    return same_cold and same_p99 and same_errors and after.count > 2


__all__ = ["HOURS_PER_MONTH", "Candidate", "SizeAnswer", "SizeRow", "size"]
