"""How many describes a deploy and an undeploy make of what else the account holds: no API
finds a model by what it reads, or the endpoints by the config they serve, so each is
described, but once, and only when its answer is needed. moto in this process (its
endpoints are InService at once, and start no Triton), counted with botocore event hooks."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import INSTANCE_TYPE, ROLE, write_reference_tarball

from mmelocal.aws.s3 import ENDPOINT_METADATA, SHA256_METADATA
from mmelocal.aws.session import AwsClients, connect
from mmelocal.deploy.deployer import apply_plan, make_plan, undeploy
from mmelocal.deploy.plan import DeployOptions

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
TAG = [{"Key": "mmelocal:endpoint", "Value": "ep"}]


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[AwsClients]:
    """mmelocal's clients on moto's in-process AWS (no endpoint URL, no profile)."""
    moto = pytest.importorskip("moto")
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with moto.mock_aws():
        yield connect()


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
    s3.create_bucket(Bucket="bkt")
    for prefix in ("a/", "b/"):
        for i in range(3):
            metadata = {SHA256_METADATA: f"{i:064x}", ENDPOINT_METADATA: "ep"}
            s3.put_object(Bucket="bkt", Key=f"{prefix}m-{i}.tar.gz", Body=b"x", Metadata=metadata)
    _model(sm, "ep-own", "s3://bkt/a/", Tags=TAG)
    for i in range(5):
        _model(sm, f"other-{i}", f"s3://elsewhere/{i}/")
    _model(sm, "reads-b1", "s3://bkt/b/m-1.tar.gz", mode="SingleModel")
    described = _asked(sm, "DescribeModel", "ModelName")

    done = undeploy(clients, "ep", delete_artifacts=True, keep_shared=True, s3_uri="s3://bkt/b/")
    assert Counter(described) == Counter(["ep-own", *(f"other-{i}" for i in range(5)), "reads-b1"])
    assert "3 objects under s3://bkt/a/" in done and "2 objects under s3://bkt/b/" in done
    assert "kept 1 objects under s3://bkt/b/, read by model reads-b1 (1 object)" in done
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt")["Contents"]] == ["b/m-1.tar.gz"]


def test_a_store_change_reads_no_endpoint_config_of_other_endpoints(
    clients: AwsClients, tmp_path: Path
) -> None:
    """A deploy that changed the store supersedes the endpoint config, not the model: it
    asked DescribeEndpointConfig of every config the account's endpoints serve (to learn
    the models they name), at plan time and again once InService (moto has no
    UpdateEndpoint: the plan is what this test reads). It now reads which configs are in
    use (a DescribeEndpoint each) and describes no config but its own."""
    sm = clients.sagemaker
    clients.s3.create_bucket(Bucket="bkt")
    store = tmp_path / "store"
    for i in range(2):
        write_reference_tarball(store / f"model-{i}.tar.gz", scale=float(i + 2))
    opts = DeployOptions(store=store, endpoint_name="ep", s3_uri="s3://bkt/models",
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
