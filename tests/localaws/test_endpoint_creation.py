"""CreateEndpoint as other callers see it while it runs: the test holds the call where moto
records the endpoint (before or after), and calls the local AWS meanwhile. The endpoints
here cost no Triton: a non-Triton image fails as soon as it is planned."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import model_and_config, unique, wait_status
from shared_helpers import listed

from mmelocal.localaws import LocalAws
from mmelocal.localaws.app import control_plane
from mmelocal.testing.tiny_model import write_tarball

#: an image the local AWS does not run: the endpoint fails as soon as it is planned
XGBOOST = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
CREATE_ENDPOINT = "SageMaker.CreateEndpoint"


@dataclass
class Held:
    """The first CreateEndpoint that reaches moto, held there until :attr:`release`."""

    after_moto: bool
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


def _hold(monkeypatch: pytest.MonkeyPatch, held: Held) -> None:
    """Hold the first CreateEndpoint before moto records it, or after (``held``)."""
    forward = control_plane.moto_json

    def holding(moto_app: Any, environ: dict[str, Any]) -> tuple[int, Any]:
        first = environ.get("HTTP_X_AMZ_TARGET") == CREATE_ENDPOINT and not held.reached.is_set()
        if first and not held.after_moto:
            held.reached.set()
            held.release.wait(60)
        answer = forward(moto_app, environ)
        if first and held.after_moto:
            held.reached.set()
            held.release.wait(60)
        return answer

    monkeypatch.setattr(control_plane, "moto_json", holding)


@pytest.fixture
def failing_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A local AWS of the test's own, the environment pointed at it, and an endpoint config
    whose endpoints fail at once."""
    with LocalAws() as aws:
        for key, value in aws.env().items():
            monkeypatch.setenv(key, value)
        s3 = boto3.client("s3")
        bucket = unique("creation")
        s3.create_bucket(Bucket=bucket)
        s3.upload_file(str(write_tarball(tmp_path / "m.tar.gz", scale=2.0)), bucket, "m.tar.gz")
        yield model_and_config(f"s3://{bucket}/", image=XGBOOST)


def _create_held(pool: ThreadPoolExecutor, held: Held, name: str, config: str) -> Future[Any]:
    """CreateEndpoint on another thread, once it is held."""
    created = pool.submit(
        boto3.client("sagemaker").create_endpoint, EndpointName=name, EndpointConfigName=config
    )
    assert held.reached.wait(60)
    return created


def test_an_endpoint_moto_has_recorded_shows_creating(
    failing_config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the moment moto records the endpoint, it is Creating: DescribeEndpoint and
    ListEndpoints showed moto's record, InService, until its lifecycle began (a caller
    polling from another thread saw in service an endpoint never planned; the service
    shows Creating while "CreateEndpoint is executing": botocore's sagemaker model,
    ``EndpointStatus``)."""
    held = Held(after_moto=True)
    _hold(monkeypatch, held)
    sm, name = boto3.client("sagemaker"), unique("recorded")
    with ThreadPoolExecutor(1) as pool:
        created = _create_held(pool, held, name, failing_config)
        try:
            assert sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "Creating"
            (summary,) = listed(sm, "list_endpoints", NameContains=name)
            assert summary["EndpointStatus"] == "Creating"
        finally:
            held.release.set()
        created.result()
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "Failed"


def test_of_two_creations_of_one_name_at_once_the_second_is_refused(
    failing_config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second CreateEndpoint of a name whose creation has not reached moto yet is refused
    as the service refuses an existing name; both were accepted (moto overwrites its
    record), and the first one's fleet ran on, known to no one."""
    held = Held(after_moto=False)
    _hold(monkeypatch, held)
    sm, name = boto3.client("sagemaker"), unique("twice")
    with ThreadPoolExecutor(1) as pool:
        created = _create_held(pool, held, name, failing_config)
        try:
            with pytest.raises(ClientError, match="Cannot create already existing endpoint"):
                sm.create_endpoint(EndpointName=name, EndpointConfigName=failing_config)
        finally:
            held.release.set()
        created.result()
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "Failed"
