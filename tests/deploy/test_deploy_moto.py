"""``mmelocal deploy`` against the local AWS on loopback (S3, SageMaker whose endpoints serve,
autoscaling)."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest
from deploy_helpers import (
    INSTANCE_TYPE,
    REGION,
    ROLE,
    cli_args,
    keys,
    run,
    write_reference_tarball,
)
from shared_helpers import (
    delete_endpoint,
    gated_tritonserver,
    local_aws_running,
    unique,
    wait_for,
    wait_gone,
)

from mmelocal.aws.session import connect
from mmelocal.deploy.deployer import apply_plan, make_plan, undeploy
from mmelocal.deploy.plan import DeployOptions, DeployPlan
from mmelocal.errors import DeployError

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
RESOURCE_ID = "endpoint/{}/variant/AllTraffic"


def options(store: Path, bucket: str, name: str, **extra: Any) -> DeployOptions:
    fields: dict[str, Any] = {
        "store": store,
        "endpoint_name": name,
        "s3_uri": f"s3://{bucket}/models",
        "role_arn": ROLE,
        "instance_type": INSTANCE_TYPE,
        "max_instances": 3,
        "poll_s": 0.05,
        "timeout_s": 30,
    }
    fields.update(extra)
    return DeployOptions(**fields)


def deploy(opts: DeployOptions) -> DeployPlan:
    clients = connect()
    plan = make_plan(opts, clients)
    assert apply_plan(plan, clients, options=opts) == "InService"
    return plan


def actions(plan: DeployPlan) -> dict[str, str]:
    return {f"{s.service}:{s.operation}": s.action for s in plan.steps}


def models_named(part: str) -> list[str]:
    """SageMaker models whose name contains ``part``."""
    pages = boto3.client("sagemaker").get_paginator("list_models").paginate(NameContains=part)
    return sorted(m["ModelName"] for page in pages for m in page["Models"])


def configs_named(part: str) -> list[str]:
    """Endpoint configs whose name contains ``part``."""
    pages = (
        boto3.client("sagemaker").get_paginator("list_endpoint_configs").paginate(NameContains=part)
    )
    return sorted(c["EndpointConfigName"] for page in pages for c in page["EndpointConfigs"])


def test_dry_run_changes_nothing(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str, tmp_path: Path
) -> None:
    plan_file = tmp_path / "plan.json"
    code, text = run(
        capsys, *cli_args(store, bucket, endpoint_name, "--dry-run", "--json", str(plan_file))
    )
    assert code == 0, text
    assert "deploy plan" in text and "dry run: nothing was changed" in text
    plan = json.loads(plan_file.read_text())["plan"]
    by_key = {o["key"]: o for o in plan["objects"]}
    assert {k: o["action"] for k, o in by_key.items()} == {
        "models/model-0.tar.gz": "upload",
        "models/model-1.tar.gz": "copy",  # the hard link: a server-side copy
        "models/model-2.tar.gz": "upload",
        "models/team/model-3.tar.gz": "upload",
    }
    assert by_key["models/model-1.tar.gz"]["source_key"] == "models/model-0.tar.gz"
    assert [(s["operation"], s["action"]) for s in plan["steps"]] == [
        ("CreateModel", "create"),
        ("CreateEndpointConfig", "create"),
        ("CreateEndpoint", "create"),
        ("RegisterScalableTarget", "put"),
        ("PutScalingPolicy", "put"),
    ]
    assert plan["steps"][0]["params"]["PrimaryContainer"]["ModelDataUrl"] == (
        f"s3://{bucket}/models/"
    )
    assert keys(bucket) == {}
    sm = boto3.client("sagemaker")
    assert models_named(endpoint_name) == configs_named(endpoint_name) == []
    with pytest.raises(sm.exceptions.ClientError):
        sm.describe_endpoint(EndpointName=endpoint_name)


def test_capacity_result_picks_the_instance_type(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str, tmp_path: Path
) -> None:
    from mmelocal.bench.capacity.projection import load_gpus, project
    from mmelocal.bench.results import write_result

    capacity = tmp_path / "capacity.json"
    write_result(
        project(per_model_bytes=4 * 2**30, baseline_bytes=2**30, gpus=load_gpus()), capacity
    )
    args = cli_args(store, bucket, endpoint_name, "--dry-run", "--json", str(tmp_path / "p.json"))
    args = [a for a in args if a not in ("--instance-type", INSTANCE_TYPE)]
    code, text = run(capsys, *args, "--capacity", str(capacity))  # hot set: the 4 tarballs
    assert code == 0, text
    assert "instance type ml.g5.xlarge: 4 models fit" in text
    plan = json.loads((tmp_path / "p.json").read_text())["plan"]
    config = next(s for s in plan["steps"] if s["operation"] == "CreateEndpointConfig")
    assert config["params"]["ProductionVariants"][0]["InstanceType"] == "ml.g5.xlarge"


def test_sizing_options_without_what_they_need_are_refused(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str, tmp_path: Path
) -> None:
    """--hot-models sizes the instance by --capacity, and --capacity picks the instance type
    --instance-type names: --hot-models without --capacity, or --capacity beside
    --instance-type, was dropped without a word and the plan went on with another type."""
    capacity = tmp_path / "capacity.json"
    capacity.write_text("{}")  # never read: refused before
    plan_file = tmp_path / "p.json"
    base = cli_args(store, bucket, endpoint_name, "--dry-run", "--json", str(plan_file))
    no_type = [a for a in base if a not in ("--instance-type", INSTANCE_TYPE)]
    cases = [
        ([*no_type, "--hot-models", "3"], "--hot-models is only read with --capacity"),
        ([*base, "--hot-models", "3"], "--hot-models is only read with --capacity"),
        ([*base, "--capacity", str(capacity)], "give --instance-type or --capacity, not both"),
    ]
    for args, reason in cases:
        code, text = run(capsys, *args)
        assert code == 2 and reason in text and "Traceback" not in text, (args, text)
        assert not plan_file.exists()


def test_options_the_deploy_would_not_read_are_refused(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str, tmp_path: Path
) -> None:
    """--target-gpu-utilization sets the scaling policy, which is not made without
    autoscaling (--max-instances equal to --instance-count); --image replaces the image
    --triton-version picks. Either was dropped without a word."""
    plan_file = tmp_path / "p.json"
    base = cli_args(store, bucket, endpoint_name, "--dry-run", "--json", str(plan_file))
    at = base.index("--max-instances")
    one = [*base[:at], "--max-instances", "1", *base[at + 2 :]]
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/triton:1"
    cases = [
        ([*one, "--target-gpu-utilization", "40"], "--target-gpu-utilization is only read"),
        ([*base, "--image", image, "--triton-version", "24.09"], "--image or --triton-version"),
        # --prune-unrecorded prunes: named by its options, not DeployOptions' field names
        ([*base, "--no-prune", "--prune-unrecorded"], "--prune-unrecorded prunes: drop --no-prune"),
    ]
    for args, reason in cases:
        code, text = run(capsys, *args)
        assert code == 2 and reason in text and "Traceback" not in text, (args, text)
        assert "prune=" not in text and text.rstrip().splitlines()[-1].startswith("Error: ")
        assert not plan_file.exists()
    code, text = run(capsys, *base, "--target-gpu-utilization", "40", "--image", image)
    assert code == 0, text
    policy = json.loads(plan_file.read_text())["plan"]["steps"][-1]["params"]
    assert policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 40.0


def test_deploy_creates_objects_model_endpoint_and_scaling(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str
) -> None:
    env = ("--env", "SAGEMAKER_TRITON_LOG_VERBOSE=true")
    code, text = run(capsys, *cli_args(store, bucket, endpoint_name, *env))
    assert code == 0, text
    assert f"deployed {endpoint_name}: InService" in text
    s3 = boto3.client("s3")
    objects = keys(bucket)
    assert sorted(objects) == [
        "models/model-0.tar.gz",
        "models/model-1.tar.gz",
        "models/model-2.tar.gz",
        "models/team/model-3.tar.gz",
    ]
    for key in objects:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert body == (store / key.removeprefix("models/")).read_bytes()
    assert objects["models/model-1.tar.gz"] == objects["models/model-0.tar.gz"]

    sm = boto3.client("sagemaker")
    endpoint = sm.describe_endpoint(EndpointName=endpoint_name)
    assert endpoint["EndpointStatus"] == "InService"
    config = sm.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    variant = config["ProductionVariants"][0]
    assert (variant["VariantName"], variant["InstanceType"], variant["InitialInstanceCount"]) == (
        "AllTraffic",
        INSTANCE_TYPE,
        1,
    )
    model = sm.describe_model(ModelName=variant["ModelName"])
    assert model["PrimaryContainer"] == {
        "Image": IMAGE,
        "Mode": "MultiModel",
        "ModelDataUrl": f"s3://{bucket}/models/",
        "Environment": {"SAGEMAKER_TRITON_LOG_VERBOSE": "true"},
    }
    assert model["ExecutionRoleArn"] == ROLE
    for arn in (model["ModelArn"], config["EndpointConfigArn"], endpoint["EndpointArn"]):
        assert {"Key": "mmelocal:endpoint", "Value": endpoint_name} in sm.list_tags(
            ResourceArn=arn
        )["Tags"]

    aas = boto3.client("application-autoscaling")
    rid = RESOURCE_ID.format(endpoint_name)
    target = aas.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[rid])
    assert [(t["MinCapacity"], t["MaxCapacity"]) for t in target["ScalableTargets"]] == [(1, 3)]
    policies = aas.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=rid)
    (policy,) = policies["ScalingPolicies"]
    assert policy["PolicyType"] == "TargetTrackingScaling"
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["TargetValue"] == 60.0
    assert tracking["CustomizedMetricSpecification"] == {
        "MetricName": "GPUUtilization",
        "Namespace": "/aws/sagemaker/Endpoints",
        "Dimensions": [
            {"Name": "EndpointName", "Value": endpoint_name},
            {"Name": "VariantName", "Value": "AllTraffic"},
        ],
        "Statistic": "Average",
        "Unit": "Percent",
    }


def test_second_deploy_uploads_only_the_changed_tarball_and_updates(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    opts = options(store, bucket, endpoint_name)
    first = deploy(opts)
    sm = boto3.client("sagemaker")
    first_config = sm.describe_endpoint(EndpointName=endpoint_name)["EndpointConfigName"]

    write_reference_tarball(store / "model-2.tar.gz", scale=5.0)
    second = make_plan(opts, connect())
    assert {o.key: o.action for o in second.objects} == {
        "models/model-0.tar.gz": "skip",
        "models/model-1.tar.gz": "skip",
        "models/model-2.tar.gz": "upload",
        "models/team/model-3.tar.gz": "skip",
    }
    assert actions(second) == {
        "sagemaker:CreateModel": "reuse",
        "sagemaker:CreateEndpointConfig": "create",
        "sagemaker:UpdateEndpoint": "update",
        "application-autoscaling:RegisterScalableTarget": "put",
        "application-autoscaling:PutScalingPolicy": "put",
        "sagemaker:DeleteEndpointConfig": "delete",  # the first config, once InService
    }
    assert second.steps[0].resource == first.steps[0].resource  # same model
    assert apply_plan(second, connect(), options=opts) == "InService"
    endpoint = sm.describe_endpoint(EndpointName=endpoint_name)
    assert endpoint["EndpointConfigName"] == second.steps[1].resource != first_config
    body = boto3.client("s3").get_object(Bucket=bucket, Key="models/model-2.tar.gz")["Body"]
    assert body.read() == (store / "model-2.tar.gz").read_bytes()
    targets = boto3.client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[RESOURCE_ID.format(endpoint_name)]
    )
    assert len(targets["ScalableTargets"]) == 1

    assert second.steps[2].params["RetainAllVariantProperties"] is True  # keep scaled count

    third = make_plan(opts, connect())
    assert {o.action for o in third.objects} == {"skip"}
    assert actions(third)["sagemaker:CreateEndpointConfig"] == "reuse"
    assert actions(third)["sagemaker:UpdateEndpoint"] == "reuse"

    # another instance type: SageMaker needs the scaling target gone during the update
    bigger = dataclasses.replace(opts, instance_type="ml.g4dn.2xlarge")
    fourth = make_plan(bigger, connect())
    assert [s.operation for s in fourth.steps if s.action != "reuse"] == [
        "CreateEndpointConfig",
        "DeregisterScalableTarget",
        "UpdateEndpoint",
        "RegisterScalableTarget",
        "PutScalingPolicy",
        "DeleteEndpointConfig",
    ]
    assert "RetainAllVariantProperties" not in fourth.steps[3].params
    assert apply_plan(fourth, connect(), options=bigger) == "InService"
    config = sm.describe_endpoint_config(
        EndpointConfigName=sm.describe_endpoint(EndpointName=endpoint_name)["EndpointConfigName"]
    )
    assert config["ProductionVariants"][0]["InstanceType"] == "ml.g4dn.2xlarge"


def test_a_new_instance_count_reaches_the_endpoint(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    """An update that keeps the variant's properties keeps its instance count: the count
    the user asks for now is dropped from what is kept, autoscaling or not."""
    deploy(options(store, bucket, endpoint_name, max_instances=1))
    more = options(store, bucket, endpoint_name, instance_count=2, max_instances=2)
    plan = deploy(more)
    assert actions(plan)["sagemaker:UpdateEndpoint"] == "update"
    variant = boto3.client("sagemaker").describe_endpoint(EndpointName=endpoint_name)[
        "ProductionVariants"
    ][0]
    assert variant["DesiredInstanceCount"] == 2


def test_autoscaling_turned_off_is_deregistered(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    """A redeploy without autoscaling (--max-instances = --instance-count) leaves no
    scaling target behind to go on scaling the endpoint up to the old maximum."""
    deploy(options(store, bucket, endpoint_name))
    plan = deploy(options(store, bucket, endpoint_name, max_instances=1))
    assert actions(plan)["application-autoscaling:DeregisterScalableTarget"] == "delete"
    targets = boto3.client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[RESOURCE_ID.format(endpoint_name)]
    )
    assert targets["ScalableTargets"] == []


def test_an_update_that_rolled_back_fails_the_deploy(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    """A failed UpdateEndpoint rolls back: the endpoint is InService again, on its old
    config, with a FailureReason. That is no successful deploy."""
    first = deploy(options(store, bucket, endpoint_name, max_instances=1))
    broken = options(
        store, bucket, endpoint_name, max_instances=1,
        image="123456789012.dkr.ecr.us-east-1.amazonaws.com/not-triton:1",
    )  # fmt: skip
    clients = connect()
    plan = make_plan(broken, clients)
    assert actions(plan)["sagemaker:UpdateEndpoint"] == "update"
    with pytest.raises(DeployError, match=r"rolled back.*not-triton"):
        apply_plan(plan, clients, options=broken)
    endpoint = boto3.client("sagemaker").describe_endpoint(EndpointName=endpoint_name)
    assert endpoint["EndpointConfigName"] == first.steps[1].resource


def test_no_wait_sends_the_plan_but_skips_what_needs_in_service(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    no_wait = options(store, bucket, endpoint_name, wait=False)
    clients = connect()
    plan = make_plan(no_wait, clients)
    # waiting is the deployer's, not a plan step: the plan is the same either way
    assert plan.steps == make_plan(options(store, bucket, endpoint_name), clients).steps
    assert [s.operation for s in plan.steps if s.needs_in_service] == [
        "RegisterScalableTarget",
        "PutScalingPolicy",
    ]
    assert apply_plan(plan, clients, options=no_wait) == "not waited"
    boto3.client("sagemaker").describe_endpoint(EndpointName=endpoint_name)
    targets = boto3.client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[RESOURCE_ID.format(endpoint_name)]
    )
    assert targets["ScalableTargets"] == []


def test_interrupted_deploy_resumes(store: Path, bucket: str, endpoint_name: str) -> None:
    opts = options(store, bucket, endpoint_name)
    clients = connect()
    plan = make_plan(opts, clients)
    # interrupted after two objects and the model
    apply_plan(
        dataclasses.replace(plan, objects=plan.objects[:2], steps=plan.steps[:1]),
        clients,
        options=opts,
    )
    resumed = make_plan(opts, clients)
    assert [o.action for o in resumed.objects] == ["skip", "skip", "upload", "upload"]
    assert actions(resumed)["sagemaker:CreateModel"] == "reuse"
    assert actions(resumed)["sagemaker:CreateEndpoint"] == "create"
    assert apply_plan(resumed, clients, options=opts) == "InService"
    assert len(keys(bucket)) == 4


def test_undeploy_cleans_an_interrupted_deploy(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    opts = options(store, bucket, endpoint_name)
    clients = connect()
    plan = make_plan(opts, clients)
    apply_plan(dataclasses.replace(plan, steps=plan.steps[:2]), clients, options=opts)
    deleted = undeploy(clients, endpoint_name, delete_artifacts=True)
    assert deleted == [
        f"endpoint config {plan.steps[1].resource}",
        f"4 objects under s3://{bucket}/models/",
        f"model {plan.steps[0].resource}",
    ]
    assert keys(bucket) == {} and models_named(endpoint_name) == []


class _RefusingDeletes:
    """An S3 client whose DeleteObjects is denied (the role lacks s3:DeleteObject)."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s3, name)

    def delete_objects(self, **_: Any) -> Any:
        from botocore.exceptions import ClientError

        error = {"Code": "AccessDenied", "Message": "Access Denied"}
        raise ClientError({"Error": error}, "DeleteObjects")


def test_undeploy_again_deletes_the_artifacts_it_could_not(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    """The error says to run undeploy --delete-artifacts again: the second run still
    knows the prefix (it is read from the models, which must outlive the objects)."""
    opts = options(store, bucket, endpoint_name)
    clients = connect()
    plan = make_plan(opts, clients)
    apply_plan(dataclasses.replace(plan, steps=plan.steps[:2]), clients, options=opts)
    denied = dataclasses.replace(clients, s3=_RefusingDeletes(clients.s3))
    with pytest.raises(DeployError, match="AccessDenied"):
        undeploy(denied, endpoint_name, delete_artifacts=True)
    assert len(keys(bucket)) == 4
    deleted = undeploy(connect(), endpoint_name, delete_artifacts=True)
    assert f"4 objects under s3://{bucket}/models/" in deleted
    assert keys(bucket) == {} and models_named(endpoint_name) == []


def test_undeploy_removes_what_it_created_and_nothing_else(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    sm = boto3.client("sagemaker")
    s3 = boto3.client("s3")
    # someone else's resources, named so that a NameContains filter would find them
    mine_too = f"{endpoint_name}-manual"
    s3.upload_file(str(store / "model-0.tar.gz"), bucket, "x/model-0.tar.gz")  # CreateModel checks
    sm.create_model(
        ModelName=mine_too,
        ExecutionRoleArn=ROLE,
        PrimaryContainer={
            "Image": IMAGE,
            "Mode": "MultiModel",
            "ModelDataUrl": f"s3://{bucket}/x/",
        },
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": mine_too,
        "InstanceType": INSTANCE_TYPE,
        "InitialInstanceCount": 1,
    }
    sm.create_endpoint_config(EndpointConfigName=mine_too, ProductionVariants=[variant])
    sm.create_endpoint(EndpointName=f"other-{endpoint_name}", EndpointConfigName=mine_too)
    s3.put_object(Bucket=bucket, Key="models/README.txt", Body=b"not mmelocal's")

    opts = options(store, bucket, endpoint_name)
    deploy(opts)
    write_reference_tarball(store / "model-2.tar.gz", scale=5.0)
    no_wait = dataclasses.replace(opts, wait=False)  # the first config is not deleted then
    clients = connect()
    assert apply_plan(make_plan(no_wait, clients), clients, options=no_wait) == "not waited"

    deleted = undeploy(connect(), endpoint_name, delete_artifacts=True)
    assert "endpoint " + endpoint_name in deleted
    assert sum(d.startswith("endpoint config ") for d in deleted) == 2
    assert sum(d.startswith("model ") for d in deleted) == 1
    assert "scaling policy mmelocal-gpu-utilization" in deleted
    wait_gone(sm, endpoint_name)  # as the service does: Deleting while its instances stop
    assert models_named(endpoint_name) == configs_named(endpoint_name) == [mine_too]
    assert sm.describe_endpoint(EndpointName=f"other-{endpoint_name}")["EndpointStatus"]
    aas = boto3.client("application-autoscaling")
    rid = RESOURCE_ID.format(endpoint_name)
    assert (
        aas.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[rid])[
            "ScalableTargets"
        ]
        == []
    )
    assert list(keys(bucket)) == ["models/README.txt", "x/model-0.tar.gz"]
    assert undeploy(connect(), endpoint_name) == []  # a second undeploy finds nothing


def test_foreign_endpoint_is_never_touched(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str
) -> None:
    sm = boto3.client("sagemaker")
    model = f"hand-{endpoint_name}"
    boto3.client("s3").upload_file(str(store / "model-0.tar.gz"), bucket, "x/model.tar.gz")
    sm.create_model(
        ModelName=model,
        ExecutionRoleArn=ROLE,
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": f"s3://{bucket}/x/model.tar.gz"},
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": model,
        "InstanceType": INSTANCE_TYPE,
        "InitialInstanceCount": 1,
    }
    sm.create_endpoint_config(EndpointConfigName=model, ProductionVariants=[variant])
    sm.create_endpoint(EndpointName=endpoint_name, EndpointConfigName=model)

    code, text = run(capsys, *cli_args(store, bucket, endpoint_name))
    assert code == 2 and "was not created by mmelocal" in text, text
    assert list(keys(bucket)) == ["x/model.tar.gz"]  # refused at plan time: nothing uploaded
    with pytest.raises(DeployError, match="was not created by mmelocal"):
        undeploy(connect(), endpoint_name)
    endpoint = sm.describe_endpoint(EndpointName=endpoint_name)
    assert endpoint["EndpointConfigName"] == model


def test_bad_setups_fail_in_one_line_before_any_change(
    capsys: pytest.CaptureFixture[str],
    store: Path,
    bucket: str,
    endpoint_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    boto3.client("s3", region_name="eu-west-1").create_bucket(
        Bucket=f"{bucket}-eu", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    base = cli_args(store, bucket, endpoint_name)
    cases: list[tuple[list[str], str]] = [
        ([*base[:6], "--role", "SageMakerExecution", *base[8:]], "must be an IAM role ARN"),
        ([*base[:6], "--role", "arn:aws:iam::12345:role/x", *base[8:]], "must be an IAM role ARN"),
        ([*base[:4], "--s3-uri", "bucket/models", *base[6:]], "must look like s3://bucket/"),
        ([*base[:4], "--s3-uri", f"s3://{bucket}-eu/m/", *base[6:]], "is in eu-west-1"),
        ([*base[:4], "--s3-uri", f"s3://{bucket}-none/m/", *base[6:]], "does not exist"),
        ([*base, "--region", "ap-southeast-7"], "no SageMaker Triton image known"),
        ([*base, "--triton-version", "19.01"], "not in the image table"),
        ([*base, "--env", "NOEQUALS"], "KEY=VALUE"),
    ]
    for args, reason in cases:
        code, text = run(capsys, *args)
        assert code == 2 and "Traceback" not in text, (args, text)
        assert reason in text, (args, text)
    assert keys(bucket) == {}
    assert models_named(endpoint_name) == []

    monkeypatch.delenv("AWS_DEFAULT_REGION")
    code, text = run(capsys, *base)
    assert code == 2 and "no AWS region: pass --region" in text, text
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    for args in (base, ["undeploy", endpoint_name], ["smoke", endpoint_name]):
        code, text = run(capsys, *args)
        assert code == 2 and "no AWS credentials found" in text, text
        assert len([line for line in text.splitlines() if line.strip()]) == 1, text


def test_undeploy_waits_out_an_endpoint_still_being_created(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deploy interrupted while its endpoint is Creating leaves it so, and SageMaker
    refuses to delete an endpoint in progress: undeploy waits until it is InService or
    Failed, then deletes it (it failed at once with "Cannot update in-progress endpoint",
    and the endpoint, a GPU instance on AWS, stayed). The Triton here starts only once the
    test saw undeploy waiting, then fails."""
    gate = tmp_path / "gate"
    with local_aws_running(gated_tritonserver(gate), tmp_path, monkeypatch):
        bucket = unique("held")
        boto3.client("s3").create_bucket(Bucket=bucket)
        name = unique("held")
        opts = options(store, bucket, name, wait=False)
        clients = connect()
        assert apply_plan(make_plan(opts, clients), clients, options=opts) == "not waited"
        statuses: list[str] = []
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["deleted"] = undeploy(
                    clients, name, poll_s=0.05, timeout_s=120, on_status=statuses.append
                )
            except Exception as exc:
                outcome["error"] = exc

        worker = threading.Thread(target=run)
        worker.start()
        try:
            wait_for(
                lambda: statuses.count("Creating") >= 2 or outcome,
                timeout_s=60,
                what="undeploy waiting for the endpoint",
            )
        finally:
            gate.touch()
            worker.join(timeout=180)
        assert "error" not in outcome, outcome
        assert statuses[0] == "Creating" and statuses[-1] == "Failed", statuses
        assert f"endpoint {name}" in outcome["deleted"]
        wait_gone(boto3.client("sagemaker"), name)


def test_smoke_names_the_status_of_an_endpoint_that_takes_no_requests(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """smoke on an endpoint that is Creating, or Failed, says so in one line (the
    DescribeEndpoint statuses of botocore's sagemaker service model: Creating,
    Deleting, OutOfService and Failed take no requests) instead of invoking it or failing
    on what undeploy already deleted ('DescribeEndpointConfig failed ... Could not find
    endpoint configuration' while it was Deleting). The Triton here starts only once the
    gate is opened, then fails."""
    gate = tmp_path / "gate"
    with local_aws_running(gated_tritonserver(gate), tmp_path, monkeypatch):
        bucket = unique("status")
        boto3.client("s3").create_bucket(Bucket=bucket)
        name = unique("status")
        opts = options(store, bucket, name, wait=False)
        clients = connect()
        try:
            assert apply_plan(make_plan(opts, clients), clients, options=opts) == "not waited"
            code, text = run(capsys, "smoke", name)
            assert code == 2, text
            assert f"endpoint {name} is Creating: it takes no requests" in text, text
            assert len([line for line in text.splitlines() if line.strip()]) == 1, text
        finally:
            gate.touch()
        sm = boto3.client("sagemaker")
        wait_for(
            lambda: sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "Failed",
            timeout_s=60,
            what="the endpoint to fail",
        )
        code, text = run(capsys, "smoke", name)
        assert code == 2 and f"endpoint {name} is Failed: it takes no requests" in text, text
        reason = sm.describe_endpoint(EndpointName=name)["FailureReason"]
        assert reason[:40] in " ".join(text.split()), text
        undeploy(clients, name)


def test_undeploy_keeps_the_artifacts_another_endpoint_reads(
    store: Path, bucket: str, endpoint_name: str, tmp_path: Path
) -> None:
    """Two endpoints on one prefix each serve every object under it (an MME reads its whole
    prefix): undeploy --delete-artifacts of one refuses while the other's model reads the
    prefix, and changes nothing (it deleted all five objects, the other's too); once the
    other is gone, it deletes the objects deployed for this endpoint only."""
    other_store = tmp_path / "other"
    write_reference_tarball(other_store / "model-9.tar.gz", scale=9.0)
    deploy(options(store, bucket, endpoint_name, max_instances=1))
    other = f"{endpoint_name}-b"
    deploy(options(other_store, bucket, other, max_instances=1))
    before = keys(bucket)
    assert "models/model-9.tar.gz" in before and len(before) == 5

    with pytest.raises(DeployError, match=rf"also read by model {other}-.*nothing was deleted"):
        undeploy(connect(), endpoint_name, delete_artifacts=True)
    assert keys(bucket) == before
    assert boto3.client("sagemaker").describe_endpoint(EndpointName=endpoint_name)

    # as the benchmark's temporary endpoint does: the endpoint goes, what another reads stays
    deleted = undeploy(connect(), other, delete_artifacts=True, keep_shared=True)
    assert f"endpoint {other}" in deleted
    assert f"kept 1 objects under s3://{bucket}/models/, read by model {endpoint_name}-" in (
        " ".join(deleted)
    )
    assert keys(bucket) == before
    deleted = undeploy(connect(), endpoint_name, delete_artifacts=True)
    assert f"4 objects under s3://{bucket}/models/" in deleted
    assert list(keys(bucket)) == ["models/model-9.tar.gz"]


def test_a_tarball_removed_from_the_store_leaves_the_endpoint(
    capsys: pytest.CaptureFixture[str],
    store: Path,
    bucket: str,
    endpoint_name: str,
    tmp_path: Path,
) -> None:
    """An MME serves every object under its prefix: a tarball deleted from the store stayed
    on S3 and stayed invocable. A redeploy deletes the objects it uploaded for this endpoint
    that the store no longer has (the plan names them), keeps what it did not upload, and
    with --no-prune keeps them all."""
    s3 = boto3.client("s3")
    s3.put_object(Bucket=bucket, Key="models/notes.txt", Body=b"not mmelocal's")
    deploy(options(store, bucket, endpoint_name, max_instances=1))
    (store / "team" / "model-3.tar.gz").unlink()

    plan_file = tmp_path / "plan.json"
    args = cli_args(store, bucket, endpoint_name, "--max-instances", "1", "--json", str(plan_file))
    code, text = run(capsys, *args)
    assert code == 0, text
    assert "DeleteObjects" in text, text
    removed = [o for o in json.loads(plan_file.read_text())["plan"]["objects"] if not o["path"]]
    assert [(o["key"], o["action"], o["note"]) for o in removed] == [
        ("models/notes.txt", "keep", "not uploaded by mmelocal"),
        ("models/team/model-3.tar.gz", "delete", "not in the store"),
    ]
    assert sorted(keys(bucket)) == [
        "models/model-0.tar.gz",
        "models/model-1.tar.gz",
        "models/model-2.tar.gz",
        "models/notes.txt",
    ]
    runtime = boto3.client("sagemaker-runtime")
    with pytest.raises(runtime.exceptions.ClientError, match="model-3"):
        runtime.invoke_endpoint(
            EndpointName=endpoint_name, TargetModel="team/model-3.tar.gz", Body=b"{}"
        )

    (store / "model-2.tar.gz").unlink()
    kept = make_plan(options(store, bucket, endpoint_name, max_instances=1, prune=False), connect())
    assert {o.key: o.note for o in kept.objects if o.action in ("keep", "delete")} == {
        "models/model-2.tar.gz": "not pruned (--no-prune)",
        "models/notes.txt": "not uploaded by mmelocal",
    }


class _Deleting:
    """A SageMaker client whose endpoints all show Deleting (what DescribeEndpoint answers
    for minutes after DeleteEndpoint, while the instances stop)."""

    def __init__(self, sagemaker: Any) -> None:
        self.sagemaker = sagemaker

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sagemaker, name)

    def describe_endpoint(self, **params: Any) -> Any:
        return {**self.sagemaker.describe_endpoint(**params), "EndpointStatus": "Deleting"}


def test_deploy_right_after_undeploy_says_to_wait_for_the_deletion(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    """A deploy planned while the endpoint is Deleting (just undeployed) took the endpoint
    for one to reuse or update: it uploaded, then failed with 'deleted while waiting' or a
    DescribeEndpointConfig error. It now stops at plan time, saying what to do."""
    opts = options(store, bucket, endpoint_name, max_instances=1)
    deploy(opts)
    clients = connect()
    deleting = dataclasses.replace(clients, sagemaker=_Deleting(clients.sagemaker))
    with pytest.raises(DeployError, match=r"is being deleted.*wait endpoint-deleted"):
        make_plan(opts, deleting)


def test_a_temporary_endpoint_never_takes_an_existing_one(
    store: Path, bucket: str, endpoint_name: str, tmp_path: Path
) -> None:
    """The benchmark's endpoint is made for the run and deleted after it. An endpoint of
    that name that mmelocal deployed before (a user's ``<name>-python``) was updated to the
    benchmark's store, measured with its own models in memory, and deleted with its models
    and configs. It is now refused before anything changes."""
    from mmelocal.deploy.temporary import temporary_endpoint

    first = deploy(options(store, bucket, endpoint_name, max_instances=1))
    before = keys(bucket)
    probe_store = tmp_path / "probe"
    write_reference_tarball(probe_store / "metrics.tar.gz", scale=7.0)
    run = temporary_endpoint(
        store=probe_store, endpoint_name=endpoint_name, s3_uri=f"s3://{bucket}/bench/",
        role_arn=ROLE, instance_type=INSTANCE_TYPE, poll_s=0.05,
    )  # fmt: skip
    with pytest.raises(DeployError, match=rf"endpoint {endpoint_name} exists.*another"), run:
        pass
    endpoint = boto3.client("sagemaker").describe_endpoint(EndpointName=endpoint_name)
    assert endpoint["EndpointStatus"] == "InService"
    assert endpoint["EndpointConfigName"] == first.steps[1].resource
    assert keys(bucket) == before
    assert models_named(endpoint_name) == [first.steps[0].resource]


def test_a_temporary_endpoint_deletes_only_the_objects_placed_for_it(
    store: Path, bucket: str, endpoint_name: str, tmp_path: Path
) -> None:
    """On exit the benchmark's endpoint goes with the objects placed for it (its store, and
    what the bench put under its prefix) and nothing else under the prefix: not a stranger's
    object, not one deployed for another endpoint, and not one an mmelocal of 2026-11-24 or
    earlier uploaded, which records no endpoint (it was deleted as the run's own)."""
    from mmelocal.aws.s3 import ENDPOINT_METADATA, SHA256_METADATA
    from mmelocal.deploy.temporary import temporary_endpoint

    s3 = boto3.client("s3")
    tarball = str(store / "model-2.tar.gz")
    s3.put_object(Bucket=bucket, Key="bench/notes.txt", Body=b"not mmelocal's")
    old = {SHA256_METADATA: "0" * 64}
    s3.upload_file(tarball, bucket, "bench/old.tar.gz", ExtraArgs={"Metadata": old})
    other = {**old, ENDPOINT_METADATA: f"{endpoint_name}-other"}
    s3.upload_file(tarball, bucket, "bench/other.tar.gz", ExtraArgs={"Metadata": other})
    before = sorted(keys(bucket))
    probe_store = tmp_path / "probe"
    write_reference_tarball(probe_store / "metrics.tar.gz", scale=7.0)
    deleted: list[str] = []
    with temporary_endpoint(
        store=probe_store, endpoint_name=endpoint_name, s3_uri=f"s3://{bucket}/bench/",
        role_arn=ROLE, instance_type=INSTANCE_TYPE, poll_s=0.05, deleted=deleted,
    ):  # fmt: skip
        placed = {SHA256_METADATA: "1" * 64, ENDPOINT_METADATA: endpoint_name}
        s3.upload_file(tarball, bucket, "bench/run/copy.tar.gz", ExtraArgs={"Metadata": placed})
        assert sorted(keys(bucket)) == sorted(
            [*before, "bench/metrics.tar.gz", "bench/run/copy.tar.gz"]
        )
    assert sorted(keys(bucket)) == before
    assert f"2 objects under s3://{bucket}/bench/" in deleted, deleted


def test_a_deploy_interrupted_during_the_upload_is_undeployed_with_its_prefix(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str
) -> None:
    """Ctrl-C while the tarballs upload (before any model exists): the deploy said to run
    'undeploy NAME --delete-artifacts', which finds the prefix through the endpoint's
    models, found none, said there was nothing to delete and left the objects in S3. It now
    names the prefix, and undeploy --s3-uri deletes what was uploaded for the endpoint
    there (and refuses --s3-uri without --delete-artifacts)."""
    import mmelocal.deploy.upload as upload

    real = upload.apply_objects

    def interrupted(*args: Any, **kwargs: Any) -> None:
        def ctrl_c(step: object) -> None:  # the user's Ctrl-C once the first object is up
            raise KeyboardInterrupt

        real(*args, **{**kwargs, "on_object": ctrl_c})

    with pytest.MonkeyPatch.context() as patch:  # the test's own monkeypatch holds the env
        patch.setattr(upload, "apply_objects", interrupted)
        code, text = run(capsys, *cli_args(store, bucket, endpoint_name))
    prefix = f"s3://{bucket}/models/"
    assert code != 0 and "interrupted" in text, text
    hint = f"mmelocal undeploy {endpoint_name} --delete-artifacts --s3-uri {prefix}"
    assert hint in " ".join(text.split()), text
    assert len(keys(bucket)) == 1 and models_named(endpoint_name) == []
    s3 = boto3.client("s3")
    s3.put_object(Bucket=bucket, Key="models/notes.txt", Body=b"not mmelocal's")

    code, text = run(capsys, "undeploy", endpoint_name, "--s3-uri", prefix)
    assert code == 2 and "--s3-uri is only read with --delete-artifacts" in text, text
    code, text = run(capsys, "undeploy", endpoint_name, "--delete-artifacts", "--s3-uri", prefix)
    assert code == 0 and f"1 objects under {prefix}" in text, text
    assert list(keys(bucket)) == ["models/notes.txt"]


def test_a_redeploy_deletes_the_model_and_config_it_superseded(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str
) -> None:
    """Every changed deploy names a new endpoint config (and, with a new container, a new
    model): once the endpoint is InService on them, the ones mmelocal made for it before
    are deleted (an account holds a limited number of each), unless an endpoint still uses
    them; nothing mmelocal did not make for this endpoint is touched."""
    sm = boto3.client("sagemaker")
    opts = options(store, bucket, endpoint_name, max_instances=1)
    first = deploy(opts)
    model_1, config_1 = first.steps[0].resource, first.steps[1].resource
    # an endpoint someone made by hand on the first config: the config and its model stay
    other = f"other-{endpoint_name}"
    sm.create_endpoint(EndpointName=other, EndpointConfigName=config_1)
    wait_for(lambda: sm.describe_endpoint(EndpointName=other)["EndpointStatus"] == "InService")
    foreign = f"{endpoint_name}-byhand"  # a name a NameContains filter finds, untagged
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": model_1,
        "InstanceType": INSTANCE_TYPE,
        "InitialInstanceCount": 1,
    }
    sm.create_endpoint_config(EndpointConfigName=foreign, ProductionVariants=[variant])

    env = options(store, bucket, endpoint_name, max_instances=1, environment={"A": "1"})
    second = deploy(env)
    model_2, config_2 = second.steps[0].resource, second.steps[1].resource
    assert model_2 != model_1 and "sagemaker:DeleteEndpointConfig" not in actions(second)
    assert configs_named(endpoint_name) == sorted([config_1, config_2, foreign])
    assert models_named(endpoint_name) == sorted([model_1, model_2])

    delete_endpoint(sm, other)
    wait_gone(sm, other)
    write_reference_tarball(store / "model-2.tar.gz", scale=5.0)
    clients = connect()
    third = make_plan(env, clients)
    deletes = [(s.operation, s.resource) for s in third.steps if s.action == "delete"]
    assert sorted(deletes) == sorted([("DeleteEndpointConfig", config_1),
                                      ("DeleteEndpointConfig", config_2),
                                      ("DeleteModel", model_1)])  # fmt: skip
    assert deletes[-1][0] == "DeleteModel"  # after the configs that name it
    assert all(s.needs_in_service for s in third.steps if s.action == "delete")
    assert apply_plan(third, clients, options=env) == "InService"
    config_3 = third.steps[1].resource
    assert configs_named(endpoint_name) == sorted([config_3, foreign])
    assert models_named(endpoint_name) == [model_2]
    assert sm.describe_endpoint(EndpointName=endpoint_name)["EndpointConfigName"] == config_3

    # --no-wait: nothing is deleted, and the deploy says what it left and how to clean it
    write_reference_tarball(store / "model-2.tar.gz", scale=6.0)
    code, text = run(capsys, *cli_args(store, bucket, endpoint_name, "--max-instances", "1",
                                       "--env", "A=1", "--no-wait"))  # fmt: skip
    assert code == 0, text
    assert config_3 in text and "run the same deploy again once" in " ".join(text.split())
    assert config_3 in configs_named(endpoint_name)
    wait_for(
        lambda: sm.describe_endpoint(EndpointName=endpoint_name)["EndpointStatus"] == "InService"
    )
    again = deploy(env)
    assert [s.resource for s in again.steps if s.action == "delete"] == [config_3]
    assert len(configs_named(endpoint_name)) == 2 and models_named(endpoint_name) == [model_2]


def test_an_endpoint_whose_rollback_failed_is_refused_not_waited_for(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    """DescribeEndpoint's UpdateRollbackFailed (botocore's model): "Both the rolling
    deployment and auto-rollback failed. Your endpoint is in service with a mix of the old
    and new endpoint configurations", until its owner restores it. The local AWS never
    reaches it: its DescribeEndpoint answers are given that status on their way back."""
    from mmelocal.deploy.waits import wait_in_service

    opts = options(store, bucket, endpoint_name, max_instances=1)
    deploy(opts)
    clients = connect()

    def rollback_failed(parsed: dict[str, Any], **_: Any) -> None:
        parsed["EndpointStatus"] = "UpdateRollbackFailed"
        parsed["FailureReason"] = "the new instances failed their health check"

    clients.sagemaker.meta.events.register("after-call.sagemaker.DescribeEndpoint", rollback_failed)
    stuck = r"UpdateRollbackFailed.*health check.*deployment-guardrails-rolling"
    with pytest.raises(DeployError, match=stuck):
        make_plan(opts, clients)  # the same config: no update to send, yet not deployed
    write_reference_tarball(store / "model-2.tar.gz", scale=5.0)
    with pytest.raises(DeployError, match=stuck):
        make_plan(opts, clients)
    with pytest.raises(DeployError, match=stuck):  # at once, not after timeout_s
        wait_in_service(clients.sagemaker, endpoint_name, poll_s=0.05, timeout_s=1)
