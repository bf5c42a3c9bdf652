"""The shared autoscaling rules: alarm evaluation, proportional desired count, cooldowns."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from mmelocal.errors import UserInputError
from mmelocal.facts import autoscaling as facts
from mmelocal.rules.autoscaling import (
    ScalingLimits,
    ScalingState,
    TargetTrackingPolicy,
    alarm_state,
    step_scaling_step,
    target_tracking_invoked,
    target_tracking_step,
)

HIGH = facts.HIGH_ALARM_EVALUATION_PERIODS
LOW = facts.LOW_ALARM_EVALUATION_PERIODS


def _alarm(points: list[float | None], **kw: object) -> str:
    args: dict[str, object] = {
        "threshold": 10.0,
        "comparison": "GreaterThanThreshold",
        "evaluation_periods": 3,
        "datapoints_to_alarm": 3,
    }
    args.update(kw)
    return alarm_state(points, **args)  # type: ignore[arg-type]


def test_alarm_needs_m_of_n_breaching() -> None:
    assert _alarm([11, 11, 11]) == "ALARM"
    assert _alarm([11, 10, 11]) == "OK"  # 10 is not > 10
    assert _alarm([9, 11, 11], datapoints_to_alarm=2) == "ALARM"
    assert _alarm([1, 1, 11, 11, 11]) == "ALARM"  # only the newest N count
    assert _alarm([11, 11, 11, 1]) == "OK"
    assert (
        _alarm(
            [10],
            comparison="GreaterThanOrEqualToThreshold",
            evaluation_periods=1,
            datapoints_to_alarm=1,
        )
        == "ALARM"
    )
    assert _alarm([5, 5, 5], comparison="LessThanThreshold") == "ALARM"


def test_missing_data_as_cloudwatch_treats_it() -> None:
    assert _alarm([]) == "INSUFFICIENT_DATA"
    assert _alarm([None, None, None]) == "INSUFFICIENT_DATA"
    assert _alarm([None, None, None], treat_missing_data="breaching") == "ALARM"
    assert _alarm([None, None, None], treat_missing_data="notBreaching") == "OK"
    assert _alarm([None, None, None], treat_missing_data="ignore", current_state="ALARM") == "ALARM"
    # one present datapoint within the threshold makes 3-of-3 unreachable
    assert _alarm([None, 1, None]) == "OK"
    # two breaching, too few for 3 of 3, none within and the rest missing: no state to
    # decide for missing (as "- - - - X" in CloudWatch's tables), the state kept for ignore
    assert _alarm([11, None, 11], current_state="OK") == "INSUFFICIENT_DATA"
    assert _alarm([11, None, 11], current_state="ALARM", treat_missing_data="ignore") == "ALARM"
    # enough datapoints in the evaluation range: the newest 3 are evaluated, missing or not
    assert _alarm([11, 11, None, 11], treat_missing_data="notBreaching") == "ALARM"
    assert _alarm([11, math.nan, 11], treat_missing_data="breaching") == "ALARM"


@pytest.mark.parametrize(
    "kw",
    [
        {"comparison": "Bigger"},
        {"treat_missing_data": "zero"},
        {"datapoints_to_alarm": 4},
        {"datapoints_to_alarm": 0},
        {"current_state": "WARN"},
    ],
)
def test_alarm_rejects_bad_arguments(kw: dict[str, object]) -> None:
    with pytest.raises(UserInputError):
        _alarm([1.0], **kw)


def test_limits_and_policy_check_their_fields() -> None:
    with pytest.raises(UserInputError, match="max_capacity"):
        ScalingLimits(3, 2)
    with pytest.raises(UserInputError, match="min_capacity"):
        ScalingLimits(-1, 2)
    with pytest.raises(UserInputError, match="target_value"):
        TargetTrackingPolicy(0)
    with pytest.raises(UserInputError, match="cooldown"):
        TargetTrackingPolicy(1, scale_in_cooldown_s=-1)
    assert TargetTrackingPolicy(100).low_threshold == pytest.approx(
        100 * facts.LOW_ALARM_THRESHOLD_FACTOR
    )


POLICY = TargetTrackingPolicy(100.0, scale_out_cooldown_s=30, scale_in_cooldown_s=60)
LIMITS = ScalingLimits(1, 4)


def test_scale_out_after_the_high_alarms_datapoints_proportionally() -> None:
    state = ScalingState(1)
    _, decision = target_tracking_step(0, state, [250.0] * (HIGH - 1), POLICY, LIMITS)
    assert decision.cause is None and decision.capacity == 1
    new, decision = target_tracking_step(
        0, state, [250.0] * HIGH, POLICY, LIMITS, policy_name="p", high_alarm_name="hi"
    )
    assert decision.capacity == math.ceil(1 * 250 / 100)
    assert decision.cause == "monitor alarm hi in state ALARM triggered policy p"
    assert new == ScalingState(3, last_scale_out_s=0, scale_out_from=1)
    # clamped to MaxCapacity
    _, decision = target_tracking_step(0, state, [1000.0] * HIGH, POLICY, LIMITS)
    assert decision.capacity == LIMITS.max_capacity


def test_scale_out_cooldown_spaces_steps() -> None:
    """In the cooldown of a scale-out from 1 to 2, the added instance counts as part of the
    next scale-out: the metric that asked for 2 holds (no compounding), a larger one
    scales out at once; after the cooldown the count is computed from the capacity now."""
    state = ScalingState(2, last_scale_out_s=100.0, scale_out_from=1)
    points = [200.0] * HIGH
    _, held = target_tracking_step(100 + 29.9, state, points, POLICY, LIMITS)
    assert held.cause is None and held.capacity == 2
    larger, moved = target_tracking_step(100 + 29.9, state, [300.0] * HIGH, POLICY, LIMITS)
    assert moved.capacity == 3 and moved.cause is not None
    assert larger == ScalingState(3, last_scale_out_s=129.9, scale_out_from=1)
    _, moved = target_tracking_step(100 + 30, state, points, POLICY, LIMITS)
    assert moved.capacity == 4


def test_scale_in_only_after_the_low_alarms_datapoints() -> None:
    state = ScalingState(4)
    low_value = POLICY.low_threshold - 1  # 89 per instance
    _, held = target_tracking_step(0, state, [low_value] * (LOW - 1), POLICY, LIMITS)
    assert held.cause is None
    # one period at the target in the window keeps it from scaling in
    _, held = target_tracking_step(0, state, [100.0] + [low_value] * (LOW - 1), POLICY, LIMITS)
    assert held.cause is None
    new, moved = target_tracking_step(0, state, [0.0] * LOW, POLICY, LIMITS)
    assert moved.capacity == LIMITS.min_capacity and moved.cause is not None
    assert new.last_scale_in_s == 0
    _, moved = target_tracking_step(0, state, [low_value] * LOW, POLICY, LIMITS)
    assert moved.capacity == math.ceil(4 * low_value / 100)


def test_scale_in_cooldown_and_disable_scale_in() -> None:
    points = [0.0] * LOW
    state = ScalingState(3, last_scale_in_s=0.0)
    assert target_tracking_step(59, state, points, POLICY, LIMITS)[1].cause is None
    assert target_tracking_step(60, state, points, POLICY, LIMITS)[1].capacity == 1
    no_in = TargetTrackingPolicy(100.0, disable_scale_in=True)
    assert target_tracking_step(10_000, state, points, no_in, LIMITS)[1].cause is None
    # a scale-in's cooldown does not hold back a scale-out
    _, out = target_tracking_step(1, state, [400.0] * HIGH, POLICY, LIMITS)
    assert out.capacity == 4


def test_capacity_outside_limits_is_brought_inside_first() -> None:
    new, decision = target_tracking_step(5, ScalingState(0), [], POLICY, ScalingLimits(2, 3))
    assert decision.capacity == 2 and "minimum" in (decision.cause or "")
    assert new.last_scale_out_s == 5
    _, decision = target_tracking_step(5, ScalingState(9), [], POLICY, ScalingLimits(2, 3))
    assert decision.capacity == 3 and "maximum" in (decision.cause or "")


def test_no_data_changes_nothing() -> None:
    state = ScalingState(2)
    assert target_tracking_step(0, state, [None] * LOW, POLICY, LIMITS) == (
        state,
        target_tracking_step(0, state, [], POLICY, LIMITS)[1],
    )


def test_defaults_come_from_the_facts() -> None:
    policy = TargetTrackingPolicy(1.0)
    assert policy.scale_out_cooldown_s == facts.DEFAULT_SCALE_OUT_COOLDOWN_S
    assert policy.scale_in_cooldown_s == facts.DEFAULT_SCALE_IN_COOLDOWN_S
    assert facts.PREDEFINED_METRICS["SageMakerVariantInvocationsPerInstance"] == (
        "AWS/SageMaker",
        "InvocationsPerInstance",
        "Sum",
    )


#: CloudWatch User Guide, "How alarm state is evaluated when data is missing" (awsdocs/
#: amazon-cloudwatch-user-guide, doc_source/AlarmThatSendsEmail.md): the 5 most recent
#: datapoints CloudWatch retrieves for an alarm of 3 evaluation periods (0 within the
#: threshold, X breaching, - missing) and the state for missing, ignore, breaching and
#: notBreaching ("retain" keeps the current state)
CLOUDWATCH_TABLES = [
    (3, "0 - X - X", ("OK", "OK", "OK", "OK")),
    (3, "0 - - - -", ("OK", "OK", "OK", "OK")),
    (3, "- - - - -", ("INSUFFICIENT_DATA", "retain", "ALARM", "OK")),
    (3, "0 X X - X", ("ALARM", "ALARM", "ALARM", "ALARM")),
    (3, "- - - - X", ("INSUFFICIENT_DATA", "retain", "ALARM", "OK")),
    (3, "X - - - -", ("ALARM", "retain", "ALARM", "OK")),
    (2, "0 - X - X", ("ALARM", "ALARM", "ALARM", "ALARM")),
    (2, "0 0 X 0 X", ("ALARM", "ALARM", "ALARM", "ALARM")),
    (2, "0 - X - -", ("OK", "OK", "ALARM", "OK")),
    (2, "- - - - 0", ("OK", "OK", "ALARM", "OK")),
    (2, "- - - - X", ("INSUFFICIENT_DATA", "retain", "ALARM", "OK")),
]


@pytest.mark.parametrize(("datapoints_to_alarm", "row", "states"), CLOUDWATCH_TABLES)
@pytest.mark.parametrize("current", ["OK", "ALARM", "INSUFFICIENT_DATA"])
def test_missing_data_follows_cloudwatchs_tables(
    datapoints_to_alarm: int, row: str, states: tuple[str, ...], current: str
) -> None:
    points = [None if c == "-" else (11.0 if c == "X" else 1.0) for c in row.split()]
    treatments = ("missing", "ignore", "breaching", "notBreaching")
    for treat, expected in zip(treatments, states, strict=True):
        got = _alarm(
            points,
            datapoints_to_alarm=datapoints_to_alarm,
            treat_missing_data=treat,
            current_state=current,
        )
        assert got == (current if expected == "retain" else expected), (treat, row)


def test_a_scale_out_stops_the_scale_in_cooldown() -> None:
    """TargetTrackingScalingPolicyConfiguration's ScaleInCooldown (Application Auto Scaling
    API reference): "if another alarm triggers a scale-out activity during the scale-in
    cooldown period, Application Auto Scaling scales out the target immediately. In this
    case, the scale-in cooldown period stops and doesn't complete"; the step scaling
    cooldown says the same."""
    state = ScalingState(2, last_scale_in_s=0.0)
    after_out, out = target_tracking_step(1, state, [400.0] * HIGH, POLICY, LIMITS)
    assert out.capacity == 4 and after_out.last_scale_in_s is None
    stepped, capacity = step_scaling_step(1, state, "ChangeInCapacity", 1, LIMITS, 60.0)
    assert capacity == 3 and stepped.last_scale_in_s is None


@pytest.mark.parametrize(
    ("statistic", "least"),
    [("p99", 1000.0), ("p99.9", 10000.0), ("p90", 100.0), ("p50", 20.0), ("p25", 40.0),
     ("p10", 100.0), ("p100", None), ("p0", None), ("Average", None)],
)  # fmt: skip
def test_low_sample_count_is_the_user_guides(statistic: str, least: float | None) -> None:
    """CloudWatch User Guide, "Percentile-based alarms and low data samples": fewer than
    10/(1-percentile) from 0.5 (inclusive) to 1.00 (exclusive) ("fewer than 1000 samples
    for an alarm on a p99 percentile"), 10/percentile under 0.5."""
    from mmelocal.facts.cloudwatch import low_sample_count

    assert low_sample_count(statistic) == least


def test_an_alarm_ignoring_low_samples_keeps_its_state_until_each_period_has_enough() -> None:
    """Every datapoint evaluated must come from at least ``min_sample_count`` samples; one
    short period among them keeps the current state, older short ones do not count."""
    points: list[float | None] = [20.0, 20.0, 20.0]
    assert _alarm(points, sample_counts=[100, 5, 100], min_sample_count=100) == "INSUFFICIENT_DATA"
    assert _alarm(points, sample_counts=[100, 100, 100], min_sample_count=100) == "ALARM"
    older: list[float | None] = [
        1.0,
        20.0,
        20.0,
        20.0,
    ]  # the oldest (short) is not one of the 3 evaluated
    assert _alarm(older, sample_counts=[1, 100, 100, 100], min_sample_count=100) == "ALARM"


def test_an_invoked_target_tracking_policy_acts_on_the_value_it_is_given() -> None:
    """Invoked by its high alarm, a policy scales out to ceil(capacity * value / target),
    and not at all when that is no more; by its low alarm it scales in the same way, not
    with scale-in disabled nor in the scale-in cooldown (the rules of a period's step)."""
    limits = ScalingLimits(1, 10)
    policy = TargetTrackingPolicy(100.0, scale_in_cooldown_s=300.0)
    names = {"policy_name": "p", "alarm_name": "a"}
    state = ScalingState(2)
    _, out = target_tracking_invoked(0.0, state, 250.0, policy, limits, scale_out=True, **names)
    assert (out.capacity, out.cause) == (5, "monitor alarm a in state ALARM triggered policy p")
    _, none = target_tracking_invoked(0.0, state, 10.0, policy, limits, scale_out=True, **names)
    assert none.cause is None
    after, scaled_in = target_tracking_invoked(
        0.0, ScalingState(4), 10.0, policy, limits, scale_out=False, **names
    )
    assert scaled_in.capacity == 1 and after.last_scale_in_s == 0.0
    _, cooling = target_tracking_invoked(
        100.0, replace(after, capacity=4), 10.0, policy, limits, scale_out=False, **names
    )
    assert cooling.cause is None
    disabled = TargetTrackingPolicy(100.0, disable_scale_in=True)
    _, kept = target_tracking_invoked(
        0.0, ScalingState(4), 10.0, disabled, limits, scale_out=False, **names
    )
    assert kept.cause is None
