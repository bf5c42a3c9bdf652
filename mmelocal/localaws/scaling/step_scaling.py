"""A step scaling policy's proposals for one period: one for each alarm in ALARM that
invokes it ("Application Auto Scaling will evaluate all alarm breaches as they occur. A
cooldown period is used to protect against over-scaling due to multiple alarm breaches",
Application Auto Scaling User Guide, Step scaling policies), the step chosen by the
alarm's datapoints aggregated as the policy says, through the policy's cooldown
(:func:`~mmelocal.rules.autoscaling.step_scaling_step`)."""

from __future__ import annotations

from typing import Any

from mmelocal.facts.autoscaling import ALARM_CAUSE_FORMAT, DEFAULT_STEP_COOLDOWN_S
from mmelocal.facts.cloudwatch import EVALUATION_RANGE_EXTRA_PERIODS
from mmelocal.localaws.metric_store import MetricStore, series_key
from mmelocal.localaws.paging import every_item
from mmelocal.localaws.scaling.bookkeeping import PolicyBook
from mmelocal.localaws.scaling.decisions import Fired, Period, Proposal
from mmelocal.rules.autoscaling import (
    aggregated_metric,
    evaluated_datapoints,
    step_adjustment,
    step_scaling_step,
)


def step_alarms(cloudwatch: Any, policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The alarms in ALARM that invoke the step scaling policy this period, every one of
    them (see the module docstring). An alarm whose actions are disabled runs none
    (PutMetricAlarm's ActionsEnabled)."""
    return [
        alarm
        for alarm in every_item(
            cloudwatch.describe_alarms,
            "MetricAlarms",
            ActionPrefix=policy["PolicyARN"],
            StateValue="ALARM",
        )
        if alarm.get("ActionsEnabled", True)
        and policy["PolicyARN"] in (alarm.get("AlarmActions") or [])
    ]


def step_proposal(
    policy: dict[str, Any],
    period: Period,
    fired: Fired,
    *,
    store: MetricStore,
    book: PolicyBook,
) -> Proposal | None:
    """What a step scaling policy invoked by ``fired`` would do: an alarm in ALARM, and
    the datapoints a user's reason data gave (None: those the alarm evaluates)."""
    region, fleet, limits, now_s, scale, _ = period
    config = policy.get("StepScalingPolicyConfiguration") or {}
    alarm, given = fired
    cooldown_s = float(config.get("Cooldown", DEFAULT_STEP_COOLDOWN_S)) / scale
    key = series_key(alarm["Namespace"], alarm["MetricName"], alarm.get("Dimensions", []))
    periods = int(alarm["EvaluationPeriods"])
    if given is None:
        values = store.periods(
            key,
            end_s=now_s,
            period_s=float(alarm["Period"]) / scale,
            count=periods + EVALUATION_RANGE_EXTRA_PERIODS,
            statistic=alarm.get("ExtendedStatistic") or alarm.get("Statistic") or "Average",
        )
        given = evaluated_datapoints(values, periods)
    # the alarm's datapoints, aggregated as the policy says ("the value of the aggregated
    # CloudWatch metric": StepAdjustment, API reference)
    value = aggregated_metric(given[-periods:], config.get("MetricAggregationType"))
    if value is None:
        return None
    adjustment = step_adjustment(
        value - float(alarm["Threshold"]),
        config.get("StepAdjustments", []),
        breach_above=str(alarm["ComparisonOperator"]).startswith("GreaterThan"),
    )
    if adjustment is None:
        return None
    state_key = (region, str(policy["ResourceId"]), str(policy["PolicyARN"]))
    new, desired = step_scaling_step(
        now_s,
        book.step_state(state_key, fleet.instance_count),
        str(config.get("AdjustmentType", "ChangeInCapacity")),
        adjustment,
        limits,
        cooldown_s,
        config.get("MinAdjustmentMagnitude"),
    )
    if desired is None:
        return None
    cause = ALARM_CAUSE_FORMAT.format(alarm=alarm["AlarmName"], policy=policy["PolicyName"])
    return Proposal(desired, cause, lambda: book.record_step(state_key, new))


__all__ = ["step_alarms", "step_proposal"]
