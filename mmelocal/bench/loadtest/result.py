"""Load-test results: per-step numbers, the ceiling before the first failure, progress samples.

Kept apart from :mod:`mmelocal.bench.loadtest` (which runs Locust) so reports and sweeps
read results without the runner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmelocal.bench.loadtest.shape import LoadShape
from mmelocal.bench.loadtest.stepstats import StepStats, max_users_before_first_failure
from mmelocal.bench.loadtest.workers import SATURATED_CPU_PERCENT, workers_needed
from mmelocal.bench.results import BenchResult

#: what a result says about a worker that stopped reporting (Locust's heartbeat rule)
MOVED_USERS_NOTE = (
    "Locust's master marks a worker missing after about 3 s without a heartbeat and starts "
    "its users on the other workers then; requests it made since its last report (at most "
    "about 1 s) are lost"
)


@dataclass(frozen=True)
class LoadProgress:
    """One live progress sample from the running load test."""

    elapsed_s: float
    duration_s: float
    stage: int
    stage_name: str
    users: int
    requests: int
    failures: int
    rps: float
    workers: int = 1


@dataclass(frozen=True, kw_only=True)
class WorkerInfo:
    """One load-generator process: where it ran, what it sent, the CPU it used."""

    name: str
    host: str
    pid: int
    status: str  # ok | missing | no final report | never connected
    requests: int
    failures: int
    cpu_percent: float | None
    stage_cpu_percent: tuple[float | None, ...]
    missed_stages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            **vars(self),
            "stage_cpu_percent": list(self.stage_cpu_percent),
            "missed_stages": list(self.missed_stages),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerInfo:
        """Inverse of :meth:`to_dict`."""
        return cls(
            name=str(data["name"]),
            host=str(data.get("host", "")),
            pid=int(data.get("pid", 0)),
            status=str(data["status"]),
            requests=int(data["requests"]),
            failures=int(data["failures"]),
            cpu_percent=data.get("cpu_percent"),
            stage_cpu_percent=tuple(data.get("stage_cpu_percent", ())),
            missed_stages=tuple(data.get("missed_stages", ())),
        )


@dataclass(frozen=True)
class Saturation:
    """A stage in which a load generator ran out of CPU: its latency includes the time
    requests waited in the client."""

    stage: str
    cpu_percent: float
    workers_needed: int

    def message(self) -> str:
        """The warning the CLI prints and the report shows."""
        return (
            f"stage {self.stage!r}: a load-generator worker used {self.cpu_percent:.0f}% of a "
            f"core, so this stage's latency includes client queueing and its rate is the "
            f"client's limit; about {self.workers_needed} workers (--workers) would remove it"
        )


class LoadTestResult(BenchResult, kind="loadtest"):
    """A finished load test; JSON-able with ``kind = "loadtest"``."""

    endpoint: str
    mode: str
    target_count: int
    shape: LoadShape
    steps: tuple[StepStats, ...]
    wall_s: float
    loadgen_cpu_percent: float
    locust_total_requests: int
    locust_total_failures: int
    first_failure_users: int | None
    errors: Mapping[str, int] = field(default_factory=dict)
    started_at: str = ""
    label: str = ""
    workers: int = 1
    worker_details: tuple[WorkerInfo, ...] = ()

    @property
    def requests(self) -> int:
        """All requests counted in the steps."""
        return sum(step.requests for step in self.steps)

    @property
    def failures(self) -> int:
        """All failed requests counted in the steps."""
        return sum(step.failures for step in self.steps)

    @property
    def max_users_without_failure(self) -> int | None:
        """Highest user count reached before the first step with a failed request (or with
        no completed request)."""
        return max_users_before_first_failure(self.steps)

    @property
    def peak_throughput_rps(self) -> float:
        """Highest per-step request rate."""
        return max((step.throughput_rps for step in self.steps), default=0.0)

    @property
    def saturated(self) -> tuple[Saturation, ...]:
        """The stages in which some worker spent >= SATURATED_CPU_PERCENT of a core."""
        found = []
        for index, stage in enumerate(self.shape.stages):
            cpus = [
                w.stage_cpu_percent[index]
                for w in self.worker_details
                if index < len(w.stage_cpu_percent) and w.stage_cpu_percent[index] is not None
            ]
            busiest = max((c for c in cpus if c is not None), default=0.0)
            if busiest >= SATURATED_CPU_PERCENT:
                total = sum(c for c in cpus if c is not None)
                found.append(Saturation(stage.name, busiest, workers_needed(total, len(cpus))))
        return tuple(found)

    @property
    def lost_workers(self) -> tuple[WorkerInfo, ...]:
        """Workers that died, stopped reporting or never connected."""
        return tuple(w for w in self.worker_details if w.status != "ok")

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (``kind`` tells ``mmelocal report`` what this is)."""
        return {
            "kind": self.kind,
            "label": self.label,
            "endpoint": self.endpoint,
            "mode": self.mode,
            "target_count": self.target_count,
            "started_at": self.started_at,
            "shape": self.shape.to_dict(),
            "steps": [step.to_dict() for step in self.steps],
            "wall_s": self.wall_s,
            "loadgen_cpu_percent": self.loadgen_cpu_percent,
            "requests": self.requests,
            "failures": self.failures,
            "locust_total_requests": self.locust_total_requests,
            "locust_total_failures": self.locust_total_failures,
            "first_failure_users": self.first_failure_users,
            "max_users_without_failure": self.max_users_without_failure,
            "peak_throughput_rps": self.peak_throughput_rps,
            "errors": dict(self.errors),
            "workers": self.workers,
            "worker_details": [w.to_dict() for w in self.worker_details],
            "saturated_stages": [vars(s) for s in self.saturated],
            "lost_workers_note": MOVED_USERS_NOTE if self.lost_workers else "",
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadTestResult:
        """Inverse of :meth:`to_dict` (derived fields are recomputed)."""
        return cls(
            label=str(data.get("label", "")),
            endpoint=str(data["endpoint"]),
            mode=str(data["mode"]),
            target_count=int(data["target_count"]),
            started_at=str(data.get("started_at", "")),
            shape=LoadShape.from_dict(data["shape"]),
            steps=tuple(StepStats.from_dict(step) for step in data["steps"]),
            wall_s=float(data["wall_s"]),
            loadgen_cpu_percent=float(data["loadgen_cpu_percent"]),
            locust_total_requests=int(data["locust_total_requests"]),
            locust_total_failures=int(data["locust_total_failures"]),
            first_failure_users=data.get("first_failure_users"),
            errors=dict(data.get("errors", {})),
            workers=int(data.get("workers", 1)),
            worker_details=tuple(WorkerInfo.from_dict(w) for w in data.get("worker_details", ())),
        )


def summary_lines(result: LoadTestResult) -> Sequence[str]:
    """A few plain-text lines that sum the test up (for logs and reports)."""
    ceiling = result.max_users_without_failure
    if result.requests == 0:
        ceiling_line = "no request completed: nothing was measured"
    elif result.failures == 0 and ceiling == max(step.users for step in result.steps):
        ceiling_line = f"no failed request up to {ceiling} users (the highest tested)"
    elif result.failures == 0:
        ceiling_line = (
            f"no failed request, but a step completed no request: highest user count with "
            f"every step answered: {ceiling if ceiling is not None else 'none'}"
        )
    elif ceiling is None:
        ceiling_line = "highest user count before the first failure: none (the first step failed)"
    else:
        ceiling_line = f"highest user count before the first failure: {ceiling}"
    return (
        f"{result.requests:,} requests, {result.failures:,} failed, "
        f"peak {result.peak_throughput_rps:,.1f} requests/s",
        ceiling_line,
        (
            f"load generator CPU: {result.loadgen_cpu_percent:.0f}% of one core"
            if result.workers == 1
            else f"load generator: {result.workers} Locust workers, the busiest at "
            f"{result.loadgen_cpu_percent:.0f}% of one core"
        ),
        *(worker_lost_line(w) for w in result.lost_workers),
        *((MOVED_USERS_NOTE,) if any(w.status == "missing" for w in result.lost_workers) else ()),
        *(s.message() for s in result.saturated),
        *(
            f"error seen {count:,} times: {error}"
            for error, count in sorted(result.errors.items(), key=lambda kv: -kv[1])[:3]
        ),
    )


def worker_lost_line(worker: WorkerInfo) -> str:
    """One line for a worker that is not ``ok``: what happened and the stages it missed."""
    where = f" ({worker.host}, pid {worker.pid})" if worker.host else ""
    missed = ", ".join(worker.missed_stages) or "none"
    return (
        f"{worker.name}{where} {worker.status}: it missed (all or part of) stages {missed}; "
        f"{worker.requests:,} of its requests were counted"
    )


__all__ = [
    "MOVED_USERS_NOTE",
    "LoadProgress",
    "LoadTestResult",
    "Saturation",
    "WorkerInfo",
    "summary_lines",
    "worker_lost_line",
]
