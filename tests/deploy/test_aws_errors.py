"""What a failed AWS call tells the user to do next: botocore's own answers (its Stubber
on mmelocal's real clients) for throttling that outlived the retries, an execution role
SageMaker cannot assume, and S3 objects under a KMS key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from deploy_helpers import INSTANCE_TYPE, ROLE

from mmelocal.deploy import resources as rs
from mmelocal.deploy.plan import DeployOptions, ObjectStep
from mmelocal.deploy.upload import apply_objects
from mmelocal.errors import DeployError
from mmelocal.facts.aws import CONTROL_PLANE, LOAD_TEST, RUNTIME, TESTING, ClientPolicy, aws_client

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"


def _client(service: str) -> Any:
    """mmelocal's client for ``service`` (deploy's policy), answering only what is stubbed."""
    session = boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    return aws_client(service, CONTROL_PLANE, session=session)


@pytest.fixture
def sagemaker() -> Iterator[tuple[Any, Stubber]]:
    client = _client("sagemaker")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_throttling_after_the_retries_says_what_was_retried_and_what_to_do(
    sagemaker: tuple[Any, Stubber],
) -> None:
    """A ThrottlingException that outlived the retries was shown bare: now the message says
    how many retries the call had, the policy (retries, mode) and what to do."""
    client, stubber = sagemaker
    stubber.add_client_error(
        "describe_endpoint", "ThrottlingException", "Rate exceeded",
        response_meta={"RetryAttempts": CONTROL_PLANE.retries},
    )  # fmt: skip
    with pytest.raises(DeployError) as caught:
        rs.describe(client, "DescribeEndpoint", EndpointName="ep")
    text = str(caught.value)
    assert f"after {CONTROL_PLANE.retries} retries" in text
    assert f"retry throttling {CONTROL_PLANE.retries} times" in text and "'standard'" in text
    assert "run the same command again" in text and "\n" not in text
    assert caught.value.code == "ThrottlingException"


def test_an_execution_role_sagemaker_cannot_assume_says_how_to_fix_the_role(
    sagemaker: tuple[Any, Stubber], tmp_path: Path
) -> None:
    """CreateModel's ValidationException for a role SageMaker cannot assume (the service's
    words) had no hint: now it names the trust policy, the principal and iam:PassRole."""
    client, stubber = sagemaker
    message = (
        f"Could not assume role {ROLE}. Please ensure that the role exists and allows "
        "principal 'sagemaker.amazonaws.com' to assume the role."
    )
    stubber.add_client_error("create_model", "ValidationException", message)
    opts = DeployOptions(store=tmp_path, endpoint_name="ep", s3_uri="s3://bkt/m/",
                         role_arn=ROLE, instance_type=INSTANCE_TYPE)  # fmt: skip
    params = rs.model_params(opts, IMAGE)
    with pytest.raises(DeployError) as caught:
        rs.call(client, "CreateModel", params["ModelName"], **params)
    text = str(caught.value)
    assert text.startswith(f"CreateModel failed for {params['ModelName']}: ValidationException")
    assert "sagemaker.amazonaws.com" in text.split(message)[1]
    assert "sts:AssumeRole" in text and "iam:PassRole" in text and "--role" in text


def test_an_upload_refused_for_its_kms_key_names_the_key_permissions(tmp_path: Path) -> None:
    """An upload to a bucket under SSE-KMS that the caller may not use the key of: boto3's
    upload_file wraps the ClientError (S3UploadFailedError), so the message had neither the
    code nor a hint. Now it has S3's code and says which KMS permissions are missing."""
    s3 = _client("s3")
    denied = (
        "User: arn:aws:iam::123456789012:user/dev is not authorized to perform: "
        "kms:GenerateDataKey on resource: arn:aws:kms:us-east-1:123456789012:key/k1"
    )
    tarball = tmp_path / "model-0.tar.gz"
    tarball.write_bytes(b"x")
    step = ObjectStep(key="m/model-0.tar.gz", path=str(tarball), size_bytes=1,
                      sha256="0" * 64, action="upload")  # fmt: skip
    with Stubber(s3) as stubber:
        stubber.add_client_error("put_object", "AccessDenied", denied, http_status_code=403)
        with pytest.raises(DeployError) as caught:
            apply_objects(s3, "bkt", [step], endpoint_name="ep")
    text = str(caught.value)
    assert caught.value.code == "AccessDenied" and "PutObject failed" in text
    assert "kms:GenerateDataKey and kms:Decrypt" in text and "SageMaker execution role" in text
    assert "IAM policy" not in text


@pytest.mark.parametrize(
    "code", ["KMS.DisabledException", "KMS.KMSInvalidStateException", "KMS.NotFoundException"]
)
def test_s3_kms_errors_say_the_key_must_be_usable(code: str) -> None:
    """S3 answers a KMS failure with the KMS error's code under a ``KMS.`` prefix."""
    s3 = _client("s3")
    with Stubber(s3) as stubber:
        stubber.add_client_error("get_object", code, "key arn:aws:kms:us-east-1:1:key/k1")
        with pytest.raises(Exception) as caught:
            s3.get_object(Bucket="bkt", Key="m/model-0.tar.gz")
    from mmelocal.aws.session import aws_error

    text = str(aws_error(caught.value, "GetObject", "s3://bkt/m/model-0.tar.gz"))
    assert f": {code}: " in text and "enabled (not disabled or pending deletion)" in text


@pytest.mark.parametrize("policy", [RUNTIME, LOAD_TEST, TESTING])
def test_throttling_names_the_retry_policy_of_the_client_that_failed(policy: ClientPolicy) -> None:
    """The throttling hint quoted deploy's policy (5 retries, standard mode) whatever the
    client: a runtime client (3 retries), the load generator's (none) or the tests' (one,
    legacy mode) were said to retry as deploy's do. It now states the failed client's."""
    session = boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    runtime = aws_client("sagemaker-runtime", policy, session=session)
    with Stubber(runtime) as stubber:
        stubber.add_client_error(
            "invoke_endpoint", "ThrottlingException", "Rate exceeded",
            response_meta={"RetryAttempts": policy.retries},
        )  # fmt: skip
        with pytest.raises(Exception) as caught:
            runtime.invoke_endpoint(EndpointName="ep", Body=b"{}")
    from mmelocal.aws.session import aws_error

    text = str(aws_error(caught.value, "InvokeEndpoint", "ep"))
    assert f"mmelocal's {policy.purpose} clients" in text, text
    if policy.retries:
        assert f"retry throttling {policy.retries} times in botocore's {policy.mode!r}" in text
    else:
        assert "do not retry" in text
    assert f"{CONTROL_PLANE.retries} times" not in text or policy.retries == CONTROL_PLANE.retries


def test_throttling_of_a_client_mmelocal_did_not_make_claims_no_policy() -> None:
    """A client made elsewhere (a user's boto3 client) retries by its own settings."""
    client = boto3.client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    with Stubber(client) as stubber:
        stubber.add_client_error("describe_endpoint", "ThrottlingException", "Rate exceeded")
        with pytest.raises(DeployError) as caught:
            rs.describe(client, "DescribeEndpoint", EndpointName="ep")
    text = str(caught.value)
    assert "mmelocal's" not in text and "its own retry settings" in text, text
