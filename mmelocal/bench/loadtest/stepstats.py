"""Per-step load-test numbers: users, requests/s, latency percentiles, successes, failures.

Kept apart from :mod:`mmelocal.bench.loadtest.runner` so the Locust worker process can use it
without importing anything else of mmelocal.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mmelocal.stats import percentiles

if TYPE_CHECKING:
    from mmelocal.bench.loadtest.shape import LoadShape


#: the shortest hold a step's rate is taken over; a shorter one (a ramp that filled almost
#: all of its stage) gives way to the whole stage
MIN_HOLD_S = 1.0


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """What one stage of a load test measured.

    ``requests == successes + failures`` count every request sent during the stage (one
    answered in the next stage counts here: :class:`StageClock`).
    ``throughput_rps`` and the latencies (failed requests too, as Locust counts them) are
    those of the stage's hold, once its users were reached: the ramp from the previous
    stage's users runs at other loads (the published summary keeps only the seconds at a
    step's user count). ``duration_s`` is the span the rate is taken over: the hold, or the
    whole stage when its hold lasted under :data:`MIN_HOLD_S`.
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


class StageClock:
    """Which stage, and whether its hold, was in effect at a time: a request belongs to the
    stage it was **sent** in (its completion time less its latency).

    A request in flight across a boundary measured the load of the stage that sent it (the
    users then running); filed where it completed, a short stage lost its slow requests to
    the next one and the next one's percentiles took latencies of a lighter load.
    ``mark(at, stage, hold)`` records a change (times on one clock, any order; marking a
    stage's start drops the later marks of earlier stages: a hold planned past the next
    stage's start never began); :meth:`at` answers for a send time (the first mark's state
    before it).
    """

    def __init__(self) -> None:
        self._times: list[float] = []
        self._states: list[tuple[int, bool]] = []

    def mark(self, at: float, stage: int, hold: bool) -> None:
        """From ``at`` on, ``stage`` is in effect (its hold when ``hold``)."""
        index = bisect.bisect_right(self._times, at)
        keep = [
            (t, st)
            for t, st in zip(self._times[index:], self._states[index:], strict=True)
            if st[0] > stage
        ]
        self._times[index:] = [at, *(t for t, _ in keep)]
        self._states[index:] = [(stage, hold), *(st for _, st in keep)]

    def at(self, sent: float) -> tuple[int, bool]:
        """(stage, in its hold) at time ``sent``; (0, False) before any mark."""
        index = bisect.bisect_right(self._times, sent) - 1
        if index < 0:
            return self._states[0] if self._states else (0, False)
        return self._states[index]


def summarize_step(
    *,
    name: str,
    target_users: int,
    users: int,
    duration_s: float,
    latencies_ms: Sequence[float],
    failures: int,
    held_latencies_ms: Sequence[float] | None = None,
    held_s: float | None = None,
) -> dict[str, Any]:
    """The :class:`StepStats` fields (as a dict) for one stage's raw latencies: all of them
    (``latencies_ms``, over ``duration_s``) and those completed in its hold
    (``held_latencies_ms``, over ``held_s``; when the stage had one, its rate and latencies
    are the hold's)."""
    requests = len(latencies_ms)
    rated: Sequence[float] = latencies_ms
    if held_latencies_ms is not None and held_s is not None and held_s >= MIN_HOLD_S:
        rated, duration_s = held_latencies_ms, held_s
    if len(rated):
        values = np.asarray(rated, dtype=np.float64)
        p50, p95, p99 = percentiles(rated, (50, 95, 99))
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
        throughput_rps=len(rated) / duration_s if duration_s > 0 else 0.0,
        avg_latency_ms=avg,
        p50_latency_ms=p50,
        p95_latency_ms=p95,
        p99_latency_ms=p99,
        max_latency_ms=peak,
    ).to_dict()


def stage_steps(
    shape: LoadShape,
    *,
    started_at: list[float | None],
    end_s: float,
    users_seen: list[int],
    latencies_ms: list[Any],
    failures: list[int],
    hold_at: list[float | None] | None = None,
    held_ms: list[Any] | None = None,
) -> list[dict[str, Any]]:
    """One :func:`summarize_step` per stage that started (a stage ends where the next began);
    with ``hold_at`` and ``held_ms``, its rate and latencies are those of its hold, from
    ``hold_at`` to its end. ``latencies_ms`` and ``held_ms`` hold each stage's requests by
    the stage they were sent in (:class:`StageClock`)."""
    steps = []
    for index, stage in enumerate(shape.stages):
        started = started_at[index]
        if started is None:
            continue
        later = [t for t in started_at[index + 1 :] if t is not None]
        ended = later[0] if later else end_s
        steps.append(
            summarize_step(
                name=stage.name,
                target_users=stage.users,
                users=users_seen[index] or stage.users,
                duration_s=max(ended - started, 1e-6),
                latencies_ms=latencies_ms[index],
                failures=failures[index],
                **_held(index, ended, hold_at, held_ms),
            )
        )
    return steps


def _held(
    index: int, ended: float, hold_at: list[float | None] | None, held_ms: list[Any] | None
) -> dict[str, Any]:
    """The hold's arguments of :func:`summarize_step` for stage ``index`` (none without one)."""
    start = None if hold_at is None else hold_at[index]
    if start is None or held_ms is None:
        return {}
    return {"held_latencies_ms": held_ms[index], "held_s": ended - start}


def max_users_before_first_failure(steps: Sequence[StepStats]) -> int | None:
    """Users of the last step before the first step with a failure, or with no completed
    request (a stalled endpoint: nothing shows those users were served); all steps if none;
    None when the very first step already failed or stalled."""
    best: int | None = None
    for step in steps:
        if step.failures or not step.requests:
            return best
        best = step.users if best is None else max(best, step.users)
    return best


__all__ = [
    "MIN_HOLD_S",
    "StageClock",
    "StepStats",
    "max_users_before_first_failure",
    "stage_steps",
    "summarize_step",
]
