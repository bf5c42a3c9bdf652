"""Production variants on the local AWS: traffic shared by weight, TargetVariant, the
invoked variant named in the answer, UpdateEndpointWeightsAndCapacities, metrics kept per
variant (the weighted draw itself: tests/rules/test_variants_rules.py)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import ROLE, TRITON_IMAGE, unique, wait_for, wait_gone, wait_status
from shared_helpers import listed

from mmelocal.localaws import LocalAws
from mmelocal.testing.tiny_model import expected, request_json, write_tarball

X = np.arange(8, dtype=np.float32).reshape(2, 4)
BODY = json.dumps(request_json(X))
#: a false failure once in a million runs: the two-sided normal quantile of 1e-6
Z_ONE_IN_A_MILLION = 4.891638


def _variant_model(sm: Any, s3: Any, bucket: str, prefix: str, tmp_path: Path, scale: float) -> str:
    tarball = write_tarball(tmp_path / f"{prefix}.tar.gz", scale=scale)
    s3.upload_file(str(tarball), bucket, f"{prefix}/model.tar.gz")
    name = unique(prefix)
    container = {"Image": TRITON_IMAGE, "ModelDataUrl": f"s3://{bucket}/{prefix}/"}
    sm.create_model(
        ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer=container | {"Mode": "MultiModel"}
    )
    return name


def _invoke(runtime: Any, name: str, **extra: Any) -> tuple[str, float]:
    """(the invoked variant, the scale its model applied)."""
    answer = runtime.invoke_endpoint(
        EndpointName=name,
        ContentType="application/json",
        Body=BODY,
        TargetModel="model.tar.gz",
        **extra,
    )
    out = json.loads(answer["Body"].read())["outputs"][0]
    data = np.array(out["data"], dtype=np.float32).reshape(out["shape"])
    scale = float((data[0, 1] - 1.0) / X[0, 1])
    np.testing.assert_allclose(data, expected(X, scale), rtol=1e-6)
    return answer["InvokedProductionVariant"], scale


@pytest.mark.triton
def test_two_variants_share_traffic_by_weight(local_aws_env: LocalAws, tmp_path: Path) -> None:
    sm, s3 = boto3.client("sagemaker"), boto3.client("s3")
    runtime = boto3.client("sagemaker-runtime")
    bucket = unique("variants")
    s3.create_bucket(Bucket=bucket)
    model_a = _variant_model(sm, s3, bucket, "a", tmp_path, scale=2.0)
    model_b = _variant_model(sm, s3, bucket, "b", tmp_path, scale=3.0)
    config = unique("cfg")
    sm.create_endpoint_config(
        EndpointConfigName=config,
        ProductionVariants=[
            {
                "VariantName": "VariantA",
                "ModelName": model_a,
                "InstanceType": "ml.g5.xlarge",
                "InitialInstanceCount": 1,
                "InitialVariantWeight": 3.0,
            },
            {
                "VariantName": "VariantB",
                "ModelName": model_b,
                "InstanceType": "ml.g4dn.xlarge",
                "InitialInstanceCount": 1,
                "InitialVariantWeight": 1.0,
            },
        ],
    )
    name = unique("ab")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
    described = wait_status(sm, name, leaving="Creating")
    assert described["EndpointStatus"] == "InService", described
    assert [
        (v["VariantName"], v["CurrentWeight"], v["CurrentInstanceCount"])
        for v in described["ProductionVariants"]
    ] == [("VariantA", 3.0, 1), ("VariantB", 1.0, 1)]

    # each variant its own model: the answer's scale says which served, and the header agrees
    scales = {"VariantA": 2.0, "VariantB": 3.0}
    for variant in ("VariantB", "VariantA"):
        assert _invoke(runtime, name, TargetVariant=variant) == (variant, scales[variant])
    with pytest.raises(ClientError) as info:
        _invoke(runtime, name, TargetVariant="VariantC")
    error = info.value.response["Error"]
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Code"] == "ValidationError" and "VariantC" in error["Message"], error

    calls = 400
    counts: Counter[str] = Counter()
    for _ in range(calls):
        variant, scale = _invoke(runtime, name)
        assert scale == scales[variant]
        counts[variant] += 1
    share = 3.0 / 4.0
    margin = Z_ONE_IN_A_MILLION * math.sqrt(calls * share * (1 - share))
    assert abs(counts["VariantA"] - calls * share) <= margin, (counts, margin)
    assert counts["VariantA"] + counts["VariantB"] == calls

    # metrics are kept per variant: each variant's emulator counted what it served
    manager = local_aws_env.endpoints
    fleets = manager.variants("us-east-1", name) if manager is not None else None
    assert fleets is not None
    for served in fleets.variants:
        metrics = served.fleet.server.emulator.metrics
        assert metrics.labels == {"EndpointName": name, "VariantName": served.name}
        assert metrics.counters["Invocations"] == counts[served.name] + 1  # + the targeted call

    # weights change without a restart: VariantB at 0 gets nothing unless targeted
    sm.update_endpoint_weights_and_capacities(
        EndpointName=name,
        DesiredWeightsAndCapacities=[{"VariantName": "VariantB", "DesiredWeight": 0.0}],
    )
    described = wait_status(sm, name, leaving="Updating")
    assert described["EndpointStatus"] == "InService", described
    weights = {v["VariantName"]: v["CurrentWeight"] for v in described["ProductionVariants"]}
    assert weights == {"VariantA": 3.0, "VariantB": 0.0}
    assert {_invoke(runtime, name)[0] for _ in range(20)} == {"VariantA"}
    assert _invoke(runtime, name, TargetVariant="VariantB")[0] == "VariantB"

    for bad, reason in (
        ([{"VariantName": "VariantC", "DesiredWeight": 1.0}], 'name(s) "VariantC" is/are not'),
        (
            [{"VariantName": "VariantA", "DesiredWeight": 1.0}] * 2,
            'name "VariantA" was non-unique',
        ),
    ):
        with pytest.raises(ClientError) as info:
            sm.update_endpoint_weights_and_capacities(
                EndpointName=name, DesiredWeightsAndCapacities=bad
            )
        assert info.value.response["Error"]["Code"] == "ValidationException"
        assert reason in info.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as info:
        sm.update_endpoint_weights_and_capacities(
            EndpointName=unique("missing"),
            DesiredWeightsAndCapacities=[{"VariantName": "VariantA", "DesiredWeight": 1.0}],
        )
    assert "Could not find endpoint" in info.value.response["Error"]["Message"]

    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)


@pytest.mark.triton
def test_a_variant_changes_its_instance_count(local_aws_env: LocalAws, tmp_path: Path) -> None:
    sm, s3 = boto3.client("sagemaker"), boto3.client("s3")
    runtime = boto3.client("sagemaker-runtime")
    bucket = unique("resize")
    s3.create_bucket(Bucket=bucket)
    model = _variant_model(sm, s3, bucket, "m", tmp_path, scale=2.0)
    config = unique("cfg")
    sm.create_endpoint_config(
        EndpointConfigName=config,
        ProductionVariants=[
            {
                "VariantName": "AllTraffic",
                "ModelName": model,
                "InstanceType": "ml.g5.xlarge",
                "InitialInstanceCount": 1,
            }
        ],
    )
    name = unique("resize")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
    in_service = wait_status(sm, name, leaving="Creating")
    assert in_service["EndpointStatus"] == "InService"
    asked = in_service["LastModifiedTime"]
    sm.update_endpoint_weights_and_capacities(
        EndpointName=name,
        DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 2}],
    )
    # a Triton start takes far longer than these calls: the update is still under way
    with pytest.raises(ClientError) as info:
        sm.update_endpoint_weights_and_capacities(
            EndpointName=name,
            DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredWeight": 2.0}],
        )
    assert "Cannot update in-progress endpoint" in info.value.response["Error"]["Message"]
    during = sm.describe_endpoint(EndpointName=name)
    assert during["EndpointStatus"] == "Updating"
    assert during["ProductionVariants"][0]["DesiredInstanceCount"] == 2
    # ProductionVariantStatus (botocore's sagemaker model): "Updating: Updating capacity for
    # the production variant", with "The start time of the current status change"
    (status,) = during["ProductionVariants"][0]["VariantStatus"]
    assert status["Status"] == "Updating" and asked < status["StartTime"]
    assert _invoke(runtime, name) == ("AllTraffic", 2.0)  # the instance there serves meanwhile
    described = wait_status(sm, name, leaving="Updating")
    assert described["EndpointStatus"] == "InService", described
    variant = described["ProductionVariants"][0]
    assert (variant["CurrentInstanceCount"], variant["DesiredInstanceCount"]) == (2, 2)
    assert "VariantStatus" not in variant
    # LastModifiedTime, "when the endpoint was last modified" (botocore's sagemaker model),
    # moves with each change of status (moto's record kept the creation time)
    assert asked < during["LastModifiedTime"] < described["LastModifiedTime"]
    (summary,) = listed(sm, "list_endpoints", NameContains=name)
    assert summary["LastModifiedTime"] == described["LastModifiedTime"]
    manager = local_aws_env.endpoints
    fleet = manager.serving("us-east-1", name) if manager is not None else None
    assert fleet is not None and len(fleet.server.emulator.instances) == 2
    assert _invoke(runtime, name) == ("AllTraffic", 2.0)
    # the instance added has its own log stream (made by the next shipping round)
    logs, group = boto3.client("logs"), f"/aws/sagemaker/Endpoints/{name}"
    wait_for(
        lambda: len(logs.describe_log_streams(logGroupName=group)["logStreams"]) == 2,
        timeout_s=60,
    )
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)
