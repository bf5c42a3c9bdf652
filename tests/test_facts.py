"""The platform's facts (``mmelocal.facts``) against their sources, and the client policies."""

from __future__ import annotations

import botocore.session
import pytest

from mmelocal.bench.capacity.projection import load_gpus
from mmelocal.facts import aws, cards, sagemaker
from mmelocal.units import MiB


def test_the_payload_cap_is_botocores_body_limit() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    invoke = model.operation_model("InvokeEndpoint").input_shape
    assert invoke.members["Body"].metadata["max"] == sagemaker.MAX_PAYLOAD_BYTES


def test_the_target_model_header_is_botocores() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    invoke = model.operation_model("InvokeEndpoint").input_shape
    assert invoke.members["TargetModel"].serialization["name"] == sagemaker.TARGET_MODEL_HEADER


def test_unload_outwaits_triton_and_loads_are_named_apart() -> None:
    assert sagemaker.UNLOAD_TIMEOUT_S > sagemaker.TRITON_UNLOAD_WAIT_S
    assert sagemaker.DIRECT_LOAD_TIMEOUT_S < sagemaker.LOAD_LIMIT_S


def test_a_policy_is_a_botocore_config_and_overrides_win() -> None:
    config = aws.LOCAL.config(read_timeout=7, s3={"addressing_style": "path"})
    assert config.connect_timeout == aws.LOCAL.connect_timeout_s
    assert config.read_timeout == 7
    assert config.retries == {"max_attempts": aws.LOCAL.retries, "mode": "standard"}
    assert config.s3 == {"addressing_style": "path"}


def test_the_factory_makes_a_client_with_the_policy() -> None:
    session = botocore.session.get_session()
    import boto3

    boto = boto3.session.Session(
        botocore_session=session,
        region_name=aws.LOCAL_REGION,
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    client = aws.aws_client(
        "sagemaker-runtime", aws.RUNTIME, session=boto, endpoint_url="http://127.0.0.1:9"
    )
    assert client.meta.config.read_timeout == aws.RUNTIME.read_timeout_s
    assert client.meta.endpoint_url == "http://127.0.0.1:9"


def test_card_memory_and_the_published_reading_are_two_facts() -> None:
    t4 = next(g for g in load_gpus() if g.name == "T4")
    reading = cards.published_reading("T4")
    assert reading.ecc and reading.nvml_total_mib * MiB < t4.memory_bytes
    with pytest.raises(KeyError, match="A10G"):
        cards.published_reading("A10G")
