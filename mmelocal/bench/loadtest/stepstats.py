"""Per-step load-test numbers: users, requests/s, latency percentiles, successes, failures.

Kept apart from :mod:`mmelocal.bench.loadtest.runner` so the Locust worker process can use it
without importing anything else of mmelocal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mmelocal.stats import percentiles


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """What one stage of a load test measured.

    Latencies cover every request completed during the stage (failed ones too, as Locust
    counts them); ``requests == successes + failures``; ``throughput_rps`` is requests
    per second over the stage's measured duration.
    """

    name: str
    target_users: int
    users: int
    duration_s: float
    requests: int
    successes: int
    failures: int
    throughput_rps: float
    avg_latency_ms: float | None
    p50_latency_ms: float | None
    p95_latency_ms: float | None
    p99_latency_ms: float | None
    max_latency_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON/CSV."""
        return dict(vars(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepStats:
        """Inverse of :meth:`to_dict`."""
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


def summarize_step(
    *,
    name: str,
    target_users: int,
    users: int,
    duration_s: float,
    latencies_ms: Sequence[float],
    failures: int,
) -> dict[str, Any]:
    """The :class:`StepStats` fields (as a dict) for one stage's raw latencies."""
    requests = len(latencies_ms)
    if requests:
        values = np.asarray(latencies_ms, dtype=np.float64)
        p50, p95, p99 = percentiles(latencies_ms, (50, 95, 99))
        avg: float | None = float(values.mean())
        peak: float | None = float(values.max())
    else:
        avg = p50 = p95 = p99 = peak = None  # type: ignore[assignment]
    return StepStats(
        name=name,
        target_users=target_users,
        users=users,
        duration_s=round(duration_s, 3),
        requests=requests,
        successes=requests - failures,
        failures=failures,
        throughput_rps=requests / duration_s if duration_s > 0 else 0.0,
        avg_latency_ms=avg,
        p50_latency_ms=p50,
        p95_latency_ms=p95,
        p99_latency_ms=p99,
        max_latency_ms=peak,
    ).to_dict()


def max_users_before_first_failure(steps: Sequence[StepStats]) -> int | None:
    """Users of the last step before the first step with a failure (all steps if none fail);
    None when the very first step already failed."""
    best: int | None = None
    for step in steps:
        if step.failures:
            return best
        best = step.users if best is None else max(best, step.users)
    return best


__all__ = ["StepStats", "max_users_before_first_failure", "summarize_step"]
