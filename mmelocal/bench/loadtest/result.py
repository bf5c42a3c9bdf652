"""Load-test results: per-step numbers, the ceiling before the first failure, progress samples.

Kept apart from :mod:`mmelocal.bench.loadtest` (which runs Locust) so reports and sweeps
read results without the runner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mmelocal.bench.loadtest.shape import LoadShape
from mmelocal.bench.loadtest.stepstats import StepStats, max_users_before_first_failure


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


@dataclass(frozen=True, kw_only=True)
class LoadTestResult:
    """A finished load test; JSON-able with ``kind = "loadtest"``."""

    kind: ClassVar[str] = "loadtest"
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
        """Highest user count reached before the first step with a failed request."""
        return max_users_before_first_failure(self.steps)

    @property
    def peak_throughput_rps(self) -> float:
        """Highest per-step request rate."""
        return max((step.throughput_rps for step in self.steps), default=0.0)

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
        )


def summary_lines(result: LoadTestResult) -> Sequence[str]:
    """A few plain-text lines that sum the test up (for logs and reports)."""
    ceiling = result.max_users_without_failure
    if result.requests == 0:
        ceiling_line = "no request completed: nothing was measured"
    elif result.failures == 0:
        ceiling_line = f"no failed request up to {ceiling} users (the highest tested)"
    elif ceiling is None:
        ceiling_line = "highest user count before the first failure: none (the first step failed)"
    else:
        ceiling_line = f"highest user count before the first failure: {ceiling}"
    return (
        f"{result.requests:,} requests, {result.failures:,} failed, "
        f"peak {result.peak_throughput_rps:,.1f} requests/s",
        ceiling_line,
        f"load generator CPU: {result.loadgen_cpu_percent:.0f}% of one core",
        *(
            f"error seen {count:,} times: {error}"
            for error, count in sorted(result.errors.items(), key=lambda kv: -kv[1])[:3]
        ),
    )


__all__ = ["LoadProgress", "LoadTestResult", "summary_lines"]
