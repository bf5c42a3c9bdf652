"""How many describes a deploy and an undeploy make of what else the account holds: no API
finds a model by what it reads, or the endpoints by the config they serve, so each is
described, but once, and only when its answer is needed. moto in this process (its
endpoints are InService at once, and start no Triton), counted with botocore event hooks.

moto's records are the process's, shared with the session's ``local_aws`` (tests/conftest.py)
when this xdist worker started it: the mock here keeps to a moto account of its own and
neither clears them at its start nor at its end (:func:`moto_of_its_own`)."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import INSTANCE_TYPE, ROLE, write_reference_tarball
from shared_helpers import unique

from mmelocal.aws.s3 import ENDPOINT_METADATA, SHA256_METADATA
from mmelocal.aws.session import AwsClients, connect
from mmelocal.deploy.deployer import apply_plan, make_plan, undeploy
from mmelocal.deploy.plan import DeployOptions
from mmelocal.localaws import LocalAws
from mmelocal.localaws.server import LOCAL_KEYS, MOTO_ACCOUNTS

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
TAG = [{"Key": "mmelocal:endpoint", "Value": "ep"}]


@contextlib.contextmanager
def moto_of_its_own() -> Iterator[str]:
    """moto's in-process AWS (``mock_aws``) in a moto account of its own (yielded): the
    clients made meanwhile send it as moto's ``x-moto-account-id`` header (a botocore event
    hook), so they neither see nor change the records of a ``LocalAws`` running in this
    process; and the mock neither resets moto's backends at its start nor at its stop
    (``start(reset=False)``, ``stop(remove_data=False)``: a reset clears every account's
    records). The account comes from the local AWS's registry (``MOTO_ACCOUNTS``), so no
    ``LocalAws`` is given it meanwhile; its records go when the last holder releases.
    ``MOTO_ACCOUNT_ID`` in the environment is no way to do this: moto reads it before the
    header, for every request of the process, the local AWS's included."""
    moto = pytest.importorskip("moto")
    from moto.core import DEFAULT_ACCOUNT_ID

    account = MOTO_ACCOUNTS.claim(DEFAULT_ACCOUNT_ID)
    mock = moto.mock_aws()
    mock.start(reset=False)
    try:
        yield account
    finally:
        mock.stop(remove_data=False)
        MOTO_ACCOUNTS.release(account, on_last=mock.reset)


def in_account(clients: AwsClients, account: str) -> AwsClients:
    """``clients``, each sending ``account`` as moto's ``x-moto-account-id`` header."""

    def header(request: Any, **_: Any) -> None:
        request.headers["x-moto-account-id"] = account

    for client in (clients.s3, clients.sagemaker, clients.autoscaling, clients.runtime):
        client.meta.events.register("before-sign", header)
    return clients


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[AwsClients]:
    """mmelocal's clients on moto's in-process AWS (no endpoint URL, no profile), in a
    moto account of their own (:func:`moto_of_its_own`)."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with moto_of_its_own() as account:
        yield in_account(connect(), account)


def test_the_mock_leaves_the_local_aws_records_alone(local_aws: LocalAws) -> None:
    """The session's local AWS (moto's records, in this process) keeps what it held before
    the mock, and shows nothing made in it; the mock saw none of the local AWS's records.
    ``mock_aws()`` reset every moto backend at its start and its end: a bucket the local AWS
    held before was gone after it (and the mock, in moto's default account, which the
    first local AWS of the process also files under, would have seen it meanwhile)."""
    import boto3

    local = boto3.client(
        "s3", endpoint_url=local_aws.url, region_name="us-east-1",
        aws_access_key_id=LOCAL_KEYS[0], aws_secret_access_key=LOCAL_KEYS[1],
    )  # fmt: skip
    before = unique("before")
    local.create_bucket(Bucket=before)
    try:
        with moto_of_its_own() as account:
            mocked = in_account(connect("us-east-1"), account).s3
            assert before not in [b["Name"] for b in mocked.list_buckets()["Buckets"]]
            mocked.create_bucket(Bucket="made-in-the-mock")
        held = [b["Name"] for b in local.list_buckets()["Buckets"]]
        assert before in held and "made-in-the-mock" not in held
    finally:
        local.delete_bucket(Bucket=before)


def _asked(client: Any, operation: str, param: str) -> list[str]:
    """The ``param`` of each ``operation`` call the client makes from now on."""
    seen: list[str] = []
    event = f"provide-client-params.{client.meta.service_model.service_name}.{operation}"
    client.meta.events.register(event, lambda params, **_: seen.append(str(params[param])))
    return seen


def _model(sm: Any, name: str, url: str, *, mode: str = "MultiModel", **more: Any) -> None:
    container = {"Image": IMAGE, "Mode": mode, "ModelDataUrl": url}
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer=container, **more)


def test_undeploy_describes_each_model_of_the_account_once_for_all_its_prefixes(
    clients: AwsClients,
) -> None:
    """Undeploy asked which model reads its objects once per prefix (a DescribeModel of
    every model in the account each time), and described its own models again. Each model
    is now described once, and what is found is the same."""
    s3, sm = clients.s3, clients.sagemaker
    bkt = unique("bkt")  # bucket names are global in moto, as in S3: all accounts'
    s3.create_bucket(Bucket=bkt)
    for prefix in ("a/", "b/"):
        for i in range(3):
            metadata = {SHA256_METADATA: f"{i:064x}", ENDPOINT_METADATA: "ep"}
            s3.put_object(Bucket=bkt, Key=f"{prefix}m-{i}.tar.gz", Body=b"x", Metadata=metadata)
    _model(sm, "ep-own", f"s3://{bkt}/a/", Tags=TAG)
    for i in range(5):
        _model(sm, f"other-{i}", f"s3://elsewhere/{i}/")
    _model(sm, "reads-b1", f"s3://{bkt}/b/m-1.tar.gz", mode="SingleModel")
    described = _asked(sm, "DescribeModel", "ModelName")

    done = undeploy(clients, "ep", delete_artifacts=True, keep_shared=True, s3_uri=f"s3://{bkt}/b/")
    assert Counter(described) == Counter(["ep-own", *(f"other-{i}" for i in range(5)), "reads-b1"])
    assert f"3 objects under s3://{bkt}/a/" in done and f"2 objects under s3://{bkt}/b/" in done
    assert f"kept 1 objects under s3://{bkt}/b/, read by model reads-b1 (1 object)" in done
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bkt)["Contents"]] == ["b/m-1.tar.gz"]


def test_a_store_change_reads_no_endpoint_config_of_other_endpoints(
    clients: AwsClients, tmp_path: Path
) -> None:
    """A deploy that changed the store supersedes the endpoint config, not the model: it
    asked DescribeEndpointConfig of every config the account's endpoints serve (to learn
    the models they name), at plan time and again once InService (moto has no
    UpdateEndpoint: the plan is what this test reads). It now reads which configs are in
    use (a DescribeEndpoint each) and describes no config but its own."""
    sm = clients.sagemaker
    bkt = unique("bkt")
    clients.s3.create_bucket(Bucket=bkt)
    store = tmp_path / "store"
    for i in range(2):
        write_reference_tarball(store / f"model-{i}.tar.gz", scale=float(i + 2))
    opts = DeployOptions(store=store, endpoint_name="ep", s3_uri=f"s3://{bkt}/models",
                         role_arn=ROLE, instance_type=INSTANCE_TYPE, max_instances=1,
                         poll_s=0.01, timeout_s=10)  # fmt: skip
    first = make_plan(opts, clients)
    assert apply_plan(first, clients, options=opts) == "InService"
    for i in range(4):
        _model(sm, f"other-{i}", f"s3://elsewhere/{i}/")
        variant = {"VariantName": "AllTraffic", "ModelName": f"other-{i}",
                   "InstanceType": INSTANCE_TYPE, "InitialInstanceCount": 1}  # fmt: skip
        sm.create_endpoint_config(EndpointConfigName=f"other-{i}", ProductionVariants=[variant])
        sm.create_endpoint(EndpointName=f"other-{i}", EndpointConfigName=f"other-{i}")
    write_reference_tarball(store / "model-1.tar.gz", scale=9.0)
    configs = _asked(sm, "DescribeEndpointConfig", "EndpointConfigName")
    endpoints = _asked(sm, "DescribeEndpoint", "EndpointName")

    second = make_plan(opts, clients)
    old, new = first.steps[1].resource, second.steps[1].resource
    assert [(s.operation, s.resource) for s in second.steps if s.action == "delete"] == [
        ("DeleteEndpointConfig", old)
    ]
    assert sorted(configs) == sorted([new, old])  # is the new one there; the endpoint's
    assert Counter(endpoints) == Counter(["ep", *(f"other-{i}" for i in range(4))])
