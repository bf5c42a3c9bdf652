"""Capacity results: the copies loaded, the memory after each, the footprint statistics.

Kept apart from :mod:`mmelocal.bench.capacity.loop` (which drives the emulator) so reports and
tests can read results without importing the emulator.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mmelocal.bench.capacity.footprint import runtime_name
from mmelocal.bench.capacity.projection import Projection, is_gpu_instance_type, project_count
from mmelocal.bench.results import BenchResult
from mmelocal.units import MiB


@dataclass(frozen=True, kw_only=True)
class LoadRecord:
    """One copy loaded: memory in use after it (and its warm-up inference), times taken.

    ``marginal_bytes`` is the copy's own part of ``delta_bytes`` (USS of the stub it started
    plus the server's own change; None where the probe has no per-process figures). For the
    first copy it holds the shared runtime too (see
    :attr:`CapacityResult.marginal_mean_bytes`).
    """

    copies: int
    target: str
    used_bytes: int
    delta_bytes: int
    load_s: float
    warmup_s: float
    marginal_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON/CSV."""
        return dict(vars(self))


class CapacityResult(BenchResult, kind="capacity"):
    """A capacity measurement; JSON-able with ``kind = "capacity"``.

    ``count`` copies stayed within ``threshold x total_bytes``; ``loads`` are those copies;
    ``next_copy`` is the copy that crossed (None when the run stopped on a prediction, a
    load failure or ``max_copies``). ``unsettled_copies``: the readings taken while the
    memory was still moving when the settling wait ended (0: the empty server's), which may
    read short. ``instance_type`` is set when the copies were loaded on
    a deployed endpoint of that type (``capacity --endpoint``); empty for a local run.
    """

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
    instance_type: str = ""
    #: the precision of the model's weights (fp32, fp16...; :mod:`mmelocal.builder.precision`),
    #: "" when unknown: an estimate compares itself only with a measurement of its precision
    precision: str = ""
    unsettled_copies: tuple[int, ...] = ()

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
    def marginal_mean_bytes(self) -> float | None:
        """Mean marginal footprint per copy, from the second copy on (None without
        per-process figures).

        A copy's own memory is the USS of the stub it started: the pages no other process
        maps. The first copy's stub is the only process mapping the runtime it loads
        (libtorch's pages), so its USS holds the runtime too, unless some process outside
        the tree happens to map the same library (the measuring process, when it imported
        torch). From the second copy on, the runtime's pages are shared and the USS is the
        copy's own part alone. With one copy, its figure is all there is.
        """
        marginals = [load.marginal_bytes for load in self.loads]
        if not marginals or any(m is None for m in marginals):
            return None
        return statistics.fmean(m for m in marginals[1:] or marginals if m is not None)

    @property
    def shared_runtime_bytes(self) -> int | None:
        """What the first copy brought beyond a copy's own part: the shared runtime."""
        marginal = self.marginal_mean_bytes
        if not self.loads or marginal is None:
            return None
        return max(0, round(self.loads[0].delta_bytes - marginal))

    @property
    def runtime(self) -> str:
        """Name of the shared runtime (``torch`` for TorchScript)."""
        return runtime_name(self.model_format)

    @property
    def implied_count(self) -> int | None:
        """Copies the two parts imply: the projection formula with the shared runtime in
        the baseline, ``floor((threshold x total - baseline - shared) / marginal)``."""
        marginal, shared = self.marginal_mean_bytes, self.shared_runtime_bytes
        if marginal is None or shared is None or marginal <= 0:
            return None
        return project_count(
            total_bytes=self.total_bytes,
            baseline_bytes=self.baseline_bytes + shared,
            per_model_bytes=marginal,
            threshold=self.threshold,
        )

    def footprint_line(self) -> str | None:
        """``copy: 180 MiB, torch runtime once: 420 MiB -> 9 copies`` (None without parts)."""
        marginal, shared = self.marginal_mean_bytes, self.shared_runtime_bytes
        if marginal is None or shared is None:
            return None
        return (
            f"copy: {marginal / MiB:,.0f} MiB, {self.runtime} runtime once: "
            f"{shared / MiB:,.0f} MiB -> {self.implied_count} copies under "
            f"{self.limit_bytes / MiB:,.0f} MiB"
        )

    @property
    def projection_parts(self) -> tuple[float, int] | None:
        """``(per model, baseline)`` bytes every projection of this result uses: a copy's
        own part, with the shared runtime paid once beside the baseline, where the parts
        were read; else the mean growth per copy and the baseline. None before any copy."""
        marginal, shared = self.marginal_mean_bytes, self.shared_runtime_bytes
        if marginal is not None and shared is not None and marginal > 0:
            return marginal, self.baseline_bytes + shared
        mean = self.per_model_mean_bytes
        if not mean or mean <= 0:
            return None
        return mean, self.baseline_bytes

    @property
    def projected_count(self) -> int | None:
        """The projection formula applied to the measured card itself (should be ``count``),
        with the same parts as the projection onto other cards (:attr:`projection_parts`)."""
        parts = self.projection_parts
        if parts is None:
            return None
        per_model, baseline = parts
        return project_count(
            total_bytes=self.total_bytes,
            baseline_bytes=baseline,
            per_model_bytes=per_model,
            threshold=self.threshold,
        )

    def summary_lines(self) -> list[str]:
        """Plain-text summary for the CLI and the report."""
        mean, spread = self.per_model_mean_bytes, self.per_model_stdev_bytes
        if self.on_host_memory:
            lines = [f"measured: {self.measured_where} (CPU figures, not GPU figures)"]
        else:
            lines = [] if not self.instance_type else [f"measured on {self.instance_type}"]
        lines += [
            f"{self.count} copies fit under {self.threshold:.0%} of {self.total_bytes / MiB:,.0f}"
            f" MiB ({self.probe}); stopped: {self.stopped_reason}",
            f"baseline (server, no model): {self.baseline_bytes / MiB:,.1f} MiB",
        ]
        if mean is not None:
            lines.append(
                f"per model: {mean / MiB:,.1f} MiB mean"
                + (f", ±{spread / MiB:,.1f} MiB (stdev)" if spread is not None else "")
                + f", min {min(self.deltas_bytes) / MiB:,.1f}"
                + f", max {max(self.deltas_bytes) / MiB:,.1f}"
            )
            lines.append(
                f"projection onto this {'memory budget' if self.on_host_memory else 'card'} "
                f"gives {self.projected_count} copies"
            )
        parts = self.footprint_line()
        if parts is not None:
            lines.append(parts)
        if self.next_copy is not None:
            lines.append(
                f"copy {self.next_copy.copies} crossed the threshold: "
                f"{self.next_copy.used_bytes / MiB:,.1f} MiB > {self.limit_bytes / MiB:,.1f} MiB"
            )
        if self.loads:
            load_times = [load.load_s for load in self.loads]
            lines.append(f"load time per copy: mean {statistics.fmean(load_times):.2f} s")
        if self.unsettled_copies:
            named = ", ".join(
                "the empty server" if k == 0 else f"copy {k}" for k in self.unsettled_copies
            )
            lines.append(
                f"memory had not settled when read after {named}: the last reading was "
                "taken and may be short (something was still allocating); measure again"
            )
        if self.on_host_memory:
            lines.append(
                "no GPU projection: host memory on CPU (each copy also carries its own Python "
                "stub) says nothing about a GPU. For GPU numbers: `mmelocal capacity estimate`, "
                "`mmelocal capacity` on a GPU machine or on a deployed GPU endpoint, or a GPU "
                "figure given to `mmelocal capacity project`"
            )
        return lines

    @property
    def measured_where(self) -> str:
        """Where the figures were really taken: ``local AWS, CPU host memory, as
        ml.g4dn.xlarge`` for a host-memory probe behind a GPU instance type (no GPU
        instance reads host memory), ``CPU host memory, on ml.m5.xlarge``, ``this machine,
        CPU host memory``; ``ml.g5.xlarge, GPU memory`` for a GPU probe."""
        if not self.on_host_memory:
            return f"{self.instance_type or 'this machine'}, GPU memory"
        if not self.instance_type:
            return "this machine, CPU host memory"
        if is_gpu_instance_type(self.instance_type):
            return f"local AWS, CPU host memory, as {self.instance_type}"
        return f"CPU host memory, on {self.instance_type}"

    @property
    def on_host_memory(self) -> bool:
        """True when the readings are host memory (no GPU), not GPU device memory."""
        return self.probe.startswith("host")

    def load_rows(self) -> list[dict[str, Any]]:
        """One row per reading (baseline, each copy, the crossing copy) for CSV/tables."""
        rows: list[dict[str, Any]] = [
            {
                "copies": 0,
                "target": "(baseline)",
                "used_mib": self.baseline_bytes / MiB,
                "delta_mib": None,
                "marginal_mib": None,
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
                    "used_mib": record.used_bytes / MiB,
                    "delta_mib": record.delta_bytes / MiB,
                    "marginal_mib": None
                    if record.marginal_bytes is None
                    else record.marginal_bytes / MiB,
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
            "precision": self.precision,
            "probe": self.probe,
            "started_at": self.started_at,
            "instance_type": self.instance_type,
            "measured_where": self.measured_where,
            "total_bytes": self.total_bytes,
            "threshold": self.threshold,
            "limit_bytes": self.limit_bytes,
            "baseline_bytes": self.baseline_bytes,
            "count": self.count,
            "per_model_mean_bytes": self.per_model_mean_bytes,
            "per_model_stdev_bytes": self.per_model_stdev_bytes,
            "projected_count": self.projected_count,
            "marginal_mean_bytes": self.marginal_mean_bytes,
            "shared_runtime_bytes": self.shared_runtime_bytes,
            "runtime": self.runtime,
            "implied_count": self.implied_count,
            "stopped_reason": self.stopped_reason,
            "unsettled_copies": list(self.unsettled_copies),
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
            precision=str(data.get("precision", "")),
            probe=str(data["probe"]),
            started_at=str(data.get("started_at", "")),
            instance_type=str(data.get("instance_type", "")),
            total_bytes=int(data["total_bytes"]),
            threshold=float(data["threshold"]),
            baseline_bytes=int(data["baseline_bytes"]),
            loads=tuple(LoadRecord(**load) for load in data["loads"]),
            next_copy=LoadRecord(**data["next_copy"]) if data.get("next_copy") else None,
            stopped_reason=str(data["stopped_reason"]),
            unsettled_copies=tuple(int(k) for k in data.get("unsettled_copies") or ()),
            projection=Projection.from_dict(data["projection"]) if data.get("projection") else None,
        )


def host_memory_refusal(source: object, instead: str) -> str:
    """Why a host-memory (CPU) capacity result from ``source`` cannot size a GPU instance,
    and what to do instead (``instead``: the option that gives the figure directly)."""
    return (
        f"{source} is a host-memory (CPU) capacity result: a CPU figure never projects onto a "
        "GPU card. Measure on a GPU (`mmelocal capacity` on a GPU machine or a deployed GPU "
        f"endpoint), use `mmelocal capacity estimate --json FILE`, or pass {instead}"
    )


__all__ = ["CapacityResult", "LoadRecord", "host_memory_refusal"]
