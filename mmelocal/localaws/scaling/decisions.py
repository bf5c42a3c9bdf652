"""What one period's policies of a scalable target propose, and which proposal is acted
on: the largest capacity, scale-out or scale-in ("Application Auto Scaling gives
precedence to the policy that provides the largest capacity for both scale out and scale
in", PutScalingPolicy API reference), a target tracking scale-in only when every target
tracking policy is ready for one, nothing the target's ``SuspendedState`` holds back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from mmelocal.rules.autoscaling import ScalingLimits

#: an alarm in ALARM that invokes a policy, and the datapoints a user's reason data gave
#: (None: those the alarm evaluates, or the published metric)
Fired = tuple[dict[str, Any], list[float] | None]


class Period(NamedTuple):
    """What the policies of one scalable target are evaluated with, one period."""

    region: str
    fleet: Any
    limits: ScalingLimits
    now_s: float
    scale: float
    suspended: dict[str, Any]


class Proposal(NamedTuple):
    """What one policy would do this period: the capacity, its cause, and what to record
    (the policy's cooldown) once the resize it asked for started."""

    capacity: int
    cause: str
    started: Callable[[], None]


def held_back_scale_ins(
    policies: list[dict[str, Any]], proposals: dict[str, Proposal | None], current: int
) -> set[str]:
    """The target tracking policies (names) whose scale-in waits: the service "will scale in
    only if all of the target tracking policies (with the scale-in portion enabled) are ready
    to scale in" (Application Auto Scaling User Guide, "How target tracking scaling for
    Application Auto Scaling works", Multiple scaling policies). A step scaling policy's
    scale-in is not held back (PutScalingPolicy API reference: it "will not be blocked")."""
    tracking = [p for p in policies if p.get("PolicyType") == "TargetTrackingScaling"]
    scaling_in = {
        p["PolicyName"]
        for p in tracking
        if (proposal := proposals.get(p["PolicyName"])) is not None and proposal.capacity < current
    }
    ready = all(
        p["PolicyName"] in scaling_in
        for p in tracking
        if not (p.get("TargetTrackingScalingPolicyConfiguration") or {}).get("DisableScaleIn")
    )
    return set() if ready else scaling_in


def suspended_move(suspended: dict[str, Any], current: int, capacity: int) -> bool:
    """True when the target's SuspendedState holds back the move from ``current`` to
    ``capacity`` (scale-out or scale-in activities suspended)."""
    growing = capacity > current
    return bool(
        suspended.get("DynamicScalingOutSuspended" if growing else "DynamicScalingInSuspended")
    )


def chosen_proposal(
    policies: list[dict[str, Any]],
    wanted: dict[str, Proposal | None],
    current: int,
    suspended: dict[str, Any],
) -> Proposal | None:
    """The proposal acted on of ``wanted`` (by policy name, or another key for step scaling
    alarms), None when none may act (see the module docstring)."""
    held_back = held_back_scale_ins(policies, wanted, current)
    proposals: Sequence[Proposal] = [
        proposal
        for name, proposal in wanted.items()
        if proposal is not None
        and name not in held_back
        and not suspended_move(suspended, current, proposal.capacity)
    ]
    return max(proposals, key=lambda p: p.capacity) if proposals else None


__all__ = [
    "Fired",
    "Period",
    "Proposal",
    "chosen_proposal",
    "held_back_scale_ins",
    "suspended_move",
]
