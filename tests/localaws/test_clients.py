"""Every client reaches the local AWS through the variables boto3 and the AWS CLI read:
``AWS_ENDPOINT_URL`` alone, or the service-specific ``AWS_ENDPOINT_URL_<SERVICE>``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import model_and_config, unique, wait_gone, wait_status

from mmelocal.localaws import LocalAws
from mmelocal.testing.tiny_model import expected, request_json, write_tarball


def aws_cli() -> str | None:
    """The ``aws`` command beside this Python, else on PATH (None when not installed)."""
    beside = Path(sys.executable).parent / "aws"
    return str(beside) if beside.exists() else shutil.which("aws")


def test_service_specific_variables_route_each_client(
    local_aws_env: LocalAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    for service in ("S3", "SAGEMAKER", "SAGEMAKER_RUNTIME", "STS", "APPLICATION_AUTO_SCALING"):
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", local_aws_env.url)
    bucket = unique("routing")
    boto3.client("s3").create_bucket(Bucket=bucket)
    assert bucket in [b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]]
    # the server's own moto account: 123456789012 unless another local AWS of this process
    # (a module's own) claimed it first (test_accounts.py)
    account = local_aws_env.account_id
    assert boto3.client("sts").get_caller_identity()["Account"] == account
    assert isinstance(boto3.client("sagemaker").list_models()["Models"], list)
    targets = boto3.client("application-autoscaling").describe_scalable_targets(
        ServiceNamespace="sagemaker"
    )
    assert isinstance(targets["ScalableTargets"], list)
    with pytest.raises(ClientError) as info:
        boto3.client("sagemaker-runtime").invoke_endpoint(
            EndpointName="nobody", Body=b"{}", TargetModel="model.tar.gz"
        )
    assert info.value.response["Error"] == {
        "Code": "ValidationError",
        "Message": f"Endpoint nobody of account {account} not found.",
    }


@pytest.fixture
def users_own_aws_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user's shell may hold when the suite starts: docs/serve.md's runtime line, an
    S3 stand-in of their own, an opt-out of configured endpoints and a corporate proxy."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", "http://127.0.0.1:8080")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
    monkeypatch.setenv("https_proxy", "http://proxy.corp.example:3128")
    monkeypatch.setenv("AWS_SECURITY_TOKEN", "a-real-session-token")  # botocore's older name


def test_local_aws_env_wins_over_the_users_own_variables(
    users_own_aws_variables: None, local_aws_env: LocalAws
) -> None:
    """botocore reads ``AWS_ENDPOINT_URL_<SERVICE>`` before ``AWS_ENDPOINT_URL`` and none
    of them under ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`` (botocore/configprovider.py,
    ConfiguredEndpointProvider); urllib, which botocore's proxies come from, prefers the
    lower-case ``https_proxy``: each would take a test's calls away from the local AWS."""
    import urllib.request

    for service in ("s3", "sagemaker", "sagemaker-runtime", "sts", "application-autoscaling"):
        assert boto3.client(service).meta.endpoint_url == local_aws_env.url, service
    assert urllib.request.getproxies()["https"] == local_aws_env.url
    credentials = boto3.session.Session().get_credentials()
    assert credentials is not None and credentials.token is None


@pytest.mark.triton
def test_the_aws_cli(local_aws_env: LocalAws, tmp_path: Path) -> None:
    cli = aws_cli()
    if cli is None:
        pytest.skip("the AWS CLI is not installed (pip install awscli)")
    env = dict(os.environ)

    def aws(*args: str) -> str:
        done = subprocess.run(
            [cli, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    bucket = unique("cli")
    aws("s3", "mb", f"s3://{bucket}")
    tarball = write_tarball(tmp_path / "model.tar.gz", scale=6.0)
    aws("s3", "cp", str(tarball), f"s3://{bucket}/models/model-7.tar.gz")
    assert "model-7.tar.gz" in aws("s3", "ls", f"s3://{bucket}/models/")

    sm = boto3.client("sagemaker")
    name = unique("cli")
    config = model_and_config(f"s3://{bucket}/models/", instance_type="ml.g6.xlarge")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
    described = json.loads(aws("sagemaker", "describe-endpoint", "--endpoint-name", name))
    assert (described["EndpointStatus"], described["EndpointConfigName"]) == ("InService", config)

    request = tmp_path / "request.json"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    request.write_text(json.dumps(request_json(x)))
    out = tmp_path / "answer.json"
    aws(
        "sagemaker-runtime", "invoke-endpoint", "--endpoint-name", name,
        "--target-model", "model-7.tar.gz", "--content-type", "application/json",
        "--body", f"fileb://{request}", str(out),
    )  # fmt: skip
    answer = json.loads(out.read_text())["outputs"][0]
    assert answer["data"] == expected(x, 6.0).ravel().tolist()
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)
