"""Endpoints on the local AWS: bad input answered as the service does, failures with their
reason, instance counts, UpdateEndpoint and DeleteEndpoint while calls are in flight."""

from __future__ import annotations

import contextlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import (
    ROLE,
    TRITON_IMAGE,
    model_and_config,
    tritonservers,
    unique,
    wait_for,
    wait_gone,
    wait_status,
)
from shared_helpers import gated_tritonserver, listed, local_aws_running

from mmelocal.facts.runtime_api import CONFIG_IN_USE
from mmelocal.localaws import LocalAws
from mmelocal.testing.tiny_model import expected, request_json, write_tarball

pytestmark = pytest.mark.triton
X = np.arange(8, dtype=np.float32).reshape(2, 4)
BODY = json.dumps(request_json(X))


def upload_models(tmp_path: Path, prefix: str, *, scale: float, compute_ms: float = 0.0) -> str:
    """A new bucket with ``model.tar.gz`` under ``prefix/``; the ``s3://`` prefix URL."""
    s3 = boto3.client("s3")
    bucket = unique("mme")
    s3.create_bucket(Bucket=bucket)
    tarball = write_tarball(tmp_path / f"{prefix}.tar.gz", scale=scale, compute_ms=compute_ms)
    s3.upload_file(str(tarball), bucket, f"{prefix}/model.tar.gz")
    return f"s3://{bucket}/{prefix}/"


def invoke(name: str, target: str | None = "model.tar.gz", runtime: Any = None) -> np.ndarray:
    """OUTPUT0 of one InvokeEndpoint call."""
    extra: dict[str, Any] = {"TargetModel": target} if target else {}
    runtime = runtime or boto3.client("sagemaker-runtime")
    answer = runtime.invoke_endpoint(
        EndpointName=name, ContentType="application/json", Body=BODY, **extra
    )
    out = json.loads(answer["Body"].read())["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def error_of(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    """The error code and message ``call(*args, **kwargs)`` raises."""
    with pytest.raises(ClientError) as info:
        call(*args, **kwargs)
    return info.value.response["Error"]["Code"], info.value.response["Error"]["Message"]


def test_bad_models_are_refused_as_the_service_does(
    local_aws_env: LocalAws, tmp_path: Path
) -> None:
    sm = boto3.client("sagemaker")
    url = upload_models(tmp_path, "models", scale=2.0)
    bucket = url.split("/")[2]
    cases = [
        ("SageMakerExecutionRole-name", url, "at 'executionRoleArn' failed to satisfy constraint"),
        (ROLE, f"s3://{bucket}-missing/models/", f"Could not find model data at s3://{bucket}-"),
        (ROLE, f"s3://{bucket}/empty/", f"Could not find model data at s3://{bucket}/empty/"),
    ]
    for role, data_url, reason in cases:
        name = unique("bad")
        container = {"Image": TRITON_IMAGE, "ModelDataUrl": data_url, "Mode": "MultiModel"}
        code, message = error_of(
            sm.create_model, ModelName=name, ExecutionRoleArn=role, PrimaryContainer=container
        )
        assert code == "ValidationException" and reason in message, (data_url, message)
        assert error_of(sm.describe_model, ModelName=name)[0] == "ValidationException"
    # the API reference's 32 KB of Environment keys and values (moto takes any size)
    environment = {f"K{i}": "v" * 1000 for i in range(33)}
    container = {"Image": TRITON_IMAGE, "ModelDataUrl": url, "Mode": "MultiModel"}
    code, message = error_of(
        sm.create_model,
        ModelName=unique("bad"),
        ExecutionRoleArn=ROLE,
        PrimaryContainer={**container, "Environment": environment},
    )
    assert code == "ValidationException" and "32 KB (32768 bytes)" in message, message
    # the tags of a resource that does not exist (deleted as an undeploy read them): moto
    # failed with a 500; the service answers ValidationException
    account = sm.meta.region_name, boto3.client("sts").get_caller_identity()["Account"]
    for kind in ("model", "endpoint-config", "endpoint"):
        arn = f"arn:aws:sagemaker:{account[0]}:{account[1]}:{kind}/{unique('gone')}"
        code, message = error_of(sm.list_tags, ResourceArn=arn)
        assert code == "ValidationException" and arn in message, message

    config = model_and_config(url)
    code, message = error_of(lambda: model_and_config(url.rstrip("/") + "/models/"))
    assert "Could not find model data" in message
    code, message = error_of(
        lambda: sm.create_endpoint_config(
            EndpointConfigName=unique("cfg"),
            ProductionVariants=[
                {
                    "VariantName": "v",
                    "ModelName": config,
                    "InstanceType": "ml.x9.huge",
                    "InitialInstanceCount": 1,
                }
            ],
        )
    )
    assert code == "ValidationException" and "enum value set" in message, message


def test_endpoint_name_instances_and_duplicates(local_aws_env: LocalAws, tmp_path: Path) -> None:
    sm = boto3.client("sagemaker")
    before = {p.pid for p in tritonservers()}
    environment = {"SAGEMAKER_TRITON_LOG_VERBOSE": "true"}
    url = upload_models(tmp_path, "models", scale=2.0)
    config = model_and_config(url, count=2, environment=environment)
    name = unique("ep")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
    code, message = error_of(sm.create_endpoint, EndpointName=name, EndpointConfigName=config)
    assert code == "ValidationException"
    arn = f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{name}"
    assert message == f'Cannot create already existing endpoint "{arn}".'
    described = wait_status(sm, name, leaving="Creating")
    assert described["EndpointStatus"] == "InService", described
    assert described["ProductionVariants"][0]["CurrentInstanceCount"] == 2
    mine = {p.pid for p in tritonservers()} - before
    assert len(mine) == 2  # InitialInstanceCount Triton instances, one endpoint
    fleet = local_aws_env.endpoints.serving("us-east-1", name) if local_aws_env.endpoints else None
    assert fleet is not None  # the model's Environment configures its Triton
    assert dict(fleet.server.emulator.config.sagemaker_env) == environment
    np.testing.assert_array_equal(invoke(name), expected(X, 2.0))
    creating = listed(sm, "list_endpoints", StatusEquals="Creating")
    assert name not in [s["EndpointName"] for s in creating]
    summaries = listed(sm, "list_endpoints", NameContains=name, StatusEquals="InService")
    assert [
        (s["EndpointName"], s["EndpointStatus"]) for s in summaries if s["EndpointName"] == name
    ] == [(name, "InService")]
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)
    assert not mine & {p.pid for p in tritonservers()}


def test_failures_name_their_cause(local_aws_env: LocalAws, tmp_path: Path) -> None:
    sm, s3 = boto3.client("sagemaker"), boto3.client("s3")
    url = upload_models(tmp_path, "models", scale=2.0)
    xgboost = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
    bad_image = model_and_config(url, image=xgboost)
    emptied = model_and_config(url)
    bucket, prefix = url.split("/")[2], url.split("/")[3]
    s3.delete_object(Bucket=bucket, Key=f"{prefix}/model.tar.gz")
    reasons = {}
    for config in (bad_image, emptied):
        name = unique("failing")
        sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
        described = wait_status(sm, name, leaving="Creating")
        assert described["EndpointStatus"] == "Failed"
        reasons[config] = described["FailureReason"]
        code, message = error_of(invoke, name)
        assert (code, message) == (
            "ValidationError",
            f"Endpoint {name} of account 123456789012 not found.",
        )
        sm.delete_endpoint(EndpointName=name)
        wait_gone(sm, name)
    assert "sagemaker-xgboost" in reasons[bad_image] and "Triton" in reasons[bad_image]
    assert reasons[emptied] == f"Could not find model data at {url}."


def test_triton_that_cannot_start_fails_the_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = "#!/bin/sh\necho 'tritonserver: cannot start here' >&2\nexit 3\n"
    with local_aws_running(broken, tmp_path, monkeypatch):
        sm = boto3.client("sagemaker")
        config = model_and_config(upload_models(tmp_path, "models", scale=2.0))
        name = unique("no-triton")
        sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
        described = wait_status(sm, name, leaving="Creating")
        assert described["EndpointStatus"] == "Failed"
        assert "tritonserver" in described["FailureReason"], described["FailureReason"]


def test_single_model_endpoint(local_aws_env: LocalAws, tmp_path: Path) -> None:
    sm = boto3.client("sagemaker")
    url = upload_models(tmp_path, "single", scale=4.0)
    config = model_and_config(url + "model.tar.gz", mode="SingleModel")
    name = unique("single")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
    np.testing.assert_array_equal(invoke(name, target=None), expected(X, 4.0))
    code, message = error_of(invoke, name)
    assert code == "ValidationError" and "is not a multi-model endpoint" in message
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)


def test_a_multi_model_prefix_without_its_trailing_slash_is_served(
    local_aws_env: LocalAws, tmp_path: Path
) -> None:
    """No AWS source refuses a MultiModel ``ModelDataUrl`` without a trailing ``/``: the
    developer guide calls it "the prefix in Amazon S3 where the model artifacts are
    located", the service "constructs the absolute path of the model by combining the
    prefix [...] with the relative path of the model" (Invoke a Multi-Model Endpoint), and
    the SageMaker Python SDK's MultiDataModel checks only that it starts with ``s3://``,
    passes it to CreateModel as given and puts each model at ``s3_path_join(prefix,
    name)``. ``s3://bucket/models`` serves ``models/model.tar.gz`` as ``model.tar.gz``;
    the local AWS refused it at CreateModel ("must end with '/'")."""
    sm = boto3.client("sagemaker")
    url = upload_models(tmp_path, "models", scale=3.0).rstrip("/")
    config = model_and_config(url)
    name = unique("noslash")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
    np.testing.assert_array_equal(invoke(name), expected(X, 3.0))
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)


def test_update_keeps_serving_and_delete_lets_calls_finish(
    local_aws_env: LocalAws, tmp_path: Path
) -> None:
    sm, runtime = boto3.client("sagemaker"), boto3.client("sagemaker-runtime")
    first = model_and_config(upload_models(tmp_path, "v1", scale=2.0, compute_ms=100))
    second = model_and_config(upload_models(tmp_path, "v2", scale=5.0, compute_ms=300))
    name = unique("swap")
    others = {p.pid for p in tritonservers()}  # endpoints other tests left running
    sm.create_endpoint(EndpointName=name, EndpointConfigName=first)
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
    v1_pids = {p.pid for p in tritonservers()} - others
    assert v1_pids  # this endpoint's own fleet
    # "To update an endpoint, you must create a new EndpointConfig" (UpdateEndpoint's API
    # reference): the service refuses the config the endpoint serves
    code, message = error_of(sm.update_endpoint, EndpointName=name, EndpointConfigName=first)
    assert (code, message) == ("ValidationException", CONFIG_IN_USE.format(config=first))
    assert sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "InService"

    scales: list[float] = []  # x[0, 1] is 1: the answer there is scale + 1
    failures: list[BaseException] = []
    stop = threading.Event()

    def caller() -> None:
        while not stop.is_set():
            try:
                scales.append(float(invoke(name, runtime=runtime)[0, 1]) - 1.0)
            except BaseException as exc:
                failures.append(exc)

    # the callers stop however the block ends (a failed assertion must not leave them
    # calling, and the pool's exit waiting for them, forever)
    with ThreadPoolExecutor(2) as pool, contextlib.ExitStack() as stopping:
        stopping.callback(stop.set)
        calls = [pool.submit(caller) for _ in range(2)]
        wait_for(lambda: len(scales) >= 2)
        code, message = error_of(sm.update_endpoint, EndpointName=name, EndpointConfigName="nope")
        assert code == "ValidationException" and "Could not find endpoint configuration" in message
        sm.update_endpoint(EndpointName=name, EndpointConfigName=second)
        assert sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "Updating"
        code, message = error_of(sm.update_endpoint, EndpointName=name, EndpointConfigName=second)
        assert "Cannot update in-progress endpoint" in message
        described = wait_status(sm, name, leaving="Updating")
        assert described["EndpointStatus"] == "InService"
        assert described["EndpointConfigName"] == second
        seen = len(scales)
        wait_for(lambda: len(scales) >= seen + 4)
        stop.set()
        for call in calls:
            call.result()
    assert failures == []
    assert scales[0] == 2.0 and scales[-1] == 5.0 and set(scales) == {2.0, 5.0}, scales
    wait_for(lambda: not v1_pids & {p.pid for p in tritonservers()})  # the old fleet stopped
    v2_pids = {p.pid for p in tritonservers()} - v1_pids - others

    # delete while calls are in flight: they finish, later calls are refused
    manager = local_aws_env.endpoints
    fleet = manager.serving("us-east-1", name) if manager is not None else None
    assert fleet is not None
    with ThreadPoolExecutor(3) as pool:
        inflight = [pool.submit(invoke, name, "model.tar.gz", runtime) for _ in range(3)]
        wait_for(lambda: fleet.inflight >= 3, interval_s=0.005)
        sm.delete_endpoint(EndpointName=name)
        code, message = error_of(invoke, name, runtime=runtime)
        assert code == "ValidationError" and "not found" in message
        for answered in inflight:
            np.testing.assert_array_equal(answered.result(), expected(X, 5.0))
    wait_gone(sm, name)
    assert v2_pids and not v2_pids & {p.pid for p in tritonservers()}


@pytest.mark.mmelocal_gpu
def test_the_instance_type_picks_the_cards_memory(local_aws_env: LocalAws, tmp_path: Path) -> None:
    sm = boto3.client("sagemaker")
    url = upload_models(tmp_path, "models", scale=2.0)
    name = unique("t4")
    config = model_and_config(url, instance_type="ml.g4dn.xlarge")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
    manager = local_aws_env.endpoints
    fleet = manager.serving("us-east-1", name) if manager is not None else None
    assert fleet is not None
    probe = fleet.server.emulator.instances[0].probe
    reading = probe.read()
    assert probe.kind == "gpu"
    assert reading.total_bytes <= 15360 * 2**20  # a T4's memory, whatever card runs it
    np.testing.assert_array_equal(invoke(name), expected(X, 2.0))
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)


def test_a_failed_endpoint_can_only_be_deleted(local_aws_env: LocalAws, tmp_path: Path) -> None:
    """DescribeEndpoint's EndpointStatus (botocore's model): "Failed: ... DeleteEndpoint is
    the only operation that can be performed on a failed endpoint"; the service answers
    an update with ValidationException "Cannot update failed endpoint"."""
    sm = boto3.client("sagemaker")
    url = upload_models(tmp_path, "models", scale=2.0)
    xgboost = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
    failing, good = model_and_config(url, image=xgboost), model_and_config(url)
    name = unique("failed")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=failing)
    described = wait_status(sm, name, leaving="Creating")
    assert described["EndpointStatus"] == "Failed"
    refused = f'Cannot update failed endpoint "{described["EndpointArn"]}".'
    assert error_of(sm.update_endpoint, EndpointName=name, EndpointConfigName=good) == (
        "ValidationException",
        refused,
    )
    change = [{"VariantName": "AllTraffic", "DesiredWeight": 2.0}]
    assert error_of(
        sm.update_endpoint_weights_and_capacities,
        EndpointName=name,
        DesiredWeightsAndCapacities=change,
    ) == ("ValidationException", refused)
    described = sm.describe_endpoint(EndpointName=name)
    assert (described["EndpointStatus"], described["EndpointConfigName"]) == ("Failed", failing)
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)


def test_an_endpoint_in_progress_cannot_be_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeleteEndpoint on an endpoint still Creating (or Updating) is refused with
    ValidationException "Cannot update in-progress endpoint" (SageMaker's operator for
    Kubernetes names that answer DeleteEndpointInProgressMessagePrefix); once the endpoint
    has left Creating it is deleted. The Triton here waits for the test's gate, then fails."""
    gate = tmp_path / "gate"
    with local_aws_running(gated_tritonserver(gate), tmp_path, monkeypatch):
        sm = boto3.client("sagemaker")
        config = model_and_config(upload_models(tmp_path, "models", scale=2.0))
        name = unique("held")
        sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
        try:
            described = sm.describe_endpoint(EndpointName=name)
            assert described["EndpointStatus"] == "Creating"
            assert error_of(sm.delete_endpoint, EndpointName=name) == (
                "ValidationException",
                f'Cannot update in-progress endpoint "{described["EndpointArn"]}".',
            )
            assert sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "Creating"
        finally:
            gate.touch()
        assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "Failed"
        sm.delete_endpoint(EndpointName=name)
        wait_gone(sm, name)


def test_a_deployment_in_progress_is_summarised_until_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DescribeEndpoint's PendingDeploymentSummary "is only returned when the endpoint is
    creating or updating with a new endpoint configuration" (botocore's sagemaker model;
    PendingProductionVariantSummary: "when an endpoint is creating or updating with the
    CreateEndpoint or UpdateEndpoint operations"): the config being deployed, when the
    deployment began, and each of its variants as asked, Creating since then; gone once
    the endpoint has left Creating (here Failed: the Triton waits for the gate, then
    fails). UpdateEndpoint's: ``test_retained_properties.py``."""
    gate = tmp_path / "gate"
    with local_aws_running(gated_tritonserver(gate), tmp_path, monkeypatch):
        sm = boto3.client("sagemaker")
        config = model_and_config(upload_models(tmp_path, "models", scale=2.0), count=2)
        name = unique("pending")
        sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
        try:
            described = sm.describe_endpoint(EndpointName=name)
        finally:
            gate.touch()
        assert described["EndpointStatus"] == "Creating"
        pending = described["PendingDeploymentSummary"]
        start = pending["StartTime"]
        assert pending == {
            "EndpointConfigName": config,
            "StartTime": start,
            "ProductionVariants": [
                {
                    "VariantName": "AllTraffic",
                    "DesiredInstanceCount": 2,
                    "DesiredWeight": 1.0,
                    "InstanceType": "ml.g5.xlarge",
                    "VariantStatus": [{"Status": "Creating", "StartTime": start}],
                }
            ],
        }
        assert start == described["LastModifiedTime"]  # the deployment made it Creating
        failed = wait_status(sm, name, leaving="Creating")
        assert failed["EndpointStatus"] == "Failed"
        assert "PendingDeploymentSummary" not in failed
