"""What the autoscaler remembers of each policy between periods: the last moves of every
target tracking and step scaling policy (their cooldowns), and the alarms each target
tracking policy created. moto keeps the policies; this keeps what the service keeps
beside them."""

from __future__ import annotations

import threading
from dataclasses import replace

from mmelocal.localaws.scaling.records import parse_resource
from mmelocal.rules.autoscaling import ScalingState

#: (region, resource id, policy name or ARN)
PolicyKey = tuple[str, str, str]


class PolicyBook:
    """The policies' memory (see the module docstring); safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (region, resource id, target tracking policy name) -> its last moves
        self._tracking: dict[PolicyKey, ScalingState] = {}
        #: (region, resource id, step scaling policy ARN) -> its last scale-out and
        #: scale-in (cooldowns)
        self._step: dict[PolicyKey, ScalingState] = {}
        #: (region, policy ARN) -> the names of the alarms its target tracking created
        self.alarms: dict[tuple[str, str], list[str]] = {}

    def tracking_state(self, key: PolicyKey, capacity: int) -> ScalingState:
        """A target tracking policy's last moves, at ``capacity`` now."""
        with self._lock:
            previous = self._tracking.get(key, ScalingState(capacity))
        return replace(previous, capacity=capacity)

    def step_state(self, key: PolicyKey, capacity: int) -> ScalingState:
        """A step scaling policy's last moves, at ``capacity`` now."""
        with self._lock:
            previous = self._step.get(key, ScalingState(capacity))
        return replace(previous, capacity=capacity)

    def record_tracking(self, key: PolicyKey, state: ScalingState) -> None:
        """A target tracking policy's resize started: its state after it."""
        with self._lock:
            self._tracking[key] = state

    def record_step(self, key: PolicyKey, state: ScalingState) -> None:
        """A step scaling policy's resize started: its state after it."""
        with self._lock:
            self._step[key] = state

    def alarm_names(self, region: str, policy_arn: str) -> list[str]:
        """The alarms a target tracking policy created (none known: empty)."""
        with self._lock:
            return list(self.alarms.get((region, policy_arn), []))

    def set_alarm_names(self, region: str, policy_arn: str, names: list[str]) -> None:
        """Remember the alarms a target tracking policy created."""
        with self._lock:
            self.alarms[(region, policy_arn)] = names

    def pop_alarm_names(self, region: str, policy_arn: str) -> list[str]:
        """Forget a policy's alarms (to delete them); the names it had."""
        with self._lock:
            return self.alarms.pop((region, policy_arn), [])

    def stop_scale_in_cooldowns(self, region: str, resource: str) -> None:
        """A scale-out stops the scale-in cooldown of every policy of the target ("if
        another alarm triggers a scale-out activity during the cooldown period after a
        scale-in [...] the cooldown period for the scale-in activity stops and doesn't
        complete": the Application Auto Scaling User Guide)."""
        with self._lock:
            for states in (self._tracking, self._step):
                for key, state in states.items():
                    if key[:2] == (region, resource) and state.last_scale_in_s is not None:
                        states[key] = replace(state, last_scale_in_s=None)

    def forget_endpoint(self, region: str, endpoint: str) -> None:
        """Forget the moves of a deleted endpoint's policies."""
        with self._lock:
            for states in (self._tracking, self._step):
                for key in [
                    k
                    for k in states
                    if k[0] == region and (parse_resource(k[1]) or ("",))[0] == endpoint
                ]:
                    del states[key]


__all__ = ["PolicyBook", "PolicyKey"]
