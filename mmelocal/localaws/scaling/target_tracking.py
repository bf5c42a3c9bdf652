"""A target tracking policy's proposal for one period: from the metric it tracks, as the
service's alarms would decide (:func:`~mmelocal.rules.autoscaling.target_tracking_step`),
or invoked by one of its own alarms that a user set to ALARM
(:func:`~mmelocal.rules.autoscaling.target_tracking_invoked`)."""

from __future__ import annotations

import math
from typing import Any

from mmelocal.facts.autoscaling import (
    DEFAULT_SCALE_IN_COOLDOWN_S,
    DEFAULT_SCALE_OUT_COOLDOWN_S,
    HIGH_ALARM,
    LOW_ALARM,
    METRIC_PERIOD_S,
)
from mmelocal.facts.cloudwatch import EVALUATION_RANGE_EXTRA_PERIODS
from mmelocal.localaws.metric_store import MetricStore, series_key
from mmelocal.localaws.scaling.bookkeeping import PolicyBook
from mmelocal.localaws.scaling.decisions import Fired, Period, Proposal
from mmelocal.localaws.scaling.tracking_alarms import tracked_metric
from mmelocal.rules.autoscaling import (
    TargetTrackingPolicy,
    target_tracking_invoked,
    target_tracking_step,
)


def target_tracking_proposal(
    policy: dict[str, Any],
    period: Period,
    *,
    store: MetricStore,
    book: PolicyBook,
    fired: Fired | None = None,
) -> Proposal | None:
    """What a target tracking policy would do: on the published metric (its alarms'
    conditions, evaluated here), or invoked by ``fired`` (one of its own alarms a user
    set to ALARM, and the datapoints its reason data gave: the newest is the metric)."""
    region, fleet, limits, now_s, scale, suspended = period
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    namespace, metric, dimensions, statistic = tracked_metric(policy)
    values = store.periods(
        series_key(namespace, metric, dimensions),
        end_s=now_s,
        period_s=METRIC_PERIOD_S / scale,
        count=LOW_ALARM.evaluation_periods + EVALUATION_RANGE_EXTRA_PERIODS,
        statistic=statistic,
    )
    rules = TargetTrackingPolicy(
        float(config["TargetValue"]),
        scale_out_cooldown_s=float(config.get("ScaleOutCooldown", DEFAULT_SCALE_OUT_COOLDOWN_S))
        / scale,
        scale_in_cooldown_s=float(config.get("ScaleInCooldown", DEFAULT_SCALE_IN_COOLDOWN_S))
        / scale,
        disable_scale_in=bool(config.get("DisableScaleIn"))
        or bool(suspended.get("DynamicScalingInSuspended")),
    )
    name = str(policy["PolicyName"])
    state_key = (region, str(policy["ResourceId"]), name)
    state = book.tracking_state(state_key, fleet.instance_count)
    alarm_names = book.alarm_names(region, str(policy["PolicyARN"]))
    high_side, low_side = f"-Alarm{HIGH_ALARM.side}-", f"-Alarm{LOW_ALARM.side}-"
    if fired is None:
        high = next((n for n in alarm_names if high_side in n), "AlarmHigh")
        low = next((n for n in alarm_names if low_side in n), "AlarmLow")
        new, decision = target_tracking_step(
            now_s, state, values, rules, limits,
            policy_name=name, high_alarm_name=high, low_alarm_name=low,
        )  # fmt: skip
    else:
        alarm, given = fired
        alarm_name = str(alarm["AlarmName"])
        value = given[-1] if given else next(
            (v for v in reversed(values) if v is not None and not math.isnan(v)), None
        )  # fmt: skip
        if alarm_name not in alarm_names or value is None:  # only its own alarms invoke it
            return None
        new, decision = target_tracking_invoked(
            now_s, state, value, rules, limits,
            scale_out=high_side in alarm_name, policy_name=name, alarm_name=alarm_name,
        )  # fmt: skip
    if decision.cause is None:
        return None
    return Proposal(decision.capacity, decision.cause, lambda: book.record_tracking(state_key, new))


__all__ = ["target_tracking_proposal"]
