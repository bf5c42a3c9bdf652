"""Target tracking and alarm evaluation as pure code, shared by the local AWS and the traffic
simulator. No I/O and no clock: times in seconds and datapoints are arguments.

The numbers (alarm datapoints, the low alarm's threshold, cooldown defaults) live in
:mod:`mmelocal.facts.autoscaling` with the documentation they come from. With a fast clock
the caller passes periods of ``METRIC_PERIOD_S / N`` seconds and times in the same scale;
the rules do not care.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mmelocal.errors import UserInputError
from mmelocal.facts.autoscaling import (
    ALARM_CAUSE_FORMAT,
    DEFAULT_METRIC_AGGREGATION_TYPE,
    DEFAULT_SCALE_IN_COOLDOWN_S,
    DEFAULT_SCALE_OUT_COOLDOWN_S,
    HIGH_ALARM,
    LOW_ALARM,
    METRIC_AGGREGATION_TYPES,
    TrackingAlarm,
)
from mmelocal.facts.cloudwatch import (
    ALARM_STATES,
    COMPARISON_OPERATORS,
    EVALUATION_RANGE_EXTRA_PERIODS,
    TREAT_MISSING_DATA,
)


@dataclass(frozen=True)
class ScalingLimits:
    """A scalable target's MinCapacity and MaxCapacity."""

    min_capacity: int
    max_capacity: int

    def __post_init__(self) -> None:
        if self.min_capacity < 0:
            raise UserInputError(f"min_capacity must be >= 0, got {self.min_capacity}")
        if self.max_capacity < self.min_capacity:
            raise UserInputError(
                f"max_capacity ({self.max_capacity}) must be >= min_capacity ({self.min_capacity})"
            )

    def clamp(self, capacity: int) -> int:
        """``capacity`` within [min_capacity, max_capacity]."""
        return max(self.min_capacity, min(self.max_capacity, capacity))


@dataclass(frozen=True)
class TargetTrackingPolicy:
    """A target tracking policy's target value, cooldowns and scale-in switch."""

    target_value: float
    scale_out_cooldown_s: float = DEFAULT_SCALE_OUT_COOLDOWN_S
    scale_in_cooldown_s: float = DEFAULT_SCALE_IN_COOLDOWN_S
    disable_scale_in: bool = False

    def __post_init__(self) -> None:
        if not self.target_value > 0:
            raise UserInputError(f"target_value must be > 0, got {self.target_value}")
        if self.scale_out_cooldown_s < 0 or self.scale_in_cooldown_s < 0:
            raise UserInputError("cooldowns must be >= 0 seconds")

    @property
    def low_threshold(self) -> float:
        """The scale-in alarm's threshold."""
        return self.target_value * LOW_ALARM.threshold_factor


@dataclass(frozen=True)
class ScalingState:
    """The capacity now and when it last changed (seconds, the caller's clock);
    ``scale_out_from``: the capacity before the scale-out that started the scale-out
    cooldown (the base a scale-out in that cooldown is computed from)."""

    capacity: int
    last_scale_out_s: float | None = None
    last_scale_in_s: float | None = None
    scale_out_from: int | None = None


@dataclass(frozen=True)
class ScalingDecision:
    """The desired capacity after an evaluation; ``cause`` is None when nothing changes."""

    capacity: int
    cause: str | None


def _breaches(value: float, threshold: float, comparison: str) -> bool:
    if comparison == "GreaterThanThreshold":
        return value > threshold
    if comparison == "GreaterThanOrEqualToThreshold":
        return value >= threshold
    if comparison == "LessThanThreshold":
        return value < threshold
    return value <= threshold


def alarm_state(
    datapoints: Sequence[float | None],
    *,
    threshold: float,
    comparison: str,
    evaluation_periods: int,
    datapoints_to_alarm: int,
    treat_missing_data: str = "missing",
    current_state: str = "INSUFFICIENT_DATA",
    sample_counts: Sequence[float | None] | None = None,
    min_sample_count: float | None = None,
) -> str:
    """An "M out of N" alarm's state over its evaluation range, as CloudWatch evaluates it
    (CloudWatch User Guide, "How alarm state is evaluated when data is missing").

    ``datapoints``: one per period, newest last (None or NaN: no data in that period); the
    newest ``evaluation_periods`` + :data:`~mmelocal.facts.cloudwatch.
    EVALUATION_RANGE_EXTRA_PERIODS` are the evaluation range (periods not given count as
    missing). When the range holds at least ``evaluation_periods`` datapoints, the newest
    that many are evaluated and ``treat_missing_data`` is not used; otherwise the missing
    ones are filled in as few times as possible (breaching for ``breaching``, within the
    threshold for ``notBreaching``, neither for ``missing`` and ``ignore``). ALARM when at
    least ``datapoints_to_alarm`` breach, else OK; except, for ``missing`` and ``ignore``,
    when every datapoint present breaches but too few do: ``ignore`` keeps
    ``current_state``, ``missing`` is INSUFFICIENT_DATA unless the oldest datapoint of the
    range is one of them (ALARM, as the guide's tables show). A range with no datapoint is
    INSUFFICIENT_DATA (``missing``), ``current_state`` (``ignore``), ALARM (``breaching``)
    or OK (``notBreaching``).

    ``sample_counts`` (one per period, as ``datapoints``) and ``min_sample_count``: a
    percentile alarm whose ``EvaluateLowSampleCountPercentile`` is ``ignore`` (the count
    from :func:`~mmelocal.facts.cloudwatch.low_sample_count`): when a datapoint it would
    evaluate comes from fewer samples, its state does not change (``current_state``).
    """
    if comparison not in COMPARISON_OPERATORS:
        raise UserInputError(
            f"comparison must be one of {COMPARISON_OPERATORS}, got {comparison!r}"
        )
    if treat_missing_data not in TREAT_MISSING_DATA:
        raise UserInputError(
            f"treat_missing_data must be one of {TREAT_MISSING_DATA}, got {treat_missing_data!r}"
        )
    if current_state not in ALARM_STATES:
        raise UserInputError(f"current_state must be one of {ALARM_STATES}, got {current_state!r}")
    if not 1 <= datapoints_to_alarm <= evaluation_periods:
        raise UserInputError(
            f"datapoints_to_alarm must be in 1..evaluation_periods ({evaluation_periods}), "
            f"got {datapoints_to_alarm}"
        )
    size = evaluation_periods + EVALUATION_RANGE_EXTRA_PERIODS
    given: list[float | None] = [
        None if v is None or math.isnan(v) else v for v in datapoints[-size:]
    ]
    window: list[float | None] = [None] * (size - len(given))
    window += given
    present = [v for v in window if v is not None]
    if sample_counts is not None and min_sample_count is not None:
        tail = list(sample_counts[-size:])
        counts = [None] * (size - len(tail)) + tail  # aligned with ``window`` at its end
        used = [c for v, c in zip(window, counts, strict=True) if v is not None]
        if any((c or 0.0) < min_sample_count for c in used[-evaluation_periods:]):
            return current_state
    if not present:
        return {
            "missing": "INSUFFICIENT_DATA",
            "ignore": current_state,
            "breaching": "ALARM",
            "notBreaching": "OK",
        }[treat_missing_data]
    if len(present) >= evaluation_periods:
        newest = present[-evaluation_periods:]
        breaching = sum(_breaches(v, threshold, comparison) for v in newest)
        return "ALARM" if breaching >= datapoints_to_alarm else "OK"
    fills = evaluation_periods - len(present)
    breaching = sum(_breaches(v, threshold, comparison) for v in present)
    if treat_missing_data == "breaching":
        breaching += fills
    if breaching >= datapoints_to_alarm:
        return "ALARM"
    if treat_missing_data in ("breaching", "notBreaching") or breaching < len(present):
        return "OK"
    if treat_missing_data == "ignore":
        return current_state
    return "ALARM" if window[0] is not None else "INSUFFICIENT_DATA"


def evaluated_datapoints(
    datapoints: Sequence[float | None], evaluation_periods: int
) -> list[float]:
    """The datapoints an alarm evaluates, oldest first: the newest ``evaluation_periods``
    present in its evaluation range (``evaluation_periods`` +
    :data:`~mmelocal.facts.cloudwatch.EVALUATION_RANGE_EXTRA_PERIODS` periods, newest
    last in ``datapoints``), all of them when fewer are (as :func:`alarm_state` reads them)."""
    size = evaluation_periods + EVALUATION_RANGE_EXTRA_PERIODS
    present = [v for v in datapoints[-size:] if v is not None and not math.isnan(v)]
    return present[-evaluation_periods:]


def aggregated_metric(values: Sequence[float], aggregation_type: str | None = None) -> float | None:
    """``values`` (an alarm's datapoints) as a step scaling policy aggregates them
    (``MetricAggregationType``: Average when None); None when there are none."""
    kind = aggregation_type or DEFAULT_METRIC_AGGREGATION_TYPE
    if kind not in METRIC_AGGREGATION_TYPES:
        raise UserInputError(
            f"MetricAggregationType must be one of {METRIC_AGGREGATION_TYPES}, got {kind!r}"
        )
    if not values:
        return None
    if kind == "Minimum":
        return min(values)
    if kind == "Maximum":
        return max(values)
    return sum(values) / len(values)


def _in_cooldown(now_s: float, since_s: float | None, cooldown_s: float) -> bool:
    return since_s is not None and now_s - since_s < cooldown_s


def _latest(values: Sequence[float | None]) -> float | None:
    for value in reversed(values):
        if value is not None and not math.isnan(value):
            return value
    return None


def _tracking_alarm_state(
    datapoints: Sequence[float | None], alarm: TrackingAlarm, target_value: float
) -> str:
    """The state of target tracking's ``alarm`` for a policy's ``target_value``."""
    return alarm_state(
        datapoints,
        threshold=target_value * alarm.threshold_factor,
        comparison=alarm.comparison,
        evaluation_periods=alarm.evaluation_periods,
        datapoints_to_alarm=alarm.datapoints_to_alarm,
    )


def _clamped(
    now_s: float, state: ScalingState, limits: ScalingLimits
) -> tuple[ScalingState, ScalingDecision] | None:
    """A capacity outside the limits brought inside them (None when it is inside)."""
    capacity = state.capacity
    clamped = limits.clamp(capacity)
    if clamped == capacity:
        return None
    if clamped > capacity:
        cause = f"minimum capacity was set to {limits.min_capacity}"
        return replace(state, capacity=clamped, last_scale_out_s=now_s), ScalingDecision(
            clamped, cause
        )
    cause = f"maximum capacity was set to {limits.max_capacity}"
    return replace(state, capacity=clamped, last_scale_in_s=now_s), ScalingDecision(clamped, cause)


def _tracking_move(
    now_s: float,
    state: ScalingState,
    latest: float,
    policy: TargetTrackingPolicy,
    limits: ScalingLimits,
    cause: str,
    *,
    scale_out: bool,
) -> tuple[ScalingState, ScalingDecision]:
    """Target tracking's move to ``ceil(capacity * latest / target)`` within the limits.
    A scale-out (``scale_out``) in the scale-out cooldown is computed from the capacity
    before the initiating scale-out: only a larger one goes. A scale-in goes once the
    scale-in cooldown after the previous scale-in is over; none with scale-in disabled."""
    capacity = state.capacity
    base = capacity
    if scale_out and _in_cooldown(now_s, state.last_scale_out_s, policy.scale_out_cooldown_s):
        # the capacity the initiating scale-out added is part of this one: computed from
        # the capacity before it, only a larger scale-out goes ahead
        base = state.scale_out_from if state.scale_out_from is not None else capacity
    desired = limits.clamp(math.ceil(max(base, 1) * latest / policy.target_value))
    if scale_out:
        if desired <= capacity:
            return state, ScalingDecision(capacity, None)
        # a scale-out stops the scale-in cooldown (ScaleInCooldown, API reference)
        new = replace(
            state,
            capacity=desired,
            last_scale_out_s=now_s,
            scale_out_from=base,
            last_scale_in_s=None,
        )
        return new, ScalingDecision(desired, cause)
    if (
        policy.disable_scale_in
        or desired >= capacity
        or _in_cooldown(now_s, state.last_scale_in_s, policy.scale_in_cooldown_s)
    ):
        return state, ScalingDecision(capacity, None)
    return replace(state, capacity=desired, last_scale_in_s=now_s), ScalingDecision(desired, cause)


def target_tracking_step(
    now_s: float,
    state: ScalingState,
    metric_per_period: Sequence[float | None],
    policy: TargetTrackingPolicy,
    limits: ScalingLimits,
    *,
    policy_name: str = "TargetTrackingPolicy",
    high_alarm_name: str = "AlarmHigh",
    low_alarm_name: str = "AlarmLow",
) -> tuple[ScalingState, ScalingDecision]:
    """One evaluation of a target tracking policy.

    ``metric_per_period``: one value per period, newest last, in the policy's unit (e.g.
    invocations per instance in that period). The high alarm (metric over the target for
    3 of 3 periods) scales out, the low alarm (under 90 % of the target for 15 of 15) scales
    in, each to ``ceil(capacity * metric / target)`` from the newest datapoint, within the
    limits. During the scale-out cooldown the capacity the initiating scale-out added counts
    as part of the next one (the service's words): the desired count is computed from the
    capacity before that scale-out, and only a larger scale-out than it made happens; a
    scale-in waits out the scale-in cooldown after the previous scale-in (a scale-out is
    not held back by a scale-in's cooldown, as the service does). A capacity outside the
    limits is brought inside them first.
    """
    clamped = _clamped(now_s, state, limits)
    if clamped is not None:
        return clamped
    latest = _latest(metric_per_period)
    if latest is None:
        return state, ScalingDecision(state.capacity, None)
    if _tracking_alarm_state(metric_per_period, HIGH_ALARM, policy.target_value) == "ALARM":
        cause = ALARM_CAUSE_FORMAT.format(alarm=high_alarm_name, policy=policy_name)
        return _tracking_move(now_s, state, latest, policy, limits, cause, scale_out=True)
    if policy.disable_scale_in:
        return state, ScalingDecision(state.capacity, None)
    if _tracking_alarm_state(metric_per_period, LOW_ALARM, policy.target_value) == "ALARM":
        cause = ALARM_CAUSE_FORMAT.format(alarm=low_alarm_name, policy=policy_name)
        return _tracking_move(now_s, state, latest, policy, limits, cause, scale_out=False)
    return state, ScalingDecision(state.capacity, None)


def target_tracking_invoked(
    now_s: float,
    state: ScalingState,
    value: float,
    policy: TargetTrackingPolicy,
    limits: ScalingLimits,
    *,
    scale_out: bool,
    policy_name: str,
    alarm_name: str,
) -> tuple[ScalingState, ScalingDecision]:
    """A target tracking policy invoked by one of its alarms in ALARM (a user's
    ``SetAlarmState``): the high alarm (``scale_out``) or the low one, with the metric at
    ``value``. The policy "calculates the scaling adjustment based on the metric and the
    target value" (Application Auto Scaling User Guide, "How target tracking scaling for
    Application Auto Scaling works"): as :func:`target_tracking_step` once that alarm is
    in ALARM, the same cooldowns, limits and ``DisableScaleIn`` included."""
    clamped = _clamped(now_s, state, limits)
    if clamped is not None:
        return clamped
    cause = ALARM_CAUSE_FORMAT.format(alarm=alarm_name, policy=policy_name)
    return _tracking_move(now_s, state, value, policy, limits, cause, scale_out=scale_out)


def step_adjustment(
    difference: float, steps: Sequence[Mapping[str, Any]], *, breach_above: bool
) -> int | None:
    """The ``ScalingAdjustment`` of the step whose interval holds ``difference`` (the metric
    minus the alarm's threshold), None when none does. Above the threshold (an alarm that
    breaches upwards) a step's lower bound is inclusive and its upper bound exclusive;
    below it the lower bound is exclusive and the upper bound inclusive (StepAdjustment,
    Application Auto Scaling API reference). A missing bound is infinite."""
    for step in steps:
        low, high = step.get("MetricIntervalLowerBound"), step.get("MetricIntervalUpperBound")
        if breach_above:
            inside = (low is None or difference >= float(low)) and (
                high is None or difference < float(high)
            )
        else:
            inside = (low is None or difference > float(low)) and (
                high is None or difference <= float(high)
            )
        if inside:
            return int(step["ScalingAdjustment"])
    return None


def stepped_capacity(
    capacity: int, adjustment_type: str, adjustment: int, min_magnitude: int | None = None
) -> int:
    """``capacity`` after a step adjustment of ``adjustment_type`` (``ChangeInCapacity``,
    ``PercentChangeInCapacity``, ``ExactCapacity``). A percentage is rounded as the
    Application Auto Scaling User Guide says (step scaling, "Scaling adjustment types"):
    toward zero, but to 1 or -1 between -1 and 1 ("add 30 percent of 11, 3.3, rounded down
    to 3"); then at least ``min_magnitude`` (``MinAdjustmentMagnitude``)."""
    if adjustment_type == "ExactCapacity":
        return adjustment
    if adjustment_type == "PercentChangeInCapacity":
        exact = capacity * adjustment / 100
        change = max(math.floor(abs(exact)), 1 if exact else 0, min_magnitude or 0)
        return capacity + int(math.copysign(change, adjustment))
    return capacity + adjustment


def step_scaling_step(
    now_s: float,
    state: ScalingState,
    adjustment_type: str,
    adjustment: int,
    limits: ScalingLimits,
    cooldown_s: float,
    min_magnitude: int | None = None,
) -> tuple[ScalingState, int | None]:
    """One step scaling policy acting on its alarm: the new state and the capacity to go to
    (None: no change). ``state`` is the policy's own (its last scale-out and scale-in).

    In the cooldown after the policy's scale-out, the capacity that scale-out added is part
    of the next one: the desired capacity is computed from the capacity before it and only
    a larger scale-out goes ahead; a scale-in waits out the cooldown after the policy's
    previous scale-in, which a scale-out stops (StepScalingPolicyConfiguration API
    reference, Cooldown).
    """
    capacity = state.capacity
    desired = limits.clamp(stepped_capacity(capacity, adjustment_type, adjustment, min_magnitude))
    if desired > capacity:
        base = capacity
        if _in_cooldown(now_s, state.last_scale_out_s, cooldown_s):
            base = state.scale_out_from if state.scale_out_from is not None else capacity
            desired = limits.clamp(
                stepped_capacity(base, adjustment_type, adjustment, min_magnitude)
            )
            if desired <= capacity:
                return state, None
        new = replace(
            state,
            capacity=desired,
            last_scale_out_s=now_s,
            scale_out_from=base,
            last_scale_in_s=None,  # the scale-in cooldown stops (the Cooldown's text)
        )
        return new, desired
    if desired < capacity and not _in_cooldown(now_s, state.last_scale_in_s, cooldown_s):
        return replace(state, capacity=desired, last_scale_in_s=now_s), desired
    return state, None


__all__ = [
    "ScalingDecision",
    "ScalingLimits",
    "ScalingState",
    "TargetTrackingPolicy",
    "aggregated_metric",
    "alarm_state",
    "evaluated_datapoints",
    "step_adjustment",
    "step_scaling_step",
    "stepped_capacity",
    "target_tracking_invoked",
    "target_tracking_step",
]
