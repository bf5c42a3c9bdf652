"""The ``local_aws`` and ``local_aws_env`` pytest fixtures: a local AWS for SageMaker MME.

Usage in a test::

    def test_my_script(local_aws_env):
        import boto3
        sm = boto3.client("sagemaker")          # reaches the local AWS: no other change
        ...

``local_aws`` is one :class:`~mmelocal.localaws.LocalAws` for the whole session (its
``url`` is the ``AWS_ENDPOINT_URL`` value; moto's state is shared, so name resources
uniquely). ``local_aws_env`` points the environment at it for one test: the endpoint
URL, a region, keys, and no profile or shared files. Override ``local_aws_options`` (a
dict of ``LocalAws`` arguments) in a ``conftest.py`` to change the memory budget.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from mmelocal.localaws import LocalAws


@pytest.fixture(scope="session")
def local_aws_options() -> dict[str, Any]:
    """``LocalAws`` arguments for ``local_aws`` (override this fixture to change them)."""
    return {"memory_budget_bytes": 2 * 1024**3}


@pytest.fixture(scope="session")
def local_aws(
    tmp_path_factory: pytest.TempPathFactory, local_aws_options: dict[str, Any]
) -> Iterator[LocalAws]:
    """A running local AWS (S3, SageMaker with real endpoints, autoscaling, STS)."""
    from mmelocal.localaws import LocalAws

    options: dict[str, Any] = {"data_dir": tmp_path_factory.mktemp("local-aws"), "persist": False}
    options.update(local_aws_options)
    with LocalAws(**options) as aws:
        yield aws


@pytest.fixture
def local_aws_env(
    local_aws: LocalAws, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> LocalAws:
    """The environment of a user whose AWS is ``local_aws`` (for this test only)."""
    point_environment_at(monkeypatch, local_aws, tmp_path_factory.mktemp("no-aws-files"))
    return local_aws


#: variables that would take a client's calls elsewhere whatever ``AWS_ENDPOINT_URL`` says:
#: botocore reads ``AWS_ENDPOINT_URL_<SERVICE>`` first and none of them under the opt-out
#: (botocore/configprovider.py, ``ConfiguredEndpointProvider``)
_ENDPOINT_OVERRIDES = ("AWS_ENDPOINT_URL_", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")


def point_environment_at(env: pytest.MonkeyPatch, local_aws: LocalAws, empty: Path) -> None:
    """Set what ``local_aws_env`` sets through ``env`` (a module-scoped fixture's own
    ``MonkeyPatch``, say): the endpoint URL, a region, keys, the HTTPS proxy, and no profile,
    session token, shared files (``empty`` is a folder with none) or service-specific
    endpoint of the user's own."""
    for name in list(os.environ):
        if name.startswith(_ENDPOINT_OVERRIDES):
            env.delenv(name)
    for name, value in local_aws.env().items():
        env.setenv(name, value)
        if name == "HTTPS_PROXY":  # urllib (botocore's proxies) prefers the lower-case one
            env.setenv("https_proxy", value)
    env.setenv("AWS_EC2_METADATA_DISABLED", "true")
    env.setenv("AWS_CONFIG_FILE", str(empty / "config"))
    env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty / "credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION"):
        env.delenv(name, raising=False)


__all__ = ["local_aws", "local_aws_env", "local_aws_options", "point_environment_at"]
