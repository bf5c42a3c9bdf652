"""The simulated instances: what each holds (memory, disk, load queue, slots), the ready
choice among a model's holders, the fleet's resize and the autoscaler that decides it, and
the instance-hours billed."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mmelocal.rules.routing import FastLru
from mmelocal.traffic.simulate.config import Autoscaling

#: an instance's disk when none is given: every artifact stays
_UNLIMITED_BYTES = 1 << 62


def pick_holder(fleet: Sequence[Any], holders: Sequence[int], m: int, t: float) -> tuple[int, int]:
    """(where a request for ``m`` at ``t`` goes among the instances holding it, -1 if it is
    ready on none; the first holder still loading it or not up, -1 if none): the emulator's
    :func:`~mmelocal.rules.routing.choose_ready` (the up instance where it is ready with the
    fewest in flight, the first in fleet order on a tie) without building its views per
    request; the tests check the two equal on random inputs."""
    i = loading = -1
    best_busy = -1
    for j in holders:
        inst = fleet[j]
        if inst.ready_at[m] <= t and inst.up_at <= t:
            busy = inst.inflight.get(m, 0)
            if best_busy < 0 or busy < best_busy or (busy == best_busy and j < i):
                i, best_busy = j, busy
        elif loading < 0 or j < loading:
            loading = j
    return i, loading


class _Instance:
    __slots__ = (
        "deadline",
        "disk",
        "failing",
        "fetched",
        "inflight",
        "loaders",
        "lru",
        "making",
        "pending",
        "queue",
        "ready_at",
        "slots",
        "up_at",
    )

    def __init__(
        self,
        limit: int,
        concurrency: int,
        up_at: float,
        parallel_loads: int = 1,
        disk_bytes: int = _UNLIMITED_BYTES,
    ) -> None:
        self.lru: FastLru[int] = FastLru(limit)
        #: the artifacts on its disk, least recently used first
        self.disk: FastLru[int] = FastLru(disk_bytes)
        #: loads that will fail (past the load limit): when
        self.failing: dict[int, float] = {}
        #: when each queued or running load must have ended (the load limit from its start)
        self.deadline: dict[int, float] = {}
        #: when each queued load's artifact is on the disk (its download, begun when the
        #: load was asked for, ended): it may take the load slot from then
        self.fetched: dict[int, float] = {}
        #: when each model held here is (or will be) ready; inf while its load is queued
        self.ready_at: dict[int, float] = {}
        self.inflight: dict[int, int] = {}
        self.slots = [0.0] * concurrency
        self.up_at = up_at
        #: when each load slot is next free (1 slot: the emulator's load lock)
        self.loaders = [up_at] * parallel_loads
        #: loads waiting for a slot, in request order, and the requests waiting on each
        self.queue: deque[int] = deque()
        self.pending: dict[int, list[int]] = {}
        #: the load waiting, in its load slot, for room (a busy model to go idle): the
        #: model, when it gives up, and when the unloads it has done so far are over
        self.making: list[Any] | None = None


def _instance_hours(billed: Sequence[tuple[float, int]], end_s: float) -> float:
    total = 0.0
    for (t0, c), (t1, _) in zip(billed, [*billed[1:], (end_s, 0)], strict=True):
        total += max(0.0, min(t1, end_s) - t0) * c
    return total / 3600.0


def _resize(
    fleet: list[_Instance],
    holders: dict[int, list[int]],
    capacity: int,
    now: float,
    limit: int,
    concurrency: int,
    scaling: Autoscaling,
    parallel_loads: int,
    disk_bytes: int,
) -> None:
    """Grow the fleet (new instances serve after ``instance_start_s``) or shrink it (the
    newest instances go; their requests in flight finish)."""
    while len(fleet) < capacity:
        fleet.append(
            _Instance(
                limit, concurrency, now + scaling.instance_start_s, parallel_loads, disk_bytes
            )
        )
    while len(fleet) > capacity:
        gone = len(fleet) - 1
        inst = fleet.pop()
        for m in inst.lru.footprints:
            hs = holders[m]
            hs.remove(gone)
            if not hs:
                del holders[m]


class _Scaler:
    """Feeds the shared target-tracking rule one metric value per closed period."""

    def __init__(self, scaling: Autoscaling, capacity: int) -> None:
        from mmelocal.facts.autoscaling import HIGH_ALARM, LOW_ALARM, METRIC_PERIOD_S
        from mmelocal.facts.cloudwatch import EVALUATION_RANGE_EXTRA_PERIODS
        from mmelocal.rules.autoscaling import (
            ScalingLimits,
            ScalingState,
            TargetTrackingPolicy,
        )

        self.period_s = float(METRIC_PERIOD_S)
        self.next_eval_s = self.period_s
        self.count = 0
        #: the newest datapoints, as many as the alarms' evaluation range holds (the
        #: longer alarm's periods and CloudWatch's extra ones): older ones are never read
        self.window = (
            max(HIGH_ALARM.evaluation_periods, LOW_ALARM.evaluation_periods)
            + EVALUATION_RANGE_EXTRA_PERIODS
        )
        self.metric: list[float | None] = []
        self.limits = ScalingLimits(
            min_capacity=scaling.min_instances, max_capacity=scaling.max_instances
        )
        policy_args: dict[str, Any] = {"target_value": scaling.target_invocations_per_instance}
        if scaling.scale_out_cooldown_s is not None:
            policy_args["scale_out_cooldown_s"] = scaling.scale_out_cooldown_s
        if scaling.scale_in_cooldown_s is not None:
            policy_args["scale_in_cooldown_s"] = scaling.scale_in_cooldown_s
        self.policy = TargetTrackingPolicy(**policy_args)
        self.state = ScalingState(capacity=capacity)
        self.activities: list[dict[str, Any]] = []

    def evaluate(self, now_s: float, instances: int) -> list[tuple[float, int]]:
        """Close every period up to ``now_s``; each change as (the period's end, the new
        capacity), in time order."""
        from mmelocal.rules.autoscaling import target_tracking_step

        changed: list[tuple[float, int]] = []
        while now_s >= self.next_eval_s:
            self.metric.append(self.count / max(1, instances))
            del self.metric[: -self.window]
            self.count = 0
            self.state = replace(self.state, capacity=instances)
            self.state, decision = target_tracking_step(
                self.next_eval_s, self.state, self.metric, self.policy, self.limits
            )
            if decision.cause is not None and decision.capacity != instances:
                self.activities.append(
                    {
                        "time_s": self.next_eval_s,
                        "capacity": decision.capacity,
                        "cause": decision.cause,
                    }
                )
                instances = decision.capacity
                changed.append((self.next_eval_s, instances))
            self.next_eval_s += self.period_s
        return changed
