"""The fleet over time on a fast clock: a user's autoscaling script (target tracking scales
out under load and back in, no call fails), CloudWatch's sums equal the emulator's
counters, an alarm on ModelLatency goes to ALARM and back, and the service's answers to
what it refuses; a scale-in while a model loads loses nothing, a delete after scaling leaves
nothing running."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import model_and_config, tritonservers, unique, wait_for, wait_gone
from localaws_helpers import wait_status as wait_endpoint

from mmelocal.localaws import LocalAws
from mmelocal.testing.local_aws_fixtures import point_environment_at
from mmelocal.testing.tiny_model import request_json, write_tarball

pytestmark = pytest.mark.triton
#: one CloudWatch minute = 0.25 s: target tracking's high alarm needs 0.75 s, its low one 3.75 s
SCALE = 240.0
BODY = json.dumps(request_json(np.arange(8, dtype=np.float32).reshape(2, 4)))
#: the tiny model's compute time: ModelLatency >= this under load
COMPUTE_MS = 4.0
SCALABLE = "sagemaker:variant:DesiredInstanceCount"


@pytest.fixture(scope="module")
def fast_aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAws]:
    """A local AWS on the fast clock, in the environment of a user's script."""
    data = tmp_path_factory.mktemp("fast-aws")
    options: dict[str, Any] = {"persist": False, "memory_budget_bytes": 2 * 1024**3}
    with (
        LocalAws(data_dir=data, time_scale=SCALE, **options) as aws,
        pytest.MonkeyPatch.context() as env,
    ):
        point_environment_at(env, aws, tmp_path_factory.mktemp("no-aws-files"))
        yield aws


@pytest.fixture(scope="module")
def endpoint_config(fast_aws: LocalAws, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An MME endpoint config with two tarballs (``model.tar.gz`` and a cold
    ``other.tar.gz``)."""
    work = tmp_path_factory.mktemp("models")
    s3 = boto3.client("s3")
    bucket = unique("scale")
    s3.create_bucket(Bucket=bucket)
    for key, scale in (("model.tar.gz", 2.0), ("other.tar.gz", 3.0)):
        tarball = write_tarball(work / key, scale=scale, compute_ms=COMPUTE_MS)
        s3.upload_file(str(tarball), bucket, f"models/{key}")
    return model_and_config(f"s3://{bucket}/models/")


_ENDPOINT = unique("ep")


@pytest.fixture
def endpoint(endpoint_config: str) -> str:
    """The module's endpoint in the state every test starts from, whatever ran before:
    InService at one instance with no scalable target (created again where a test deleted
    it), so each test holds alone and in any order."""
    sm = boto3.client("sagemaker")
    aas = boto3.client("application-autoscaling")
    name = _ENDPOINT
    target = {"ServiceNamespace": "sagemaker", "ScalableDimension": SCALABLE,
              "ResourceId": f"endpoint/{name}/variant/AllTraffic"}  # fmt: skip
    try:
        sm.describe_endpoint(EndpointName=name)
    except ClientError:
        sm.create_endpoint(EndpointName=name, EndpointConfigName=endpoint_config)
    if aas.describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[target["ResourceId"]]
    )["ScalableTargets"]:
        aas.deregister_scalable_target(**target)
    wait_endpoint(sm, name, leaving="Creating")  # out of Creating before its counts are read
    wait_for(lambda: _counts(sm, name, [])[0] == "InService", timeout_s=120)
    status = sm.describe_endpoint(EndpointName=name)
    if status["ProductionVariants"][0]["CurrentInstanceCount"] != 1:
        sm.update_endpoint_weights_and_capacities(
            EndpointName=name,
            DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 1}],
        )
    wait_for(lambda: _counts(sm, name, []) == ("InService", 1, 1), timeout_s=120)
    return name


class Load:
    """Threads calling InvokeEndpoint until stopped; counts answers and failures."""

    def __init__(self, name: str, threads: int = 2) -> None:
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(name,)) for _ in range(threads)]

    def _run(self, name: str) -> None:
        runtime = boto3.client("sagemaker-runtime")
        while not self._stop.is_set():
            try:
                runtime.invoke_endpoint(
                    EndpointName=name, TargetModel="model.tar.gz",
                    ContentType="application/json", Body=BODY,
                )["Body"].read()  # fmt: skip
            except ClientError as exc:
                with self._lock:
                    self.failures.append(str(exc))
            else:
                with self._lock:
                    self.ok += 1

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def _counts(sm: Any, name: str, seen: list[tuple[str, int, int]]) -> tuple[str, int, int]:
    described = sm.describe_endpoint(EndpointName=name)
    variant = described["ProductionVariants"][0]
    row = (
        described["EndpointStatus"],
        variant["CurrentInstanceCount"],
        variant["DesiredInstanceCount"],
    )
    seen.append(row)
    return row


def test_latency_alarm_goes_to_alarm_under_load_and_back(fast_aws: LocalAws, endpoint: str) -> None:
    cloudwatch = boto3.client("cloudwatch")
    aas = boto3.client("application-autoscaling")
    alarm = unique("latency")
    # step scaling on the alarm: one more instance while latency is over the threshold
    resource = f"endpoint/{endpoint}/variant/AllTraffic"
    target = {"ServiceNamespace": "sagemaker", "ResourceId": resource,
              "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}  # fmt: skip
    aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2)
    step = aas.put_scaling_policy(
        PolicyName="latency-step", PolicyType="StepScaling", **target,
        StepScalingPolicyConfiguration={
            "AdjustmentType": "ChangeInCapacity", "Cooldown": 60,
            "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1}],
        },
    )  # fmt: skip
    cloudwatch.put_metric_alarm(
        AlarmActions=[step["PolicyARN"]],
        AlarmName=alarm,
        Namespace="AWS/SageMaker",
        MetricName="ModelLatency",
        Dimensions=[
            {"Name": "EndpointName", "Value": endpoint},
            {"Name": "VariantName", "Value": "AllTraffic"},
        ],
        Statistic="Average",
        Period=60,
        EvaluationPeriods=2,
        Threshold=COMPUTE_MS * 1e3 / 2,  # microseconds
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )

    def state() -> str:
        return str(cloudwatch.describe_alarms(AlarmNames=[alarm])["MetricAlarms"][0]["StateValue"])

    assert state() == "INSUFFICIENT_DATA"  # as the service starts an alarm (moto: OK)
    with Load(endpoint) as load:
        wait_for(lambda: state() == "ALARM", timeout_s=60)
    assert not load.failures
    wait_for(lambda: state() == "OK", timeout_s=60)
    history = cloudwatch.describe_alarm_history(AlarmName=alarm, HistoryItemType="StateUpdate")
    summaries = [item["HistorySummary"] for item in reversed(history["AlarmHistoryItems"])]
    # from INSUFFICIENT_DATA (to OK first where a period passed before the load's data), to
    # ALARM under the load, and back to OK after it, in that order
    assert summaries[0].startswith("Alarm updated from INSUFFICIENT_DATA to "), summaries
    assert summaries[-1] == "Alarm updated from ALARM to OK", summaries
    assert any(s.endswith(" to ALARM") for s in summaries[:-1]), summaries
    # the percentile CloudWatch computes (moto has none): p50 of the load's ModelLatency

    def latency() -> dict[str, Any] | None:
        # CloudWatch rounds StartTime down to the minute: from a whole minute 10 to 11
        # minutes ago, one period of 11 minutes holds everything up to now
        start = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)).replace(
            second=0, microsecond=0
        )
        stats = cloudwatch.get_metric_statistics(
            Namespace="AWS/SageMaker", MetricName="ModelLatency",
            Dimensions=[{"Name": "EndpointName", "Value": endpoint},
                        {"Name": "VariantName", "Value": "AllTraffic"}],
            StartTime=start, EndTime=start + dt.timedelta(minutes=11), Period=660,
            ExtendedStatistics=["p50"], Statistics=["SampleCount"],
        )  # fmt: skip
        if not stats["Datapoints"]:
            return None  # nothing published yet: the publisher's next tick sends it
        (point,) = stats["Datapoints"]
        return point if point["SampleCount"] >= load.ok else None

    # every answered call is counted, once the publisher's next tick has sent the last ones
    point = wait_for(latency, timeout_s=60, what=f"ModelLatency samples for {load.ok} calls")
    assert point["ExtendedStatistics"]["p50"] >= COMPUTE_MS * 1e3
    # the alarm's action scaled the variant out
    activity = aas.describe_scaling_activities(  # newest first (earlier tests' come after)
        ServiceNamespace="sagemaker", ResourceId=target["ResourceId"]
    )["ScalingActivities"][0]
    assert activity["Description"] == "Setting desired instance count to 2."
    assert (
        f"monitor alarm {alarm} in state ALARM triggered policy latency-step" in activity["Cause"]
    )
    # back to one instance the way a user would: a MaxCapacity below the count
    aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=1)
    sm = boto3.client("sagemaker")
    wait_for(lambda: _counts(sm, endpoint, [])[:2] == ("InService", 1), timeout_s=60)
    aas.deregister_scalable_target(**target)


def test_target_tracking_scales_out_and_in_with_no_failed_call(
    fast_aws: LocalAws, endpoint: str
) -> None:
    sm = boto3.client("sagemaker")
    aas = boto3.client("application-autoscaling")
    resource = f"endpoint/{endpoint}/variant/AllTraffic"
    dimension = "sagemaker:variant:DesiredInstanceCount"
    aas.register_scalable_target(
        ServiceNamespace="sagemaker", ResourceId=resource, ScalableDimension=dimension,
        MinCapacity=1, MaxCapacity=2,
    )  # fmt: skip
    policy = aas.put_scaling_policy(
        PolicyName="invocations", ServiceNamespace="sagemaker", ResourceId=resource,
        ScalableDimension=dimension, PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 5.0,
            "PredefinedMetricSpecification": {
                "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
            },
            "ScaleOutCooldown": 60, "ScaleInCooldown": 60,
        },
    )  # fmt: skip
    names = [a["AlarmName"] for a in policy["Alarms"]]
    assert any("-AlarmHigh-" in n for n in names) and any("-AlarmLow-" in n for n in names)
    seen: list[tuple[str, int, int]] = []
    with Load(endpoint) as load:
        wait_for(lambda: _counts(sm, endpoint, seen)[:2] == ("InService", 2), timeout_s=90)
    wait_for(lambda: _counts(sm, endpoint, seen)[:2] == ("InService", 1), timeout_s=90)
    assert load.ok > 0 and not load.failures
    # Updating while the new instance starts (a drained idle instance stops in milliseconds:
    # the scale-in shows in the activities below)
    assert seen[0] == ("InService", 1, 1) and ("Updating", 1, 2) in seen
    activities = aas.describe_scaling_activities(ServiceNamespace="sagemaker", ResourceId=resource)
    listed = activities["ScalingActivities"]
    assert [a["Description"] for a in listed[:2]] == [
        "Setting desired instance count to 1.",
        "Setting desired instance count to 2.",
    ]
    assert "-AlarmLow-" in listed[0]["Cause"] and "-AlarmHigh-" in listed[1]["Cause"]
    assert {a["StatusCode"] for a in listed[:2]} == {"Successful"}
    aas.deregister_scalable_target(
        ServiceNamespace="sagemaker", ResourceId=resource, ScalableDimension=dimension
    )
    # deregistering deletes the target's policies and their alarms, as the service does
    assert not boto3.client("cloudwatch").describe_alarms(AlarmNames=names)["MetricAlarms"]
    assert not aas.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=resource)[
        "ScalingPolicies"
    ]

    # CloudWatch's Invocations sum over the run is the emulator's own counter
    fleet = fast_aws.endpoints.serving("us-east-1", endpoint)  # type: ignore[union-attr]
    assert fleet is not None and fast_aws.clock is not None
    assert fast_aws.clock.wait_ticks(2, timeout_s=30)
    counted = fleet.server.emulator.metrics.counters["Invocations"]
    assert _cloudwatch_sum(endpoint) == counted


def _cloudwatch_sum(endpoint: str) -> float:
    end = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    stats = boto3.client("cloudwatch").get_metric_statistics(
        Namespace="AWS/SageMaker", MetricName="Invocations",
        Dimensions=[{"Name": "EndpointName", "Value": endpoint},
                    {"Name": "VariantName", "Value": "AllTraffic"}],
        StartTime=end - dt.timedelta(hours=1), EndTime=end, Period=60, Statistics=["Sum"],
    )  # fmt: skip
    return float(sum(p["Sum"] for p in stats["Datapoints"]))


def test_the_services_answers_to_what_it_refuses(
    fast_aws: LocalAws, endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    aas = boto3.client("application-autoscaling")
    dimension = "sagemaker:variant:DesiredInstanceCount"
    cases = [
        (f"endpoint/{unique('missing')}/variant/AllTraffic", 1, 2, "ValidationException"),
        (f"endpoint/{endpoint}/variant/Missing", 1, 2, "ValidationException"),
        (f"endpoint/{endpoint}/variant/AllTraffic", 3, 2, "ValidationException"),
    ]
    for resource, low, high, code in cases:
        with pytest.raises(ClientError) as info:
            aas.register_scalable_target(
                ServiceNamespace="sagemaker", ResourceId=resource, ScalableDimension=dimension,
                MinCapacity=low, MaxCapacity=high,
            )  # fmt: skip
        assert info.value.response["Error"]["Code"] == code
    with pytest.raises(ClientError) as info:
        aas.put_scaling_policy(
            PolicyName="orphan", ServiceNamespace="sagemaker",
            ResourceId=f"endpoint/{endpoint}/variant/AllTraffic", ScalableDimension=dimension,
            PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration={"TargetValue": 5.0},
        )  # fmt: skip
    assert info.value.response["Error"]["Code"] == "ObjectNotFoundException"
    assert "No scalable target registered" in info.value.response["Error"]["Message"]
    # no GPU here: a policy on GPUUtilization never fires, and the local AWS says so
    target = {"ServiceNamespace": "sagemaker", "ScalableDimension": dimension,
              "ResourceId": f"endpoint/{endpoint}/variant/AllTraffic"}  # fmt: skip
    aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2)
    with caplog.at_level(logging.WARNING, logger="mmelocal.localaws.scaling"):
        gpu = aas.put_scaling_policy(
            PolicyName="gpu", PolicyType="TargetTrackingScaling", **target,
            TargetTrackingScalingPolicyConfiguration={"TargetValue": 60.0,
                "CustomizedMetricSpecification": {
                    "Namespace": "/aws/sagemaker/Endpoints", "MetricName": "GPUUtilization",
                    "Dimensions": [{"Name": "EndpointName", "Value": endpoint},
                                   {"Name": "VariantName", "Value": "AllTraffic"}],
                    "Statistic": "Average"}},
        )  # fmt: skip
    assert len(gpu["Alarms"]) == 2
    (warning,) = [r.getMessage() for r in caplog.records if "GPUUtilization" in r.getMessage()]
    assert "never fires" in warning and "CPUUtilization" in warning
    aas.deregister_scalable_target(**target)
    # a variant registered for autoscaling keeps its instance type through an update
    sm = boto3.client("sagemaker")
    current = sm.describe_endpoint_config(
        EndpointConfigName=sm.describe_endpoint(EndpointName=endpoint)["EndpointConfigName"]
    )["ProductionVariants"][0]
    bigger = unique("cfg")
    sm.create_endpoint_config(
        EndpointConfigName=bigger,
        ProductionVariants=[{**current, "InstanceType": "ml.g5.12xlarge"}],
    )
    aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2)
    with pytest.raises(ClientError) as info:
        sm.update_endpoint(EndpointName=endpoint, EndpointConfigName=bigger)
    assert info.value.response["Error"]["Code"] == "ValidationException"
    assert "Deregister the scalable target first" in info.value.response["Error"]["Message"]
    aas.deregister_scalable_target(**target)
    # an operation moto lacks answers the service's error shape, not an HTML 500
    with pytest.raises(ClientError) as info:
        boto3.client("cloudwatch").describe_anomaly_detectors()
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert info.value.response["Error"]["Code"] == "UnknownOperationException"


def test_target_tracking_alarms_start_with_insufficient_data(
    fast_aws: LocalAws, endpoint: str
) -> None:
    """The alarms a target tracking policy creates are new alarms: PutMetricAlarm's API
    reference, "When this operation creates an alarm, the alarm state is immediately set to
    INSUFFICIENT_DATA". On a metric nothing publishes they stay there (moto: OK)."""
    aas = boto3.client("application-autoscaling")
    target = {"ServiceNamespace": "sagemaker", "ScalableDimension": SCALABLE,
              "ResourceId": f"endpoint/{endpoint}/variant/AllTraffic"}  # fmt: skip
    aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2)
    try:
        policy = aas.put_scaling_policy(
            PolicyName="unpublished", PolicyType="TargetTrackingScaling", **target,
            TargetTrackingScalingPolicyConfiguration={"TargetValue": 5.0,
                "CustomizedMetricSpecification": {
                    "Namespace": "mmelocal/tests", "MetricName": "NeverPublished",
                    "Dimensions": [{"Name": "EndpointName", "Value": endpoint}],
                    "Statistic": "Average"}},
        )  # fmt: skip
        names = [alarm["AlarmName"] for alarm in policy["Alarms"]]
        alarms = boto3.client("cloudwatch").describe_alarms(AlarmNames=names)["MetricAlarms"]
    finally:
        aas.deregister_scalable_target(**target)
    assert len(alarms) == 2
    assert {alarm["StateValue"] for alarm in alarms} == {"INSUFFICIENT_DATA"}


def test_scaling_activities_page_through_boto3s_paginator(
    fast_aws: LocalAws, endpoint: str
) -> None:
    """Four resizes (a range without the count: the autoscaler resizes into it) read in
    pages of three: each activity once, newest first, as one page of them all (earlier
    tests' activities on this endpoint come after these four)."""
    sm = boto3.client("sagemaker")
    aas = boto3.client("application-autoscaling")
    resource = f"endpoint/{endpoint}/variant/AllTraffic"
    target = {"ServiceNamespace": "sagemaker", "ResourceId": resource,
              "ScalableDimension": SCALABLE}  # fmt: skip

    def serving(capacity: int) -> bool:
        return _counts(sm, endpoint, [])[:2] == ("InService", capacity)

    try:
        for capacity in (2, 1, 2, 1):
            aas.register_scalable_target(**target, MinCapacity=capacity, MaxCapacity=capacity)
            wait_for(lambda c=capacity: serving(c), timeout_s=120, what=f"{capacity} instances")
    finally:
        aas.deregister_scalable_target(**target)
    query = {"ServiceNamespace": "sagemaker", "ResourceId": resource}
    paginator = aas.get_paginator("describe_scaling_activities")
    pages = list(paginator.paginate(**query, PaginationConfig={"PageSize": 3}))
    whole = aas.describe_scaling_activities(**query)
    assert "NextToken" not in whole and "NextToken" not in pages[-1]
    listed = whole["ScalingActivities"]
    assert [len(page["ScalingActivities"]) for page in pages] == [
        min(3, len(listed) - first) for first in range(0, len(listed), 3)
    ]
    activities = [activity for page in pages for activity in page["ScalingActivities"]]
    assert activities == listed
    assert [a["Description"] for a in activities[:4]] == [
        f"Setting desired instance count to {capacity}." for capacity in (1, 2, 1, 2)
    ]
    ids = [a["ActivityId"] for a in activities]
    assert len(set(ids)) == len(ids)
    starts = [a["StartTime"] for a in activities]
    assert starts == sorted(starts, reverse=True)


def test_scale_in_while_a_model_loads_serves_its_caller(fast_aws: LocalAws, endpoint: str) -> None:
    fleet = fast_aws.endpoints.serving("us-east-1", endpoint)  # type: ignore[union-attr]
    assert fleet is not None
    emulator = fleet.server.emulator
    assert fleet.scale_to(2, timeout_s=120) == 2
    newest = emulator.instances[-1]
    answers: list[Any] = []

    def cold_call() -> None:
        runtime = boto3.client("sagemaker-runtime")
        try:
            answers.append(
                runtime.invoke_endpoint(
                    EndpointName=endpoint, TargetModel="other.tar.gz",
                    ContentType="application/json", Body=BODY,
                )["Body"].read()
            )  # fmt: skip
        except ClientError as exc:
            answers.append(exc)

    async def hold(lock: asyncio.Lock) -> None:
        await lock.acquire()

    async def let_go(lock: asyncio.Lock) -> None:
        lock.release()

    # the new instance's load lock held: the cold load waits there until we let it go
    gate = newest.state.load_lock
    fleet.server.call(hold(gate))
    caller = threading.Thread(target=cold_call)
    caller.start()
    scaled: list[int] = []
    scaling = threading.Thread(target=lambda: scaled.append(fleet.scale_to(1, timeout_s=120)))
    try:
        # the cold model goes to the instance with the most free memory: the new, empty one
        wait_for(lambda: "other.tar.gz" in newest.models, timeout_s=60)
        scaling.start()
        wait_for(lambda: newest in emulator.draining, timeout_s=60)
        # the scale-in took it out of routing while its load is under way, its caller waits
        assert newest.models["other.tar.gz"].state == "loading"
        assert not answers and newest.up
    finally:
        fleet.server.call(let_go(gate))
    scaling.join()
    caller.join()
    assert scaled == [1]
    assert newest not in emulator.instances and not newest.up
    (answer,) = answers
    assert isinstance(answer, bytes), answer
    assert json.loads(answer)["outputs"][0]["name"] == "OUTPUT0"


def test_delete_waits_out_scaling_and_leaves_nothing_running(
    fast_aws: LocalAws, endpoint: str
) -> None:
    """The service refuses to delete an endpoint Updating ("Cannot update in-progress
    endpoint"; the refusal itself: test_one_change_at_a_time.py): a script deletes once the
    scale-out is over, and then no Triton runs and the scalable target is gone."""
    sm = boto3.client("sagemaker")
    aas = boto3.client("application-autoscaling")
    resource = f"endpoint/{endpoint}/variant/AllTraffic"
    # a minimum above the current count scales out at the next period
    aas.register_scalable_target(
        ServiceNamespace="sagemaker", ResourceId=resource,
        ScalableDimension="sagemaker:variant:DesiredInstanceCount", MinCapacity=3, MaxCapacity=3,
    )  # fmt: skip
    seen: list[tuple[str, int, int]] = []
    wait_for(lambda: _counts(sm, endpoint, seen) == ("InService", 3, 3), timeout_s=120)
    assert any(row[0] == "Updating" for row in seen), seen  # the resize was seen
    assert _ours(endpoint)  # the check below can see this endpoint's Tritons
    sm.delete_endpoint(EndpointName=endpoint)
    wait_gone(sm, endpoint)
    assert fast_aws.autoscaler is not None
    fast_aws.autoscaler.wait(timeout_s=120)
    assert not _ours(endpoint)
    assert not aas.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[resource])[
        "ScalableTargets"
    ]
    activity = aas.describe_scaling_activities(ServiceNamespace="sagemaker", ResourceId=resource)
    newest = activity["ScalingActivities"][0]
    assert newest["Description"] == "Setting desired instance count to 3."
    assert newest["StatusCode"] == "Successful", newest


def _ours(endpoint: str) -> list[Any]:
    return [p for p in tritonservers() if endpoint in " ".join(p.cmdline())]


def test_invocations_sum_at_the_real_clock(
    local_aws_env: LocalAws, bucket: str, tmp_path: Path
) -> None:
    """At N = 1 the same publisher runs every real minute: one period driven by hand. The
    shared clock may publish the same calls meanwhile: whichever tick reads them, each is
    counted once (one tick at a time, per-fleet cursors). A gauge is a sample per tick,
    so the minute of both ticks may hold two samples of it."""
    s3 = boto3.client("s3")
    s3.upload_file(str(write_tarball(tmp_path / "m.tar.gz")), bucket, "m/model.tar.gz")
    sm = boto3.client("sagemaker")
    name = unique("ep")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=model_and_config(f"s3://{bucket}/m/"))
    try:
        assert wait_endpoint(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
        runtime = boto3.client("sagemaker-runtime")
        for _ in range(7):
            runtime.invoke_endpoint(
                EndpointName=name, TargetModel="model.tar.gz",
                ContentType="application/json", Body=BODY,
            )  # fmt: skip
        clock = local_aws_env.clock
        assert clock is not None and clock.time_scale == 1.0
        now = time.time()
        clock.tick(now - 60, now)
        assert _cloudwatch_sum(name) == 7
        end = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
        loaded = boto3.client("cloudwatch").get_metric_statistics(
            Namespace="/aws/sagemaker/Endpoints", MetricName="LoadedModelCount",
            Dimensions=[{"Name": "EndpointName", "Value": name},
                        {"Name": "VariantName", "Value": "AllTraffic"}],
            StartTime=end - dt.timedelta(hours=1), EndTime=end, Period=60,
            Statistics=["Minimum", "Maximum", "SampleCount"],
        )["Datapoints"]  # fmt: skip
        # published: one instance, one model. A minute may hold two samples (the clock's
        # own tick and the one by hand above); the clock's own tick may come before the
        # first call loaded the model and says 0 then; the latest minute says 1
        points = sorted(loaded, key=lambda p: p["Timestamp"])
        assert points and points[-1]["Maximum"] == 1.0, points
        assert all({p["Minimum"], p["Maximum"]} <= {0.0, 1.0} for p in points), points
    finally:
        sm.delete_endpoint(EndpointName=name)
