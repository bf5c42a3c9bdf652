"""Fixtures for the deploy tests: AWS pointed at the local AWS, a small store, an endpoint
name (``bucket`` comes from ``tests/conftest.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from deploy_helpers import write_reference_tarball
from shared_helpers import delete_endpoint, listed, unique

if TYPE_CHECKING:
    from mmelocal.localaws import LocalAws


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Four tarballs: model-1 is a hard link of model-0, one sits in a sub-folder."""
    root = tmp_path / "store"
    write_reference_tarball(root / "model-0.tar.gz", scale=2.0)
    os.link(root / "model-0.tar.gz", root / "model-1.tar.gz")
    write_reference_tarball(root / "model-2.tar.gz", scale=3.0)
    write_reference_tarball(root / "team" / "model-3.tar.gz", scale=4.0)
    return root


@pytest.fixture
def aws(local_aws_env: LocalAws) -> str:
    """The environment of a user whose AWS is mmelocal's local AWS (endpoints that serve):
    endpoint URL, keys, region; no profile. Its URL."""
    return local_aws_env.url


@pytest.fixture
def endpoint_name(aws: str) -> Iterator[str]:
    """A fresh endpoint name (the local AWS is shared by the whole session); the endpoints
    whose name holds it are deleted after the test, so their Triton stops."""
    import boto3

    name = unique("ep")
    yield name
    sm = boto3.client("sagemaker")
    for endpoint in listed(sm, "list_endpoints", NameContains=name):
        if name in endpoint["EndpointName"] and endpoint["EndpointStatus"] != "Deleting":
            delete_endpoint(sm, endpoint["EndpointName"])
