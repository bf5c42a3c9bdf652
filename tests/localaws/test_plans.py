"""The local AWS's pure parts: routing, the service's input checks, fleet plans, the GPU cap."""

from __future__ import annotations

from typing import Any

import pytest
from localaws_helpers import ROLE, TRITON_IMAGE

from mmelocal.emulator.probes import CappedProbe, MemoryReading
from mmelocal.errors import EndpointFailedError
from mmelocal.localaws.app import credential_scope
from mmelocal.localaws.checks import (
    environment_problem,
    model_data_problem,
    model_violations,
    parse_s3_url,
)
from mmelocal.localaws.fleet import card_memory_bytes, is_triton_image, plan_fleet

MiB = 2**20


def test_credential_scope_names_region_and_service() -> None:
    header = (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261125/eu-west-1/sagemaker/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=abc"
    )
    assert credential_scope({"HTTP_AUTHORIZATION": header}) == ("eu-west-1", "sagemaker")
    assert credential_scope({}) == ("", "")


def test_violations_follow_botocores_model() -> None:
    message = model_violations(
        "CreateModel",
        {"ModelName": "m", "ExecutionRoleArn": "SageMakerRole-not-an-arn", "PrimaryContainer": {}},
    )
    assert message is not None
    assert message.startswith("1 validation error detected: Value 'SageMakerRole-not-an-arn' at ")
    assert (
        "'executionRoleArn' failed to satisfy constraint: Member must satisfy regular " in message
    )
    assert model_violations("CreateModel", {"ModelName": "m", "ExecutionRoleArn": ROLE}) is None
    variants = [{"VariantName": "v", "ModelName": "m", "InstanceType": "ml.z1.huge"}]
    message = model_violations(
        "CreateEndpointConfig", {"EndpointConfigName": "c", "ProductionVariants": variants}
    )
    assert message is not None
    assert "at 'productionVariants.1.member.instanceType'" in message
    assert "enum value set" in message and "ml.g5.2xlarge" in message


def test_a_number_over_its_models_max_is_a_violation() -> None:
    """botocore checks a number's ``min`` on the client, not its ``max`` (``validate.py``
    ``range_check``): the service answers both (VolumeSizeInGB: min 1, max 512)."""
    variants = [
        {"VariantName": "v", "ModelName": "m", "InstanceType": "ml.g5.xlarge",
         "InitialInstanceCount": 1, "VolumeSizeInGB": 513}
    ]  # fmt: skip
    message = model_violations(
        "CreateEndpointConfig", {"EndpointConfigName": "c", "ProductionVariants": variants}
    )
    assert message == (
        "1 validation error detected: Value '513' at 'productionVariants.1.member."
        "volumeSizeInGB' failed to satisfy constraint: Member must have value less than or "
        "equal to 512"
    )
    variants[0]["VolumeSizeInGB"] = 512
    assert (
        model_violations(
            "CreateEndpointConfig", {"EndpointConfigName": "c", "ProductionVariants": variants}
        )
        is None
    )


def test_model_data_rules() -> None:
    """A MultiModel prefix is used as given, trailing ``/`` or not (no AWS source refuses
    one without; it was refused with "must end with '/'"); an empty one is not found."""
    objects = ["models/a.tar.gz", "one/model.tar.gz"]

    def keys_under(bucket: str, prefix: str) -> list[str] | None:
        if bucket != "bkt":
            return None
        return [key for key in objects if key.startswith(prefix)]

    def problem(url: str, mode: str | None = "MultiModel") -> str | None:
        container: dict[str, Any] = {"ModelDataUrl": url}
        if mode:
            container["Mode"] = mode
        return model_data_problem(container, keys_under=keys_under)

    assert problem("s3://bkt/models/") is None
    assert problem("s3://bkt/models") is None
    assert problem("s3://bkt/empty/") == "Could not find model data at s3://bkt/empty/."
    assert problem("s3://other/models/") == "Could not find model data at s3://other/models/."
    assert problem("s3://bkt/one/model.tar.gz", mode=None) is None
    assert problem("s3://bkt/one/other.tar.gz", mode=None) is not None
    assert parse_s3_url("https://s3.us-east-1.amazonaws.com/bkt/models/") == ("bkt", "models/")


def test_fleet_plans() -> None:
    config: dict[str, Any] = {
        "EndpointConfigName": "c",
        "ProductionVariants": [
            {
                "VariantName": "AllTraffic",
                "ModelName": "m",
                "InstanceType": "ml.g4dn.xlarge",
                "InitialInstanceCount": 3,
            }
        ],
    }
    container = {
        "Image": TRITON_IMAGE,
        "ModelDataUrl": "s3://bkt/models/",
        "Mode": "MultiModel",
        "Environment": {"SAGEMAKER_TRITON_LOG_VERBOSE": "true"},
    }
    plan = plan_fleet("ep", config, {"PrimaryContainer": container})
    assert (plan.bucket, plan.prefix, plan.instances) == ("bkt", "models/", 3)
    assert plan.single_model_target is None
    assert dict(plan.environment) == {"SAGEMAKER_TRITON_LOG_VERBOSE": "true"}
    assert plan.gpu_memory_bytes == 15360 * MiB  # a T4
    assert (plan.variant_name, plan.weight) == (config["ProductionVariants"][0]["VariantName"], 1.0)

    single = container | {"Mode": "SingleModel", "ModelDataUrl": "s3://bkt/one/model.tar.gz"}
    plan = plan_fleet("ep", config, {"PrimaryContainer": single})
    assert (plan.prefix, plan.single_model_target) == ("one/", "model.tar.gz")

    xgboost = container | {
        "Image": "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
    }
    with pytest.raises(EndpointFailedError, match=r"sagemaker-xgboost:1\.7-1' is not one of them"):
        plan_fleet("ep", config, {"PrimaryContainer": xgboost})
    serverless = {
        "EndpointConfigName": "c",
        "ProductionVariants": [{"VariantName": "v", "ModelName": "m", "ServerlessConfig": {}}],
    }
    with pytest.raises(EndpointFailedError, match="serverless"):
        plan_fleet("ep", serverless, {"PrimaryContainer": container})
    assert is_triton_image("123.dkr.ecr.us-west-2.amazonaws.com/sagemaker-tritonserver@sha256:ab")
    assert not is_triton_image("nvcr.io/nvidia/pytorch:24.09-py3")
    assert card_memory_bytes("ml.g5.2xlarge") == 23028 * MiB
    assert card_memory_bytes("ml.m5.large") is None


def test_every_nvidia_instance_type_of_the_usual_families_has_its_card() -> None:
    """A variant on a GPU type the table lacks got no card cap at all (the host GPU's
    whole memory instead of the instance's card): every type of botocore's
    ProductionVariantInstanceType in the families the table covers is in it."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    families = ("ml.g4dn.", "ml.g5.", "ml.g6.", "ml.p3.", "ml.p4d.", "ml.p4de.", "ml.p5.")
    h200 = ("ml.p5e.", "ml.p5en.")  # the card a lent GPU machine had
    types = [
        t
        for t in model.shape_for("ProductionVariantInstanceType").enum
        if t.startswith((*families, *h200))
    ]
    assert "ml.g5.24xlarge" in types and "ml.p5e.48xlarge" in types
    assert [t for t in types if card_memory_bytes(t) is None] == []


class _Card:
    """Stands for an 80 GB GPU's NVML probe (no GPU here)."""

    name = "nvml:0"
    kind = "gpu"

    def read(self) -> MemoryReading:
        return MemoryReading(used_bytes=20 * 2**30, total_bytes=80 * 2**30)


def test_capped_probe_reports_the_instance_types_card() -> None:
    probe = CappedProbe(_Card(), 23028 * MiB)
    reading = probe.read()
    assert (reading.used_bytes, reading.total_bytes) == (20 * 2**30, 23028 * MiB)
    assert probe.kind == "gpu" and probe.name.startswith("nvml:0(cap 22.49 GiB")


def test_a_maps_entries_keys_and_values_are_checked_as_the_service_checks_them() -> None:
    """botocore checks neither a map's ``max`` entries nor its keys' and values' constraints
    (EnvironmentMap: 100 entries, keys ``[a-zA-Z_][a-zA-Z0-9_]*`` up to 1024, values up to
    1024); the service answers each, keys and values reported once with every constraint of
    their shape (its words, as services answer for a map: "Map keys must satisfy
    constraint: [...]"). Before: every one was accepted."""

    def create(environment: dict[str, str]) -> str | None:
        container = {"Image": "i", "Environment": environment}
        return model_violations(
            "CreateModel",
            {"ModelName": "m", "ExecutionRoleArn": ROLE, "PrimaryContainer": container},
        )

    many = create({f"K{i}": "v" for i in range(101)})
    assert many is not None and many.startswith("1 validation error detected: Value '{K0=v, ")
    assert many.endswith(
        "}' at 'primaryContainer.environment' failed to satisfy constraint: Member must have "
        "length less than or equal to 100"
    )
    assert create({f"K{i}": "v" for i in range(100)}) is None
    # a pattern matches the whole key: "A-B" starts with a valid name but is not one
    assert create({"A-B": "x", "GOOD": "y", "9X": "z"}) == (
        "1 validation error detected: Value '{A-B=x, GOOD=y, 9X=z}' at "
        "'primaryContainer.environment' failed to satisfy constraint: Map keys must satisfy "
        "constraint: [Member must have length less than or equal to 1024, Member must have "
        "length greater than or equal to 0, Member must satisfy regular expression pattern: "
        "[a-zA-Z_][a-zA-Z0-9_]*]"
    )
    long_value = create({"K": "v" * 1025})
    assert long_value is not None
    assert long_value.endswith(
        "failed to satisfy constraint: Map value must satisfy constraint: [Member must have "
        "length less than or equal to 1024, Member must have length greater than or equal to "
        "0, Member must satisfy regular expression pattern: [\\S\\s]*]"
    )


def test_a_list_over_its_models_max_is_a_violation() -> None:
    """ProductionVariants: at most 10 (botocore checks a list's ``min`` only)."""
    variants = [
        {"VariantName": f"v{i}", "ModelName": "m", "InstanceType": "ml.g5.xlarge"}
        for i in range(11)
    ]
    message = model_violations(
        "CreateEndpointConfig", {"EndpointConfigName": "c", "ProductionVariants": variants}
    )
    assert message is not None
    assert message.endswith(
        "at 'productionVariants' failed to satisfy constraint: Member must have length less "
        "than or equal to 10"
    )
    assert (
        model_violations(
            "CreateEndpointConfig", {"EndpointConfigName": "c", "ProductionVariants": variants[:10]}
        )
        is None
    )


def test_the_environments_of_a_models_containers_hold_32_kb_at_most() -> None:
    """The API reference's prose limit (no figure in botocore's model): keys and values of
    all containers' Environment maps together, at most 32 KB."""
    half = {f"K{i}": "v" * 1000 for i in range(17)}  # 17,000+ bytes
    two = {"PrimaryContainer": {"Environment": half}, "Containers": [{"Environment": half}]}
    problem = environment_problem(two)
    assert problem is not None and "34,000" not in problem and "32 KB (32768 bytes)" in problem
    assert environment_problem({"PrimaryContainer": {"Environment": half}}) is None
