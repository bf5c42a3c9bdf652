"""Endpoint logs: the group /aws/sagemaker/Endpoints/{name}, one stream per instance with
Triton's lines, GetLogEvents and FilterLogEvents, and a ModelError's LogStreamArn naming
the stream of the instance that failed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import ROLE, TRITON_IMAGE, unique, wait_for, wait_gone, wait_status

from mmelocal.localaws import LocalAws
from mmelocal.localaws.logs import restore_log_groups, save_log_groups
from mmelocal.testing.tiny_model import write_tarball

pytestmark = pytest.mark.triton


def test_triton_lines_reach_the_endpoints_log_group(
    local_aws_env: LocalAws, tmp_path: Path
) -> None:
    sm, s3, logs = boto3.client("sagemaker"), boto3.client("s3"), boto3.client("logs")
    runtime = boto3.client("sagemaker-runtime")
    bucket = unique("logs")
    s3.create_bucket(Bucket=bucket)
    s3.upload_file(str(write_tarball(tmp_path / "m.tar.gz", scale=2.0)), bucket, "m/model.tar.gz")
    model = unique("m")
    sm.create_model(
        ModelName=model,
        ExecutionRoleArn=ROLE,
        PrimaryContainer={
            "Image": TRITON_IMAGE,
            "ModelDataUrl": f"s3://{bucket}/m/",
            "Mode": "MultiModel",
        },
    )
    sm.create_endpoint_config(
        EndpointConfigName=model,
        ProductionVariants=[
            {
                "VariantName": "Blue",
                "ModelName": model,
                "InstanceType": "ml.g5.xlarge",
                "InitialInstanceCount": 2,
            }
        ],
    )
    name = unique("logs")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=model)
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
    group = f"/aws/sagemaker/Endpoints/{name}"
    streams = [
        s["logStreamName"] for s in logs.describe_log_streams(logGroupName=group)["logStreams"]
    ]
    assert len(streams) == 2 and all(s.startswith("Blue/i-") for s in streams), streams

    # a body the model refuses: Triton answers 400, the caller gets ModelError with the
    # stream of the instance that answered, which already holds that instance's lines
    with pytest.raises(ClientError) as info:
        runtime.invoke_endpoint(
            EndpointName=name,
            ContentType="application/json",
            Body=json.dumps(
                {"inputs": [{"name": "NOPE", "shape": [1], "datatype": "FP32", "data": [1]}]}
            ),
            TargetModel="model.tar.gz",
        )
    error = info.value.response["Error"]
    assert error["Code"] == "ModelError", error
    arn = info.value.response["LogStreamArn"]
    account = local_aws_env.account_id  # 123456789012 unless another local AWS claimed it
    prefix = f"arn:aws:logs:us-east-1:{account}:log-group:{group}:log-stream:"
    assert arn.startswith(prefix), arn
    stream = arn[len(prefix) :]
    assert stream in streams
    lines = [
        e["message"]
        for e in logs.get_log_events(logGroupName=group, logStreamName=stream)["events"]
    ]
    assert any("model.tar.gz" in line for line in lines), lines[-20:]

    # FilterLogEvents over the group finds the load line in that stream (and only where the
    # model was loaded)
    found = logs.filter_log_events(logGroupName=group, filterPattern="successfully")["events"]
    assert stream in {e["logStreamName"] for e in found}, found

    # the background shipper keeps up with lines written later, on every stream
    other = next(s for s in streams if s != stream)
    wait_for(
        lambda: logs.get_log_events(logGroupName=group, logStreamName=other)["events"],
        timeout_s=60,
    )
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)
    assert logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]  # kept, as in the cloud

    # --data keeps the groups: what is saved comes back, events and all
    saved = [g for g in save_log_groups(logs) if g["name"] == group]
    assert {s["name"] for s in saved[0]["streams"]} == set(streams)
    logs.delete_log_group(logGroupName=group)
    restore_log_groups(logs, saved)
    assert [g for g in save_log_groups(logs) if g["name"] == group] == saved


def test_a_clean_stop_with_an_endpoint_in_service_logs_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping a local AWS ships the endpoints' last lines while it still answers, then
    stops their Triton: nothing is left to ship afterwards, so no ERROR (the log shipper
    used to ship again after each fleet stopped, to a server already gone)."""
    from mmelocal.testing.local_aws_fixtures import point_environment_at

    with LocalAws(data_dir=tmp_path / "aws", persist=False) as aws:
        point_environment_at(monkeypatch, aws, tmp_path)
        sm, s3 = boto3.client("sagemaker"), boto3.client("s3")
        bucket = unique("stop")
        s3.create_bucket(Bucket=bucket)
        s3.upload_file(str(write_tarball(tmp_path / "m.tar.gz")), bucket, "m/model.tar.gz")
        model = unique("stop")
        sm.create_model(
            ModelName=model,
            ExecutionRoleArn=ROLE,
            PrimaryContainer={
                "Image": TRITON_IMAGE,
                "ModelDataUrl": f"s3://{bucket}/m/",
                "Mode": "MultiModel",
            },
        )
        sm.create_endpoint_config(EndpointConfigName=model, ProductionVariants=[{
            "VariantName": "AllTraffic", "ModelName": model, "InstanceType": "ml.g5.xlarge",
            "InitialInstanceCount": 1}])  # fmt: skip
        sm.create_endpoint(EndpointName=model, EndpointConfigName=model)
        assert wait_status(sm, model, leaving="Creating")["EndpointStatus"] == "InService"
        caplog.clear()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
