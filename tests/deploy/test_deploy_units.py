"""Deploy pieces without a server: options, the image table, botocore validation, sizing;
and the S3 skip rule for objects another tool uploaded (moto)."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from deploy_helpers import ROLE, write_reference_tarball

from mmelocal.bench.capacity.projection import load_gpus, project
from mmelocal.bench.capacity.result import CapacityResult, LoadRecord
from mmelocal.bench.capacity.sizing import cheapest_instance
from mmelocal.bench.results import write_result
from mmelocal.deploy.images import triton_image_uri
from mmelocal.deploy.plan import DeployOptions, split_s3_uri
from mmelocal.deploy.resources import (
    endpoint_config_params,
    model_params,
    scaling_policy_params,
    validate_request,
)
from mmelocal.deploy.upload import PART_SIZE_BYTES, file_digest, plan_objects
from mmelocal.errors import DeployError, ObjectConflictError

GIB = 1024**3


def test_s3_uri_prefix_always_ends_with_a_slash() -> None:
    assert split_s3_uri("s3://bucket/models") == ("bucket", "models/")
    assert split_s3_uri("s3://bucket/a/b/") == ("bucket", "a/b/")
    assert split_s3_uri("s3://bucket") == ("bucket", "")
    for bad in ("bucket/models", "s3://B/x", "https://bucket.s3.amazonaws.com/x"):
        with pytest.raises(DeployError, match="s3://bucket/prefix/"):
            split_s3_uri(bad)


def test_options_refuse_what_sagemaker_refuses(tmp_path: Path) -> None:
    base = {"store": tmp_path, "endpoint_name": "ep", "s3_uri": "s3://bkt/m/", "role_arn": ROLE}
    DeployOptions(**base)  # type: ignore[arg-type]
    cases = {
        "role_arn": ("arn:aws:iam::123:role/x", "IAM role ARN"),
        "endpoint_name": ("my_endpoint", "endpoint name must be"),
        "instance_count": (0, "instance_count must be >= 1"),
        "target_gpu_utilization": (0, "target GPU utilization"),
        "environment": ({"1BAD": "x"}, "environment variable name"),
        "store": (tmp_path / "missing", "is not a folder"),
    }
    for field, (value, message) in cases.items():
        with pytest.raises(DeployError, match=message):
            DeployOptions(**{**base, field: value})  # type: ignore[arg-type]
    with pytest.raises(DeployError, match="max_instances must be >= instance_count"):
        DeployOptions(**base, instance_count=3, max_instances=2)  # type: ignore[arg-type]
    for name in ("ep\n", "ep-", "e" * 64):  # the service's rule: whole name, 63 at most
        with pytest.raises(DeployError, match="endpoint name must be"):
            DeployOptions(**{**base, "endpoint_name": name})  # type: ignore[arg-type]
    DeployOptions(**{**base, "endpoint_name": "e--p" + "e" * 59})  # type: ignore[arg-type]


def test_triton_image_per_region() -> None:
    assert triton_image_uri("eu-west-1") == (
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
    )
    assert triton_image_uri("cn-north-1", "24.05") == (
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/sagemaker-tritonserver:24.05-py3"
    )
    with pytest.raises(DeployError, match="pass --image URI") as unknown:
        triton_image_uri("mars-north-1")
    assert "--triton-version" not in str(unknown.value)  # no release would help there
    # releases before 23.12 live in the older per-region accounts (the AWS notebooks'
    # account_id_map; deep-learning-containers available_images.md)
    assert triton_image_uri("us-east-1", "23.02") == (
        "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:23.02-py3"
    )
    with pytest.raises(DeployError, match=r"'24\.10' .*not in the image table.*--triton-version"):
        triton_image_uri("us-east-1", "24.10")


def test_requests_pass_botocore_validation_and_bad_ones_do_not(tmp_path: Path) -> None:
    options = DeployOptions(
        store=tmp_path, endpoint_name="ep", s3_uri="s3://bkt/m/", role_arn=ROLE,
        instance_type="ml.g5.2xlarge",  # unknown to moto, fine for the service model
    )  # fmt: skip
    model = model_params(options, triton_image_uri("us-east-1"))
    validate_request("sagemaker", "CreateModel", model)
    config = endpoint_config_params(options, model["ModelName"], "digest")
    validate_request("sagemaker", "CreateEndpointConfig", config)
    validate_request("application-autoscaling", "PutScalingPolicy", scaling_policy_params(options))
    variant = {**config["ProductionVariants"][0], "InitialInstanceCount": "one"}
    with pytest.raises(DeployError, match="InitialInstanceCount"):
        validate_request(
            "sagemaker", "CreateEndpointConfig", {**config, "ProductionVariants": [variant]}
        )
    with pytest.raises(DeployError, match="ModelName"):
        validate_request("sagemaker", "CreateModel", {"ExecutionRoleArn": ROLE})


def test_names_change_with_what_they_name(tmp_path: Path) -> None:
    options = DeployOptions(store=tmp_path, endpoint_name="ep", s3_uri="s3://bkt/m", role_arn=ROLE)
    image = triton_image_uri("us-east-1")
    name = model_params(options, image)["ModelName"]
    assert name == model_params(options, image)["ModelName"]
    assert name != model_params(options, image.replace("24.09", "24.05"))["ModelName"]
    first = endpoint_config_params(options, name, "a")["EndpointConfigName"]
    assert first != endpoint_config_params(options, name, "b")["EndpointConfigName"]
    long = DeployOptions(store=tmp_path, endpoint_name="e" * 63, s3_uri="s3://bkt/m", role_arn=ROLE)
    assert len(model_params(long, image)["ModelName"]) <= 63


def test_cheapest_instance_that_holds_the_hot_set(tmp_path: Path) -> None:
    result = tmp_path / "projection.json"
    write_result(project(per_model_bytes=4 * GIB, baseline_bytes=GIB, gpus=load_gpus()), result)
    # T4 (15,360 MiB): floor((0.9 * 15 GiB - 1 GiB) / 4 GiB) = 3; A10G: 4
    assert cheapest_instance(result, hot_models=3).instance_type == "ml.g4dn.xlarge"
    choice = cheapest_instance(result, hot_models=4)
    assert choice.instance_type == "ml.g5.xlarge" and "4 models fit" in choice.reason
    with pytest.raises(DeployError, match="no priced instance type holds 500"):
        cheapest_instance(result, hot_models=500)


def _capacity_result(probe: str, marginal: int | None) -> CapacityResult:
    loads = tuple(
        LoadRecord(
            copies=i + 1,
            target=f"m{i}",
            used_bytes=GIB + (i + 1) * 4 * GIB,
            delta_bytes=4 * GIB,
            load_s=1.0,
            warmup_s=0.0,
            marginal_bytes=marginal,
        )
        for i in range(2)
    )
    return CapacityResult(
        source="m.tar.gz", label="m", model_format="onnx", probe=probe, total_bytes=16 * GIB,
        threshold=0.9, baseline_bytes=GIB, loads=loads, next_copy=None, stopped_reason="done",
    )  # fmt: skip


def test_sizing_refuses_host_memory_and_uses_the_marginal_split(tmp_path: Path) -> None:
    on_cpu = tmp_path / "cpu.json"
    write_result(_capacity_result("host PSS of the Triton tree, budget 4,096 MiB", None), on_cpu)
    with pytest.raises(
        DeployError, match=r"host-memory \(CPU\).*capacity estimate.*--instance-type"
    ):
        cheapest_instance(on_cpu, hot_models=1)
    on_gpu = tmp_path / "gpu.json"
    # 4 GiB per copy, of which 3 GiB marginal and 1 GiB shared runtime (paid once): on an
    # A10G (22.5 GiB) floor((0.9 * 22.5 - 1 - 1) / 3) = 6, where the plain mean would give
    # floor((0.9 * 22.5 - 1) / 4) = 4.
    write_result(_capacity_result("nvml:0", 3 * GIB), on_gpu)
    choice = cheapest_instance(on_gpu, hot_models=6)
    assert choice.instance_type == "ml.g5.xlarge" and "6 models fit" in choice.reason


def test_sizing_reads_the_estimate_the_host_memory_refusal_points_to(tmp_path: Path) -> None:
    """The CPU refusal says "use `mmelocal capacity estimate --json FILE`": deploy
    --capacity reads that file, each card's count the estimate's own (as traffic's)."""
    from mmelocal.bench.estimate.core import estimate_from_facts
    from mmelocal.bench.estimate.parts import Batches, ModelFacts

    facts = ModelFacts(
        params=500_000_000,
        weight_bytes=2 * GIB,
        weight_bytes_fp32=2 * GIB,
        activation_bytes={1: 64 * 2**20, 8: 512 * 2**20},
    )
    estimate = estimate_from_facts(
        facts,
        source="m",
        model_format="torchscript",
        precision="fp32",
        batches=Batches(warmup=1, preferred=8, max=8),
    )
    path = tmp_path / "estimate.json"
    write_result(estimate, path)  # as estimate_from_facts returns it: no cards, every card
    counts = {
        t: card.point
        for card in estimate.with_cards(load_gpus()).cards
        for t in card.instance_types
    }
    choice = cheapest_instance(path, hot_models=counts["ml.g4dn.xlarge"] + 1)
    assert choice.instance_type != "ml.g4dn.xlarge"
    assert choice.models_per_instance == counts[choice.instance_type]
    assert choice.models_per_instance > counts["ml.g4dn.xlarge"]
    assert cheapest_instance(path, hot_models=1).instance_type == "ml.g4dn.xlarge"


def test_sizing_keeps_to_the_instance_types_an_estimate_was_made_for(tmp_path: Path) -> None:
    """`capacity estimate --instance-type ml.g5.xlarge --json FILE` records that card and
    that type only; deploy --capacity FILE recomputed the estimate on every card and
    picked the cheapest of them all (ml.g4dn.xlarge). Now it picks among the estimate's
    own types, with the estimate's own count, and says so when none holds the hot set."""
    from mmelocal.bench.estimate.core import estimate_from_facts
    from mmelocal.bench.estimate.parts import Batches, ModelFacts

    facts = ModelFacts(
        params=100_000_000,
        weight_bytes=GIB // 2,
        weight_bytes_fp32=GIB // 2,
        activation_bytes={1: 64 * 2**20, 8: 256 * 2**20},
    )
    estimate = estimate_from_facts(
        facts,
        source="m",
        model_format="torchscript",
        precision="fp32",
        batches=Batches(warmup=1, preferred=8, max=8),
    ).with_cards(load_gpus(), ["ml.g5.xlarge"])  # what the CLI's --instance-type does
    assert [c.instance_types for c in estimate.cards] == [("ml.g5.xlarge",)]
    path = tmp_path / "estimate.json"
    write_result(estimate, path)
    choice = cheapest_instance(path, hot_models=1)
    assert choice.instance_type == "ml.g5.xlarge"
    assert choice.models_per_instance == estimate.cards[0].point
    with pytest.raises(DeployError, match="no priced instance type holds"):
        cheapest_instance(path, hot_models=estimate.cards[0].point + 1)


def test_unchanged_objects_are_skipped_by_etag_or_recorded_checksum(
    aws: str, bucket: str, tmp_path: Path
) -> None:
    from boto3.s3.transfer import TransferConfig

    mib = 1024 * 1024
    store = tmp_path / "store"
    small = write_reference_tarball(store / "a-small.tar.gz", scale=2.0)
    big = store / "b-big.tar.gz"
    big.write_bytes(b"\0" * (PART_SIZE_BYTES + 1))
    other_parts = [store / "c-recorded.tar.gz", store / "d-unknown.tar.gz"]
    for n, path in enumerate(other_parts):
        path.write_bytes(bytes([n + 1]) * (6 * mib))
    s3 = boto3.client("s3")
    ours = TransferConfig(multipart_threshold=PART_SIZE_BYTES, multipart_chunksize=PART_SIZE_BYTES)
    for path in (small, big):  # no mmelocal metadata: as another tool would upload them
        s3.upload_file(str(path), bucket, f"m/{path.name}", Config=ours)
    theirs = TransferConfig(multipart_threshold=5 * mib, multipart_chunksize=5 * mib)
    recorded = {"Metadata": {"mmelocal-sha256": file_digest(other_parts[0]).sha256}}
    s3.upload_file(
        str(other_parts[0]), bucket, "m/c-recorded.tar.gz", ExtraArgs=recorded, Config=theirs
    )
    s3.upload_file(str(other_parts[1]), bucket, "m/d-unknown.tar.gz", Config=theirs)

    assert s3.head_object(Bucket=bucket, Key="m/b-big.tar.gz")["ETag"].strip('"') == (
        file_digest(big).etag
    )
    # 2 parts of 5 MiB: an ETag mmelocal cannot predict; the recorded SHA-256 decides, and
    # with none (another tool's object) nothing proves the bytes the same: not replaced
    # unasked
    with pytest.raises(ObjectConflictError, match=r"d-unknown\.tar\.gz \(not uploaded by mmelocal"):
        plan_objects(s3, bucket, "m/", store, endpoint="ep")
    planned = plan_objects(s3, bucket, "m/", store, endpoint="ep", replace_foreign=True)
    assert [o.action for o in planned] == ["skip", "skip", "skip", "upload"]
    write_reference_tarball(small, scale=3.0)
    planned = plan_objects(s3, bucket, "m/", store, endpoint="ep", replace_foreign=True)
    assert planned[0].action == "upload" and "--replace-foreign" in planned[0].note


def test_service_errors_become_one_line_with_the_next_step() -> None:
    from botocore.exceptions import ClientError

    from mmelocal.aws.session import aws_error

    quota = ClientError(
        {"Error": {"Code": "ResourceLimitExceeded", "Message": "account-level limit of 0"}},
        "CreateEndpoint",
    )
    error = aws_error(quota, "CreateEndpoint", "ep")
    assert error.code == "ResourceLimitExceeded" and error.operation == "CreateEndpoint"
    assert "Service Quotas" in str(error) and "\n" not in str(error)
    # Application Auto Scaling's quota is no instance-type quota: its own quotas are named
    full = ClientError(
        {"Error": {"Code": "LimitExceededException", "Message": "limit"}}, "PutScalingPolicy"
    )
    error = aws_error(full, "PutScalingPolicy", "mmelocal-gpu-utilization")
    assert "Application Auto Scaling" in str(error) and "--instance-type" not in str(error)
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "PutObject")
    assert "IAM policy" in str(aws_error(denied, "PutObject", "s3://b/k"))


class _ListingSageMaker:
    """SageMaker's listing as the service answers it: ``NameContains`` filters the names
    (moto ignores it), tags by ARN; deletes are recorded."""

    def __init__(self, models: dict[str, str], configs: dict[str, str]) -> None:
        from types import SimpleNamespace

        self.meta = SimpleNamespace(service_model=SimpleNamespace(service_name="sagemaker"))
        self.items = {"Models": models, "EndpointConfigs": configs}
        self.deleted: list[str] = []

    def describe_endpoint(self, **_: object) -> None:
        from botocore.exceptions import ClientError

        error = {"Code": "ValidationException", "Message": "Could not find endpoint"}
        raise ClientError({"Error": error}, "DescribeEndpoint")

    def describe_model(self, **_: object) -> dict[str, object]:
        return {}

    def get_paginator(self, method: str) -> object:
        key = "Models" if method == "list_models" else "EndpointConfigs"
        kind = key[:-1]

        class Paginator:
            def paginate(inner, NameContains: str) -> list[dict[str, object]]:
                names = [n for n in self.items[key] if NameContains in n]
                return [{key: [{f"{kind}Name": n, f"{kind}Arn": f"arn:{n}"} for n in names]}]

        return Paginator()

    def list_tags(self, ResourceArn: str) -> dict[str, object]:
        every = {**self.items["Models"], **self.items["EndpointConfigs"]}
        return {"Tags": [{"Key": "mmelocal:endpoint", "Value": every[ResourceArn[4:]]}]}

    def delete_model(self, ModelName: str) -> dict[str, object]:
        self.deleted.append(ModelName)
        return {}

    def delete_endpoint_config(self, EndpointConfigName: str) -> dict[str, object]:
        self.deleted.append(EndpointConfigName)
        return {}


def test_undeploy_finds_the_resources_of_a_63_character_endpoint(tmp_path: Path) -> None:
    """Model and config names keep the endpoint name's first 54 characters (and a digest):
    a list filtered with the whole name finds none of them."""
    from mmelocal.aws.session import AwsClients
    from mmelocal.deploy.deployer import undeploy

    name = "e" * 63
    opts = DeployOptions(store=tmp_path, endpoint_name=name, s3_uri="s3://bkt/m/", role_arn=ROLE)
    model = model_params(opts, "image")["ModelName"]
    config = endpoint_config_params(opts, model, "digest")["EndpointConfigName"]
    assert name not in model and name not in config
    sm = _ListingSageMaker({model: name}, {config: name})
    clients = AwsClients(region="us-east-1", s3=None, sagemaker=sm, autoscaling=None, runtime=None)
    assert undeploy(clients, name) == [f"endpoint config {config}", f"model {model}"]
    assert sm.deleted == [config, model]


def test_undeploy_of_an_endpoint_whose_deletion_ends_meanwhile_goes_on(tmp_path: Path) -> None:
    """A second undeploy finds the endpoint Deleting (the first one's deletion); the
    deletion ends before its tags are read, and the service refuses the tags of a deleted
    endpoint (ValidationException): undeploy failed there (seen with the local AWS under
    load); the endpoint is gone, so it goes on with the rest."""
    from botocore.exceptions import ClientError

    from mmelocal.aws.session import AwsClients
    from mmelocal.deploy.deployer import undeploy

    name = "ep"
    opts = DeployOptions(store=tmp_path, endpoint_name=name, s3_uri="s3://bkt/m/", role_arn=ROLE)
    model = model_params(opts, "image")["ModelName"]

    class DeletedMeanwhile(_ListingSageMaker):
        described = 0

        def describe_endpoint(self, **params: object) -> None:  # type: ignore[override]
            self.described += 1
            if self.described == 1:
                return {"EndpointArn": "arn:endpoint/ep", "EndpointStatus": "Deleting"}  # type: ignore[return-value]
            super().describe_endpoint(**params)

        def list_tags(self, ResourceArn: str) -> dict[str, object]:
            if ResourceArn == "arn:endpoint/ep":
                error = {"Code": "ValidationException", "Message": "gone"}
                raise ClientError({"Error": error}, "ListTags")
            return super().list_tags(ResourceArn)

    sm = DeletedMeanwhile({model: name}, {})
    clients = AwsClients(region="us-east-1", s3=None, sagemaker=sm, autoscaling=None, runtime=None)
    assert undeploy(clients, name) == [f"model {model}"]
    assert sm.described == 2


def test_options_refuse_an_environment_sagemaker_refuses(tmp_path: Path) -> None:
    """CreateModel's Environment: 100 entries, 1024 bytes a value, 32 KB in all (botocore's
    model; its validator checks none of these, so they failed after the upload)."""
    base = {"store": tmp_path, "endpoint_name": "ep", "s3_uri": "s3://bkt/m/", "role_arn": ROLE}
    DeployOptions(**base, environment={"NOTE": "é" * 512})  # type: ignore[arg-type]
    cases = {
        "1024 bytes": {"NOTE": "é" * 513},
        "100 variables": {f"K{i}": "v" for i in range(101)},
        "32 KB": {f"K{i}": "v" * 1000 for i in range(40)},
    }
    for message, environment in cases.items():
        with pytest.raises(DeployError, match=message):
            DeployOptions(**base, environment=environment)  # type: ignore[arg-type]


def test_etag_of_a_file_of_exactly_one_part(aws: str, bucket: str, tmp_path: Path) -> None:
    """boto3 uploads a file of exactly the threshold in one multipart part (s3transfer:
    size >= multipart_threshold), whose ETag is the MD5 of the part's MD5 and '-1'."""
    from boto3.s3.transfer import TransferConfig

    part = 5 * 1024 * 1024
    path = tmp_path / "exact.tar.gz"
    path.write_bytes(b"\1" * part)
    s3 = boto3.client("s3")
    config = TransferConfig(multipart_threshold=part, multipart_chunksize=part)
    s3.upload_file(str(path), bucket, "m/exact.tar.gz", Config=config)
    etag = s3.head_object(Bucket=bucket, Key="m/exact.tar.gz")["ETag"].strip('"')
    assert etag.endswith("-1")
    assert file_digest(path, part_size_bytes=part).etag == etag


def test_smoke_checks_only_tarballs_that_carry_a_reference(
    aws: str, bucket: str, tmp_path: Path
) -> None:
    """``mmelocal bench --endpoint`` leaves its probe (``metrics.tar.gz``, no reference
    data) in the prefix, and it sorts before ``model-*``: smoke must pass over it."""
    import datetime
    import io
    from types import SimpleNamespace

    from botocore.stub import Stubber

    from mmelocal.aws.session import AwsClients
    from mmelocal.bench.endpoint.remote import write_probe_tarball
    from mmelocal.deploy.smoke import smoke_endpoint

    s3 = boto3.client("s3")
    model = write_reference_tarball(tmp_path / "model-0.tar.gz", scale=2.0)
    probe = write_probe_tarball(tmp_path / "metrics.tar.gz")
    for path in (model, probe):
        s3.upload_file(str(path), bucket, f"m/{path.name}")
    sm = boto3.client("sagemaker")
    now = datetime.datetime.now(datetime.UTC)
    with Stubber(sm) as stub:
        stub.add_response(
            "describe_endpoint",
            {"EndpointName": "ep", "EndpointArn": "arn:aws:sagemaker:us-east-1:1:endpoint/ep",
             "EndpointConfigName": "cfg", "EndpointStatus": "InService",
             "CreationTime": now, "LastModifiedTime": now},
        )  # fmt: skip
        stub.add_response(
            "describe_endpoint_config",
            {"EndpointConfigName": "cfg", "EndpointConfigArn": "arn:aws:sagemaker:us-east-1:1:x",
             "ProductionVariants": [{"VariantName": "AllTraffic", "ModelName": "mdl"}],
             "CreationTime": now},
        )  # fmt: skip
        stub.add_response(
            "describe_model",
            {"ModelName": "mdl", "ModelArn": "arn:aws:sagemaker:us-east-1:1:x", "CreationTime": now,
             "PrimaryContainer": {"Mode": "MultiModel", "ModelDataUrl": f"s3://{bucket}/m/"}},
        )  # fmt: skip
        called: list[str] = []

        def invoke_endpoint(**params: str) -> dict[str, object]:
            called.append(params["TargetModel"])
            return {"Body": io.BytesIO(b"{}")}

        runtime = SimpleNamespace(invoke_endpoint=invoke_endpoint)
        clients = AwsClients(
            region="us-east-1", s3=s3, sagemaker=sm, autoscaling=None, runtime=runtime
        )
        report = smoke_endpoint(clients, "ep", models=5)
    assert called == ["model-0.tar.gz"]
    assert [r.target for r in report.results] == ["model-0.tar.gz"]


def test_option_errors_name_what_the_user_gave(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """DeployOptions named its fields (``max_instances must be >= instance_count``) also to
    a CLI user, who typed --max-instances and --instance-count; and --role to a library
    user, who gave role_arn. Each message now names what the user gave: the CLI's flags
    on the command line, the fields in Python."""
    from deploy_helpers import cli_args, run

    base = {"store": tmp_path, "endpoint_name": "ep", "s3_uri": "s3://bkt/m/", "role_arn": ROLE}
    with pytest.raises(DeployError, match=r"^max_instances must be >= instance_count \(3\)"):
        DeployOptions(**base, instance_count=3, max_instances=2)  # type: ignore[arg-type]
    with pytest.raises(DeployError, match=r"^role_arn must be an IAM role ARN"):
        DeployOptions(**{**base, "role_arn": "arn:aws:iam::123:role/x"})  # type: ignore[arg-type]

    args = cli_args(tmp_path, "bkt", "ep", "--instance-count", "4", "--dry-run")
    code, text = run(capsys, *args)
    assert code != 0 and "--max-instances must be >= --instance-count (4), got 3" in text, text
    assert "max_instances" not in text and "Traceback" not in text
    at = args.index("--role")
    code, text = run(capsys, *args[:at], "--role", "arn:aws:iam::123:role/x", *args[at + 2 :])
    assert "--role must be an IAM role ARN" in text and "role_arn" not in text, text
    # the benchmark's temporary endpoints: named as `mmelocal benchmark` took them
    from mmelocal.deploy.temporary import temporary_endpoint

    bench = temporary_endpoint(store=tmp_path, endpoint_name="ep", s3_uri="s3://bkt/m/",
                               role_arn="x", instance_type="ml.g5.xlarge",
                               option_names={"role_arn": "--role"})  # fmt: skip
    with pytest.raises(DeployError, match=r"^--role must be an IAM role ARN"), bench:
        pass


def test_sizing_picks_the_result_asked_for_in_a_file_of_several(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`capacity SOURCE --format torchscript,onnx --json FILE` writes a list, one result per
    format (an estimate of a repository, one per model): deploy --capacity sized by the
    first, whichever the store holds. Several results are now refused, each named, until
    --capacity-result says which (its format, source, or position)."""
    import dataclasses

    from deploy_helpers import cli_args, run

    from mmelocal.bench.results import write_results
    from mmelocal.cli._options import CAPACITY_RESULT

    onnx = _capacity_result("nvml:0", 3 * GIB)  # 6 fit an A10G (see the test above)
    torchscript = dataclasses.replace(onnx, model_format="torchscript", source="m",
                                      loads=tuple(dataclasses.replace(load, marginal_bytes=None)
                                                  for load in onnx.loads))  # fmt: skip
    path = tmp_path / "formats.json"
    write_results([torchscript, onnx], path)
    with pytest.raises(DeployError, match=r"2 results.*1: m \(torchscript\).*2: m\.tar\.gz") as e:
        cheapest_instance(path, hot_models=6, choose=CAPACITY_RESULT)
    assert "--capacity-result" in str(e.value)
    with pytest.raises(DeployError, match=r"say which with pick="):
        cheapest_instance(path, hot_models=6)  # the Python API's own argument
    for pick in ("onnx", "m.tar.gz", "2"):
        choice = cheapest_instance(path, hot_models=6, pick=pick)
        assert choice.instance_type == "ml.g5.xlarge" and "6 models fit" in choice.reason
    with pytest.raises(DeployError, match=r"no result of .* is 'tensorrt'.*1: m \(torchscript\)"):
        cheapest_instance(path, hot_models=6, pick="tensorrt")

    store = tmp_path / "store"
    write_reference_tarball(store / "model-0.tar.gz", scale=2.0)
    args = [
        a for a in cli_args(store, "bkt", "ep") if a not in ("--instance-type", "ml.g4dn.xlarge")
    ]
    code, text = run(capsys, *args, "--capacity", str(path), "--dry-run")
    assert code != 0 and "--capacity-result" in text and "Traceback" not in text, text
    code, text = run(capsys, *args, "--capacity-result", "onnx", "--dry-run")
    assert code == 2 and "--capacity-result is only read with --capacity" in text, text
