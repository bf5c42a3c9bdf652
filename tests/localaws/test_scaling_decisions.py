"""What the autoscaler decides, driven as a user drives it: boto3 against a local AWS whose
variant serves on real Triton, the metrics the policies read put into the control loop's
store and one period evaluated by hand (``clock.tick``). The clock runs at the real pace
(one period a minute), so no period passes on its own while a test runs its few seconds."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import model_and_config, unique, wait_for
from localaws_helpers import wait_status as wait_endpoint

from mmelocal.localaws import LocalAws, state
from mmelocal.localaws.metric_store import series_key
from mmelocal.testing.local_aws_fixtures import point_environment_at
from mmelocal.testing.tiny_model import write_tarball

pytestmark = pytest.mark.triton
SCALABLE = "sagemaker:variant:DesiredInstanceCount"
NAMESPACE = "mmelocal/tests"
_ENDPOINT = unique("decide")


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAws]:
    """A local AWS at the real pace, in the environment of a user's script."""
    options: dict[str, Any] = {"persist": False, "memory_budget_bytes": 2 * 1024**3}
    with (
        LocalAws(data_dir=tmp_path_factory.mktemp("decide-aws"), **options) as local,
        pytest.MonkeyPatch.context() as env,
    ):
        point_environment_at(env, local, tmp_path_factory.mktemp("no-aws-files"))
        yield local


@pytest.fixture(scope="module")
def endpoint_config(aws: LocalAws, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An MME endpoint config of two instances on the tiny model."""
    s3 = boto3.client("s3")
    bucket = unique("decide")
    s3.create_bucket(Bucket=bucket)
    tarball = write_tarball(Path(tmp_path_factory.mktemp("models")) / "model.tar.gz")
    s3.upload_file(str(tarball), bucket, "models/model.tar.gz")
    return model_and_config(f"s3://{bucket}/models/", count=2)


def _serving(sm: Any, name: str) -> tuple[str, int]:
    described = sm.describe_endpoint(EndpointName=name)
    return described["EndpointStatus"], described["ProductionVariants"][0]["CurrentInstanceCount"]


@pytest.fixture
def target(aws: LocalAws, endpoint_config: str) -> Iterator[dict[str, str]]:
    """The scalable target of the module's endpoint, InService at two instances and
    registered 1..2 with no policy (whatever ran before); deregistered after the test."""
    sm = boto3.client("sagemaker")
    aas = boto3.client("application-autoscaling")
    resource = {"ServiceNamespace": "sagemaker", "ScalableDimension": SCALABLE,
                "ResourceId": f"endpoint/{_ENDPOINT}/variant/AllTraffic"}  # fmt: skip
    try:
        sm.describe_endpoint(EndpointName=_ENDPOINT)
    except ClientError:
        sm.create_endpoint(EndpointName=_ENDPOINT, EndpointConfigName=endpoint_config)
    wait_endpoint(sm, _ENDPOINT, leaving="Creating")
    wait_for(lambda: _serving(sm, _ENDPOINT)[0] == "InService", timeout_s=120)
    if _serving(sm, _ENDPOINT)[1] != 2:
        sm.update_endpoint_weights_and_capacities(
            EndpointName=_ENDPOINT,
            DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 2}],
        )
    wait_for(lambda: _serving(sm, _ENDPOINT) == ("InService", 2), timeout_s=120)
    aas.register_scalable_target(**resource, MinCapacity=1, MaxCapacity=2)
    try:
        yield resource
    finally:
        assert aws.autoscaler is not None
        aws.autoscaler.wait(timeout_s=60)
        aas.deregister_scalable_target(**resource)


def _metric(name: str) -> dict[str, Any]:
    return {"Namespace": NAMESPACE, "MetricName": name,
            "Dimensions": [{"Name": "EndpointName", "Value": _ENDPOINT}]}  # fmt: skip


def _record(aws: LocalAws, name: str, values: list[float], now_s: float) -> None:
    """``values`` as one datum per minute, the last in the minute ending at ``now_s``."""
    assert aws.clock is not None
    metric = _metric(name)
    key = series_key(metric["Namespace"], metric["MetricName"], metric["Dimensions"])
    for age, value in zip(range(len(values), 0, -1), values, strict=True):
        aws.clock.store.add(key, now_s - 60 * age, [value])


def _evaluate(aws: LocalAws, now_s: float) -> None:
    """One period ending ``now_s``: alarms evaluated, the autoscaler acting on them."""
    assert aws.clock is not None and aws.autoscaler is not None
    aws.clock.tick(now_s - 60, now_s)
    aws.autoscaler.wait(timeout_s=60)


def _activities(target: dict[str, str]) -> list[dict[str, Any]]:
    aas = boto3.client("application-autoscaling")
    return list(
        aas.describe_scaling_activities(
            ServiceNamespace="sagemaker", ResourceId=target["ResourceId"]
        )["ScalingActivities"]
    )


def _tracking(target: dict[str, str], name: str, metric: str, value: float) -> None:
    boto3.client("application-autoscaling").put_scaling_policy(
        PolicyName=name, PolicyType="TargetTrackingScaling", **target,
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": value, "ScaleInCooldown": 0, "ScaleOutCooldown": 0,
            "CustomizedMetricSpecification": {**_metric(metric), "Statistic": "Average"},
        },
    )  # fmt: skip


def test_target_tracking_scales_in_only_when_every_policy_is_ready(
    aws: LocalAws, target: dict[str, str]
) -> None:
    """Application Auto Scaling User Guide, "How target tracking scaling for Application Auto
    Scaling works", Multiple scaling policies: "It will scale out the scalable target if any
    of the target tracking policies are ready for scale out, but will scale in only if all
    of the target tracking policies (with the scale-in portion enabled) are ready to scale
    in." Two policies at two instances: one far under its target (it alone would go to 1),
    the other at its target: nothing happens; once both are under, the variant goes to 1."""
    sm = boto3.client("sagemaker")
    _tracking(target, "idle", "Idle", 100.0)
    _tracking(target, "busy", "Busy", 100.0)
    now = time.time()
    _record(aws, "Idle", [10.0] * 15, now)
    _record(aws, "Busy", [100.0] * 15, now)
    before = len(_activities(target))
    _evaluate(aws, now)
    assert _serving(sm, _ENDPOINT) == ("InService", 2)
    assert len(_activities(target)) == before  # no scale-in was even started
    later = now + 15 * 60  # fifteen periods on, none of the first ones in its range
    _record(aws, "Idle", [10.0] * 15, later)
    _record(aws, "Busy", [20.0] * 15, later)
    _evaluate(aws, later)
    wait_for(lambda: _serving(sm, _ENDPOINT) == ("InService", 1), timeout_s=60)
    assert _activities(target)[0]["Description"] == "Setting desired instance count to 1."


def _step_policy(
    target: dict[str, str], name: str, steps: list[dict[str, Any]], **config: Any
) -> str:
    answer = boto3.client("application-autoscaling").put_scaling_policy(
        PolicyName=name, PolicyType="StepScaling", **target,
        StepScalingPolicyConfiguration={"AdjustmentType": "ExactCapacity", "Cooldown": 0,
                                        "StepAdjustments": steps, **config},
    )  # fmt: skip
    return str(answer["PolicyARN"])


def _low_alarm(
    name: str, metric: str, action: str, periods: int, threshold: float = 50.0, **extra: Any
) -> None:
    boto3.client("cloudwatch").put_metric_alarm(
        AlarmName=name, AlarmActions=[action], **_metric(metric), Statistic="Average",
        Period=60, EvaluationPeriods=periods, Threshold=threshold,
        ComparisonOperator="LessThanThreshold", **extra,
    )  # fmt: skip


#: below the alarm's threshold of 50: 20 or more under it, one instance; less, two
EXACT_STEPS = [
    {"MetricIntervalUpperBound": -20.0, "ScalingAdjustment": 1},
    {"MetricIntervalLowerBound": -20.0, "MetricIntervalUpperBound": 0.0, "ScalingAdjustment": 2},
]


@pytest.mark.parametrize(("aggregation", "capacity"), [("Minimum", 1), ("Average", 2), (None, 2)])
def test_step_scaling_aggregates_the_alarms_datapoints(
    aws: LocalAws, target: dict[str, str], aggregation: str | None, capacity: int
) -> None:
    """StepScalingPolicyConfiguration's MetricAggregationType (botocore's
    application-autoscaling model): "The aggregation type for the CloudWatch metrics. Valid
    values are Minimum, Maximum, and Average. If the aggregation type is null, the value is
    treated as Average"; a step adjustment is chosen by "the difference between the value of
    the aggregated CloudWatch metric and the breach threshold" (StepAdjustment). The alarm
    evaluates 10, 40 and 45 under its threshold of 50: their Minimum (10) is 40 under it,
    one instance; their Average (31.7) is 18.3 under it, two, as is the newest alone (45)."""
    sm = boto3.client("sagemaker")
    name = unique("aggregated")
    config = {"MetricAggregationType": aggregation} if aggregation else {}
    arn = _step_policy(target, "aggregated", EXACT_STEPS, **config)
    _low_alarm(name, name, arn, periods=3)
    try:
        now = time.time()
        _record(aws, name, [10.0, 40.0, 45.0], now)
        _evaluate(aws, now)
        state = boto3.client("cloudwatch").describe_alarms(AlarmNames=[name])
        assert state["MetricAlarms"][0]["StateValue"] == "ALARM"
        wait_for(lambda: _serving(sm, _ENDPOINT) == ("InService", capacity), timeout_s=60)
    finally:
        boto3.client("cloudwatch").delete_alarms(AlarmNames=[name])


def test_an_unknown_aggregation_type_is_refused(target: dict[str, str]) -> None:
    """MetricAggregationType is an enum (Average, Minimum, Maximum: botocore's model); the
    service refuses another value with ValidationException (moto took it, and the policy
    could never be evaluated)."""
    with pytest.raises(ClientError) as info:
        _step_policy(target, "median", EXACT_STEPS, MetricAggregationType="Median")
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert "Average, Minimum, Maximum" in info.value.response["Error"]["Message"]


def test_set_alarm_state_runs_the_alarms_scaling_policy_at_once(target: dict[str, str]) -> None:
    """SetAlarmState (botocore's cloudwatch model): "When the updated state differs from the
    previous value, the action configured for the appropriate state is invoked [...] If an
    alarm triggers EC2 Auto Scaling policies or application Auto Scaling policies, you must
    include information in the StateReasonData parameter to enable the policy to take the
    correct action", and the change "is typically only visible in the alarm's History tab
    [...] or through DescribeAlarmHistory". A user's SetAlarmState to ALARM with the
    datapoint 10 (40 under the threshold) scales the variant to one instance by the time the
    call returns, and the history shows the change. The alarm's metric is published by no
    one: no period's evaluation could have done it."""
    sm = boto3.client("sagemaker")
    cloudwatch = boto3.client("cloudwatch")
    name = unique("by-hand")
    arn = _step_policy(target, "by-hand", EXACT_STEPS)
    _low_alarm(name, name, arn, periods=1)
    try:
        cloudwatch.set_alarm_state(
            AlarmName=name, StateValue="ALARM", StateReason="testing the policy",
            StateReasonData=json.dumps({"version": "1.0", "recentDatapoints": [10.0]}),
        )  # fmt: skip
        activities = _activities(target)
        history = cloudwatch.describe_alarm_history(AlarmName=name, HistoryItemType="StateUpdate")
    finally:
        cloudwatch.delete_alarms(AlarmNames=[name])
    assert activities and activities[0]["Description"] == "Setting desired instance count to 1."
    assert f"monitor alarm {name} in state ALARM triggered policy by-hand" in activities[0]["Cause"]
    summaries = [item["HistorySummary"] for item in history["AlarmHistoryItems"]]
    assert summaries == ["Alarm updated from INSUFFICIENT_DATA to ALARM"]
    wait_for(lambda: _serving(sm, _ENDPOINT) == ("InService", 1), timeout_s=60)


def test_set_alarm_state_refuses_reason_data_that_is_not_json(target: dict[str, str]) -> None:
    """SetAlarmState's InvalidFormatFault (botocore's cloudwatch model): "Data was not
    syntactically valid JSON", code InvalidFormat, 400."""
    cloudwatch = boto3.client("cloudwatch")
    name = unique("not-json")
    _low_alarm(name, name, _step_policy(target, "not-json", EXACT_STEPS), periods=1)
    try:
        with pytest.raises(ClientError) as info:
            cloudwatch.set_alarm_state(
                AlarmName=name, StateValue="ALARM", StateReason="testing",
                StateReasonData="{not json",
            )  # fmt: skip
    finally:
        cloudwatch.delete_alarms(AlarmNames=[name])
    assert info.value.response["Error"]["Code"] == "InvalidFormat"
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_an_alarm_with_actions_disabled_scales_nothing(
    aws: LocalAws, target: dict[str, str]
) -> None:
    """PutMetricAlarm's ActionsEnabled (botocore's cloudwatch model): "Indicates whether
    actions should be executed during any changes to the alarm state of the alarm". The
    alarm goes to ALARM, its step scaling policy does not act."""
    sm = boto3.client("sagemaker")
    name = unique("disabled")
    arn = _step_policy(target, "disabled", EXACT_STEPS)
    _low_alarm(name, name, arn, periods=1, ActionsEnabled=False)
    before = len(_activities(target))
    try:
        now = time.time()
        _record(aws, name, [10.0], now)
        _evaluate(aws, now)
        state = boto3.client("cloudwatch").describe_alarms(AlarmNames=[name])
    finally:
        boto3.client("cloudwatch").delete_alarms(AlarmNames=[name])
    assert state["MetricAlarms"][0]["StateValue"] == "ALARM"
    assert len(_activities(target)) == before
    assert _serving(sm, _ENDPOINT) == ("InService", 2)


def test_the_saved_state_keeps_a_targets_suspended_scaling(
    target: dict[str, str], tmp_path: Path
) -> None:
    """RegisterScalableTarget's SuspendedState (botocore's application-autoscaling model:
    "Specifies whether the scaling activities for a scalable target are in a suspended
    state") is part of the target: the state ``--data`` saves and restores keeps it, so a
    restarted local AWS does not scale in a variant whose scale-in the user suspended."""
    aas = boto3.client("application-autoscaling")
    suspended = {"DynamicScalingInSuspended": True, "DynamicScalingOutSuspended": False,
                 "ScheduledScalingSuspended": False}  # fmt: skip
    aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2, SuspendedState=suspended)

    def client_for(service: str, region: str) -> Any:
        return boto3.client(service, region_name=region)

    state.save(client_for, tmp_path, ["us-east-1"])
    aas.deregister_scalable_target(**target)
    state.restore(client_for, tmp_path)
    (restored,) = aas.describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[target["ResourceId"]]
    )["ScalableTargets"]
    assert restored["SuspendedState"] == suspended


def test_deregistering_a_target_leaves_another_variants_policies(
    aws: LocalAws, endpoint_config: str
) -> None:
    """DeregisterScalableTarget deletes the target's own policies (PutScalingPolicy API
    reference: "Any scaling policies that were specified for the scalable target are
    deleted"), not those of a variant whose name its own begins with: deregistering
    ``AllTraffic`` leaves ``All``'s policy and its two alarms (moto matches ResourceId as a
    substring: ``endpoint/e/variant/All`` is inside ``endpoint/e/variant/AllTraffic``)."""
    sm = boto3.client("sagemaker")
    aas = boto3.client("application-autoscaling")
    model = sm.describe_endpoint_config(EndpointConfigName=endpoint_config)[
        "ProductionVariants"][0]["ModelName"]  # fmt: skip
    name = unique("variants")
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
        {"VariantName": variant, "ModelName": model, "InstanceType": "ml.g5.xlarge",
         "InitialInstanceCount": 1, "InitialVariantWeight": 1.0}
        for variant in ("All", "AllTraffic")
    ])  # fmt: skip
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    try:
        assert wait_endpoint(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
        targets = {
            variant: {"ServiceNamespace": "sagemaker", "ScalableDimension": SCALABLE,
                      "ResourceId": f"endpoint/{name}/variant/{variant}"}
            for variant in ("All", "AllTraffic")
        }  # fmt: skip
        for variant, target in targets.items():
            aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2)
            _tracking(target, f"track-{variant}", f"Load{variant}", 100.0)
        aas.deregister_scalable_target(**targets["AllTraffic"])
        (kept,) = aas.describe_scaling_policies(
            ServiceNamespace="sagemaker", ResourceId=targets["All"]["ResourceId"]
        )["ScalingPolicies"]
        aas.deregister_scalable_target(**targets["All"])
    finally:
        sm.delete_endpoint(EndpointName=name)
    assert kept["PolicyName"] == "track-All"
    assert len(kept["Alarms"]) == 2


def test_scaling_policies_come_ten_a_page(target: dict[str, str]) -> None:
    """DescribeScalingPolicies answers 10 policies a page when MaxResults is left out
    (botocore's application-autoscaling model: "This value can be between 1 and 10. The
    default value is 10"); moto answered 100. Eleven policies on the target: a first page
    of 10 with a NextToken, and a user's paginator reads all eleven in pages of 10 and 1."""
    aas = boto3.client("application-autoscaling")
    names = [f"paged-{n}" for n in range(11)]
    for name in names:
        _step_policy(target, name, EXACT_STEPS)
    query = {"ServiceNamespace": "sagemaker", "ResourceId": target["ResourceId"]}
    first = aas.describe_scaling_policies(**query)
    pages = list(aas.get_paginator("describe_scaling_policies").paginate(**query))
    assert len(first["ScalingPolicies"]) == 10 and first.get("NextToken")
    assert [len(page["ScalingPolicies"]) for page in pages] == [10, 1]
    read = [p["PolicyName"] for page in pages for p in page["ScalingPolicies"]]
    assert sorted(read) == sorted(names)


def test_a_policy_past_the_first_hundred_in_the_region_acts(
    aws: LocalAws, target: dict[str, str], endpoint_config: str
) -> None:
    """Every policy in the region is read, page after page: the local AWS read one page of
    DescribeScalingPolicies (moto's 100), so the 101st policy never acted. Two variants of
    another endpoint hold 50 step scaling policies each (the most a target may have:
    "Scaling policies per scalable target ... 50", Application Auto Scaling User Guide,
    Quotas); the module's variant gets the 101st, and a user's SetAlarmState on its alarm
    scales the variant to one instance by the time the call returns."""
    sm = boto3.client("sagemaker")
    aas = boto3.client("application-autoscaling")
    cloudwatch = boto3.client("cloudwatch")
    model = sm.describe_endpoint_config(EndpointConfigName=endpoint_config)[
        "ProductionVariants"][0]["ModelName"]  # fmt: skip
    name = unique("crowded")
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
        {"VariantName": variant, "ModelName": model, "InstanceType": "ml.g5.xlarge",
         "InitialInstanceCount": 1, "InitialVariantWeight": 1.0}
        for variant in ("A", "B")
    ])  # fmt: skip
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    alarm = unique("crowded")
    try:
        assert wait_endpoint(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
        for variant in ("A", "B"):
            other = {**target, "ResourceId": f"endpoint/{name}/variant/{variant}"}
            aas.register_scalable_target(**other, MinCapacity=1, MaxCapacity=2)
            for n in range(50):
                _step_policy(other, f"filler-{n}", EXACT_STEPS)
        _low_alarm(alarm, alarm, _step_policy(target, "the-101st", EXACT_STEPS), periods=1)
        cloudwatch.set_alarm_state(
            AlarmName=alarm, StateValue="ALARM", StateReason="testing the policy",
            StateReasonData=json.dumps({"version": "1.0", "recentDatapoints": [10.0]}),
        )  # fmt: skip
        activities = _activities(target)
    finally:
        cloudwatch.delete_alarms(AlarmNames=[alarm])
        sm.delete_endpoint(EndpointName=name)
    assert activities and activities[0]["Description"] == "Setting desired instance count to 1."
    assert "triggered policy the-101st" in activities[0]["Cause"]
    wait_for(lambda: _serving(sm, _ENDPOINT) == ("InService", 1), timeout_s=60)


def test_set_alarm_state_on_a_target_tracking_alarm_invokes_its_policy(
    target: dict[str, str],
) -> None:
    """Target tracking's alarms invoke its policy: "Application Auto Scaling creates and
    manages the CloudWatch alarms that invoke the scaling policy and calculates the scaling
    adjustment based on the metric and the target value" (Application Auto Scaling User
    Guide, "How target tracking scaling for Application Auto Scaling works"), and a user's
    SetAlarmState runs the new state's actions, the policy using the StateReasonData
    (SetAlarmState API reference). At two instances and a target of 100: the high alarm
    set to ALARM with the metric at 10 adds nothing (ceil(2 * 10 / 100) = 1 is no
    scale-out); the low alarm set to ALARM with it scales in to 1 by the time the call
    returns, the activity naming that alarm. Before, only step scaling policies ran."""
    sm = boto3.client("sagemaker")
    aas = boto3.client("application-autoscaling")
    cloudwatch = boto3.client("cloudwatch")
    _tracking(target, "tracked", unique("Tracked"), 100.0)
    (policy,) = aas.describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=target["ResourceId"], PolicyNames=["tracked"]
    )["ScalingPolicies"]
    alarms = {a["AlarmName"].split("-Alarm")[1][:3]: a["AlarmName"] for a in policy["Alarms"]}
    data = json.dumps({"version": "1.0", "recentDatapoints": [10.0]})
    before = len(_activities(target))
    cloudwatch.set_alarm_state(
        AlarmName=alarms["Hig"], StateValue="ALARM", StateReason="testing", StateReasonData=data
    )
    assert len(_activities(target)) == before
    cloudwatch.set_alarm_state(
        AlarmName=alarms["Low"], StateValue="ALARM", StateReason="testing", StateReasonData=data
    )
    activities = _activities(target)
    assert len(activities) == before + 1
    assert activities[0]["Description"] == "Setting desired instance count to 1."
    assert activities[0]["Cause"] == (
        f"monitor alarm {alarms['Low']} in state ALARM triggered policy tracked"
    )
    wait_for(lambda: _serving(sm, _ENDPOINT) == ("InService", 1), timeout_s=60)


def test_a_users_own_alarm_does_not_invoke_a_target_tracking_policy(
    target: dict[str, str],
) -> None:
    """A target tracking policy is invoked by the alarms Application Auto Scaling creates
    for it ("Application Auto Scaling creates and manages the CloudWatch alarms that
    trigger the scaling policy and calculates the scaling adjustment based on the metric
    and the target value"; "Do not create, edit, or delete the CloudWatch alarms that are
    used with a target tracking scaling policy": User Guide, Target tracking scaling
    policies); no AWS page says an alarm of the user's naming the policy's ARN invokes it,
    so the local AWS does not: a user's alarm on the policy, set to ALARM with a datapoint
    that its own low alarm would scale in on (10 against a target of 100), changes nothing.
    Step scaling policies are the ones users' alarms invoke."""
    sm = boto3.client("sagemaker")
    cloudwatch = boto3.client("cloudwatch")
    _tracking(target, "tracked-user", unique("TrackedUser"), 100.0)
    (policy,) = boto3.client("application-autoscaling").describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=target["ResourceId"],
        PolicyNames=["tracked-user"],
    )["ScalingPolicies"]  # fmt: skip
    name = unique("users-own")
    _low_alarm(name, name, policy["PolicyARN"], periods=1)
    before = len(_activities(target))
    try:
        cloudwatch.set_alarm_state(
            AlarmName=name, StateValue="ALARM", StateReason="testing",
            StateReasonData=json.dumps({"version": "1.0", "recentDatapoints": [10.0]}),
        )  # fmt: skip
    finally:
        cloudwatch.delete_alarms(AlarmNames=[name])
    assert len(_activities(target)) == before
    assert _serving(sm, _ENDPOINT) == ("InService", 2)


def test_every_alarm_in_alarm_invokes_its_step_policy(
    aws: LocalAws, target: dict[str, str]
) -> None:
    """Several alarms in ALARM on one step scaling policy each invoke it: "The policy will
    continue to respond to additional alarm breaches [...] Application Auto Scaling will
    evaluate all alarm breaches as they occur. A cooldown period is used to protect against
    over-scaling due to multiple alarm breaches" (Application Auto Scaling User Guide, Step
    scaling policies). Two alarms on the policy, both in ALARM: the first (threshold 50,
    datapoint 45: 5 under it) asks for two instances, what the variant has; the second
    (threshold 80, datapoint 10: 70 under it) for one, and the variant goes to one. Before,
    the policy acted on the first alarm DescribeAlarms listed, and nothing happened."""
    sm = boto3.client("sagemaker")
    cloudwatch = boto3.client("cloudwatch")
    arn = _step_policy(target, "two-alarms", EXACT_STEPS)
    first, second = unique("a-near"), unique("b-far")
    _low_alarm(first, first, arn, periods=1)
    _low_alarm(second, second, arn, periods=1, threshold=80.0)
    try:
        now = time.time()
        _record(aws, first, [45.0], now)
        _record(aws, second, [10.0], now)
        _evaluate(aws, now)
        states = cloudwatch.describe_alarms(AlarmNames=[first, second])["MetricAlarms"]
        activities = _activities(target)
    finally:
        cloudwatch.delete_alarms(AlarmNames=[first, second])
    assert [a["StateValue"] for a in states] == ["ALARM", "ALARM"]
    assert activities and activities[0]["Description"] == "Setting desired instance count to 1."
    assert f"monitor alarm {second} in state ALARM" in activities[0]["Cause"]
    wait_for(lambda: _serving(sm, _ENDPOINT) == ("InService", 1), timeout_s=60)
