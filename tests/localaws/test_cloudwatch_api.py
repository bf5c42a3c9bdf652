"""CloudWatch's API on the local AWS where moto's answers differ from the service's:
alarm states across PutMetricAlarm, the periods of the percentiles it computes."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import boto3
from localaws_helpers import unique

from mmelocal.localaws import LocalAws
from mmelocal.localaws.app import INTERNAL_HEADER
from mmelocal.localaws.cloudwatch import ControlLoop
from mmelocal.localaws.cloudwatch_api import CloudWatchOverlay
from mmelocal.localaws.metric_store import series_key
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


MINUTE = dt.datetime(2026, 11, 26, 12, 32, tzinfo=dt.UTC).timestamp()
DIMENSIONS = [{"Name": "EndpointName", "Value": "e"}, {"Name": "VariantName", "Value": "v"}]


def _overlay() -> CloudWatchOverlay:
    """The overlay over one minute-stamped datum of ModelLatency (1..4 at 12:32:00)."""
    loop = ControlLoop(client_for=_no_client, running=list, regions=list)
    key = series_key("AWS/SageMaker", "ModelLatency", DIMENSIONS)
    loop.store.add(key, MINUTE, [1.0, 2.0, 3.0, 4.0])
    return CloudWatchOverlay(loop, _no_client)


def _answer(operation: str, params: dict[str, Any]) -> dict[str, Any]:
    answer = _overlay()("us-east-1", operation, params, _no)
    assert answer is not None and answer[0] == 200
    return dict(answer[1])


def test_percentiles_round_the_start_down_to_the_minute(monkeypatch: Any) -> None:
    """GetMetricStatistics' StartTime (botocore's model): "Start time less than 15 days ago -
    Round down to the nearest whole minute. For example, 12:32:34 is rounded down to
    12:32:00"; the datum stamped 12:32:00 is in the answer, under that timestamp."""
    now = dt.datetime(2026, 11, 26, 12, 40, tzinfo=dt.UTC).timestamp()
    monkeypatch.setattr(time, "time", lambda: now)
    metric = {"Namespace": "AWS/SageMaker", "MetricName": "ModelLatency", "Dimensions": DIMENSIONS}
    window = {"StartTime": MINUTE + 34, "EndTime": MINUTE + 334}  # 12:32:34 to 12:37:34
    statistics = _answer(
        "GetMetricStatistics",
        {**metric, **window, "Period": 300, "ExtendedStatistics": ["p50"],
         "Statistics": ["SampleCount"]},
    )  # fmt: skip
    (point,) = statistics["Datapoints"]
    assert point["Timestamp"] == MINUTE
    assert (point["SampleCount"], point["ExtendedStatistics"]) == (4.0, {"p50": 2.0})
    query = {"Id": "p", "MetricStat": {"Metric": metric, "Period": 300, "Stat": "p50"}}
    data = _answer("GetMetricData", {**window, "MetricDataQueries": [query]})
    (result,) = data["MetricDataResults"]
    assert (result["Timestamps"], result["Values"]) == ([MINUTE], [2.0])


def _no_client(*_: Any) -> Any:
    raise AssertionError("no client is needed")


def _no(_: dict[str, Any]) -> tuple[int, Any]:
    raise AssertionError("nothing is forwarded to moto")


def test_an_alarm_in_a_unit_not_published_has_no_data(local_aws_env: LocalAws) -> None:
    """PutMetricAlarm's Unit (botocore's model): specifying "an incorrect unit that is not
    published for this metric [...] causes the alarm to be stuck in the INSUFFICIENT DATA
    state". ModelLatency is published in Microseconds: an alarm on it in Milliseconds gets
    no datapoints, however high the latency; the same alarm without Unit goes to ALARM."""
    clock = local_aws_env.clock
    assert clock is not None
    endpoint = unique("units")
    dimensions = [
        {"Name": "EndpointName", "Value": endpoint},
        {"Name": "VariantName", "Value": "AllTraffic"},
    ]
    now = time.time()
    key = series_key("AWS/SageMaker", "ModelLatency", dimensions)
    for age in (3, 2, 1):
        clock.store.add(key, now - 60 * age, [5_000_000.0])  # 5 s, in microseconds
    cloudwatch = boto3.client("cloudwatch")
    names = {unit: unique("latency") for unit in ("Milliseconds", None)}
    try:
        for unit, name in names.items():
            cloudwatch.put_metric_alarm(
                AlarmName=name, Namespace="AWS/SageMaker", MetricName="ModelLatency",
                Dimensions=dimensions, Statistic="Average", Period=60, EvaluationPeriods=1,
                Threshold=1000.0, ComparisonOperator="GreaterThanThreshold",
                **({"Unit": unit} if unit else {}),
            )  # fmt: skip
        clock.tick(now - 60, now)
        states = {
            unit: cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateValue"]
            for unit, name in names.items()
        }
    finally:
        cloudwatch.delete_alarms(AlarmNames=list(names.values()))
    assert states == {"Milliseconds": "INSUFFICIENT_DATA", None: "ALARM"}


def test_percentiles_in_another_unit_are_empty() -> None:
    """GetMetricStatistics' Unit (botocore's model): "If you specify a unit that does not
    match the data collected, the results of the operation are null"; each datapoint
    names its unit (Datapoint.Unit). ModelLatency is published in Microseconds."""
    metric = {"Namespace": "AWS/SageMaker", "MetricName": "ModelLatency", "Dimensions": DIMENSIONS}
    window = {"StartTime": MINUTE, "EndTime": MINUTE + 60, "Period": 60}
    asked = {**metric, **window, "ExtendedStatistics": ["p50"]}
    assert _answer("GetMetricStatistics", {**asked, "Unit": "Milliseconds"})["Datapoints"] == []
    (point,) = _answer("GetMetricStatistics", {**asked, "Unit": "Microseconds"})["Datapoints"]
    assert (point["Unit"], point["ExtendedStatistics"]) == ("Microseconds", {"p50": 2.0})
    query = {
        "Id": "p",
        "MetricStat": {"Metric": metric, "Period": 60, "Stat": "p50", "Unit": "Milliseconds"},
    }
    data = _answer("GetMetricData", {"StartTime": MINUTE, "EndTime": MINUTE + 60,
                                     "MetricDataQueries": [query]})  # fmt: skip
    assert data["MetricDataResults"][0]["Values"] == []


def test_an_alarm_that_cannot_be_evaluated_leaves_the_others_evaluated(
    local_aws_env: LocalAws,
) -> None:
    """moto accepts an alarm whose DatapointsToAlarm exceeds its EvaluationPeriods; the
    control loop cannot evaluate it, and the alarms after it are evaluated all the same."""
    clock = local_aws_env.clock
    assert clock is not None
    endpoint = unique("broken")
    dimensions = [
        {"Name": "EndpointName", "Value": endpoint},
        {"Name": "VariantName", "Value": "AllTraffic"},
    ]
    now = time.time()
    clock.store.add(series_key("AWS/SageMaker", "Invocations", dimensions), now - 60, [9.0])
    cloudwatch = boto3.client("cloudwatch")
    broken, fine = f"a-{unique('broken')}", f"b-{unique('fine')}"  # evaluated in this order
    try:
        for name, datapoints in ((broken, 5), (fine, 1)):
            cloudwatch.put_metric_alarm(
                AlarmName=name, Namespace="AWS/SageMaker", MetricName="Invocations",
                Dimensions=dimensions, Statistic="Sum", Period=60, EvaluationPeriods=1,
                DatapointsToAlarm=datapoints, Threshold=1.0,
                ComparisonOperator="GreaterThanThreshold",
            )  # fmt: skip
        clock.tick(now - 60, now)
        (alarm,) = cloudwatch.describe_alarms(AlarmNames=[fine])["MetricAlarms"]
    finally:
        cloudwatch.delete_alarms(AlarmNames=[broken, fine])
    assert alarm["StateValue"] == "ALARM"


def test_a_percentile_alarm_ignoring_low_samples_waits_for_enough(
    local_aws_env: LocalAws,
) -> None:
    """EvaluateLowSampleCountPercentile (PutMetricAlarm, botocore's model): "If you specify
    ignore, the alarm state does not change during periods with too few data points to be
    statistically significant. If you specify evaluate or omit this parameter, the alarm is
    always evaluated"; for a percentile between 0.5 and 1.00 too few is "fewer than
    10/(1-percentile) data points during the evaluation period" (CloudWatch User Guide,
    "Percentile-based alarms and low data samples"): 100 for p90. Five slow calls put the
    alarm that evaluates in ALARM and leave the one that ignores them where it was; 150
    calls in the next period put both in ALARM."""
    clock = local_aws_env.clock
    assert clock is not None
    endpoint = unique("samples")
    dimensions = [
        {"Name": "EndpointName", "Value": endpoint},
        {"Name": "VariantName", "Value": "AllTraffic"},
    ]
    key = series_key("AWS/SageMaker", "ModelLatency", dimensions)
    cloudwatch = boto3.client("cloudwatch")
    names = {choice: unique("p90") for choice in ("ignore", "evaluate", None)}
    now = time.time()

    def states() -> dict[str | None, str]:
        return {
            choice: cloudwatch.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateValue"]
            for choice, name in names.items()
        }

    try:
        for choice, name in names.items():
            cloudwatch.put_metric_alarm(
                AlarmName=name, Namespace="AWS/SageMaker", MetricName="ModelLatency",
                Dimensions=dimensions, ExtendedStatistic="p90", Period=60, EvaluationPeriods=1,
                Threshold=1000.0, ComparisonOperator="GreaterThanThreshold",
                **({"EvaluateLowSampleCountPercentile": choice} if choice else {}),
            )  # fmt: skip
        clock.store.add(key, now - 60, [5_000_000.0] * 5)
        clock.tick(now - 60, now)
        first = states()
        clock.store.add(key, now, [5_000_000.0] * 150)
        clock.tick(now, now + 60)
        second = states()
    finally:
        cloudwatch.delete_alarms(AlarmNames=list(names.values()))
    assert first == {"ignore": "INSUFFICIENT_DATA", "evaluate": "ALARM", None: "ALARM"}
    assert second == {"ignore": "ALARM", "evaluate": "ALARM", None: "ALARM"}
