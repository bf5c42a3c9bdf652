"""CloudWatch's API on the local AWS where moto's answers differ from the service's:
alarm states across PutMetricAlarm."""

from __future__ import annotations

from typing import Any

import boto3
from localaws_helpers import unique

from mmelocal.localaws import LocalAws
from mmelocal.localaws.app import INTERNAL_HEADER
from mmelocal.localaws.state import repoint_alarms


def _mark_internal(request: Any, **_: Any) -> None:
    request.headers[INTERNAL_HEADER] = "1"


def _alarm(cloudwatch: Any, name: str, threshold: float, actions: tuple[str, ...] = ()) -> None:
    cloudwatch.put_metric_alarm(
        AlarmActions=list(actions), AlarmName=name, Namespace="mmelocal/tests",
        MetricName="Kept", Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=threshold,
        ComparisonOperator="GreaterThanThreshold",
    )  # fmt: skip


def test_updating_an_alarm_leaves_its_state(local_aws_env: LocalAws) -> None:
    """PutMetricAlarm API reference: "When you update an existing alarm, its state is left
    unchanged, but the update completely overwrites the previous configuration of the
    alarm" (moto makes the alarm again, in OK)."""
    cloudwatch = boto3.client("cloudwatch")
    name = unique("kept")
    try:
        _alarm(cloudwatch, name, 1.0)
        cloudwatch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason="by hand")
        _alarm(cloudwatch, name, 2.0)
        (alarm,) = cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]
    finally:
        cloudwatch.delete_alarms(AlarmNames=[name])
    assert alarm["Threshold"] == 2.0  # the configuration is the new one
    assert (alarm["StateValue"], alarm["StateReason"]) == ("ALARM", "by hand")


def test_an_alarm_repointed_at_a_policys_new_arn_keeps_its_state(local_aws_env: LocalAws) -> None:
    """A step scaling policy put again gets a new ARN from moto; the user's alarm acting on
    it is put again with the new one (:func:`~mmelocal.localaws.state.repoint_alarms`, with
    mmelocal's own client, which skips the overlays) and, as any updated alarm, keeps its
    state."""
    cloudwatch = boto3.client("cloudwatch")
    internal = boto3.client("cloudwatch")
    internal.meta.events.register("before-sign.monitoring", _mark_internal)
    name = unique("repointed")
    old = "arn:aws:autoscaling:us-east-1:123456789012:scalingPolicy:old:resource/x:policyName/p"
    new = old.replace(":old:", ":new:")
    try:
        _alarm(cloudwatch, name, 1.0, actions=(old,))
        cloudwatch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason="by hand")
        repoint_alarms(internal, {old: new})
        (alarm,) = cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"]
    finally:
        cloudwatch.delete_alarms(AlarmNames=[name])
    assert alarm["AlarmActions"] == [new]
    assert (alarm["StateValue"], alarm["StateReason"]) == ("ALARM", "by hand")
