"""Fixtures for the deploy tests: AWS pointed at moto's server, a bucket, a small store."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import REGION, write_reference_tarball


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Four tarballs: model-1 is a hard link of model-0, one sits in a sub-folder."""
    root = tmp_path / "store"
    write_reference_tarball(root / "model-0.tar.gz", scale=2.0)
    os.link(root / "model-0.tar.gz", root / "model-1.tar.gz")
    write_reference_tarball(root / "model-2.tar.gz", scale=3.0)
    write_reference_tarball(root / "team" / "model-3.tar.gz", scale=4.0)
    return root


def _update_endpoint(self: Any) -> Any:
    """SageMaker's UpdateEndpoint for moto's server, which (5.2.5) has no handler for it:
    the endpoint moves to the new config's variants, as the service does once InService."""
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow

    backend = self.sagemaker_backend
    endpoint = backend.endpoints[self._get_param("EndpointName")]
    config = backend.describe_endpoint_config(self._get_param("EndpointConfigName"))
    endpoint.endpoint_config_name = config["EndpointConfigName"]
    endpoint.production_variants = endpoint._process_production_variants(
        config["ProductionVariants"]
    )
    endpoint.last_modified_time = utcnow()
    return ActionResult({"EndpointArn": endpoint.arn})


@pytest.fixture(scope="session")
def moto_aws(moto_s3: str) -> Iterator[str]:
    """moto's server with UpdateEndpoint added (see :func:`_update_endpoint`); its URL."""
    from moto.sagemaker.responses import SageMakerResponse

    had = hasattr(SageMakerResponse, "update_endpoint")
    if not had:
        SageMakerResponse.update_endpoint = _update_endpoint  # type: ignore[attr-defined]
    yield moto_s3
    if not had:
        del SageMakerResponse.update_endpoint  # type: ignore[attr-defined]


@pytest.fixture
def aws(moto_aws: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The environment of a user whose AWS is moto: endpoint, fake keys, region; no profile."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_aws)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no 169.254.169.254 look-ups
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    return moto_aws


@pytest.fixture
def bucket(aws: str) -> str:
    """A new empty bucket in moto's us-east-1."""
    import boto3

    name = f"mme-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=name)
    return name


@pytest.fixture
def endpoint_name() -> str:
    """A fresh endpoint name (moto's server is shared by the whole session)."""
    return f"ep-{uuid.uuid4().hex[:10]}"
