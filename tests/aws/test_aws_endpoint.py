"""A deployed multi-model endpoint described once for every consumer
(:mod:`mmelocal.aws.endpoint`): ``mmelocal smoke``, the pytest plugin's
``--mmelocal-endpoint`` and the endpoint bench refuse the same endpoints with the same line,
and read the prefix of a model whose container is in ``Containers`` as well as in
``PrimaryContainer``. Endpoints on the session's local AWS: one whose image is not Triton's
fails at once (no server starts), one with SageMaker's Triton image serves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from shared_helpers import delete_endpoint, unique, wait_for

from mmelocal.errors import DeployError

ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
TRITON_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
#: an image the local AWS does not run: the endpoint goes Failed with this FailureReason
OTHER_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-server:1"
INSTANCE_TYPE = "ml.g4dn.xlarge"
#: the object under the endpoints' prefix (CreateModel wants model data there)
PLACED = "placeholder.tar.gz"


def _multi_model(image: str, url: str) -> dict[str, str]:
    return {"Image": image, "Mode": "MultiModel", "ModelDataUrl": url}


def _smoke(name: str) -> object:
    from mmelocal.aws.session import connect
    from mmelocal.deploy.smoke import smoke_endpoint

    return smoke_endpoint(connect(), name)


def _pytest_mode(name: str) -> object:
    from mmelocal.testing.remote_endpoint import find_endpoint

    return find_endpoint(name)


def _bench(name: str) -> object:
    from mmelocal.bench.endpoint.remote import connect_endpoint

    return connect_endpoint(name)


CONSUMERS: dict[str, Callable[[str], object]] = {
    "smoke": _smoke,
    "pytest": _pytest_mode,
    "bench": _bench,
}


@pytest.fixture
def endpoints(bucket: str) -> Iterator[Callable[..., str]]:
    """``make(primary=..., containers=...)``: a model, config and endpoint of a fresh name
    on the local AWS serving ``s3://bucket/mme/``; deleted after the test."""
    sm, made = boto3.client("sagemaker"), []
    boto3.client("s3").put_object(Bucket=bucket, Key=f"mme/{PLACED}", Body=b"x")

    def make(**model: Any) -> str:
        name = unique("desc")
        sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, **model)
        variant = {"VariantName": "AllTraffic", "ModelName": name,
                   "InstanceType": INSTANCE_TYPE, "InitialInstanceCount": 1}  # fmt: skip
        sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant])
        sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
        made.append(name)
        return name

    yield make
    for name in made:
        delete_endpoint(sm, name)


def _failed(name: str) -> str:
    sm = boto3.client("sagemaker")
    wait_for(
        lambda: sm.describe_endpoint(EndpointName=name)["EndpointStatus"] == "Failed",
        what=f"{name} to fail",
    )
    return str(sm.describe_endpoint(EndpointName=name)["FailureReason"])


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_every_consumer_refuses_the_same_endpoints_with_the_same_line(
    consumer: str, endpoints: Callable[..., str], bucket: str
) -> None:
    """smoke and the pytest mode read only ``PrimaryContainer`` (a multi-model container in
    ``Containers`` was 'not a multi-model endpoint'); the bench took a container without
    ``Mode`` for multi-model (the ContainerDefinition default is SingleModel), said
    'DescribeEndpoint failed' for a missing endpoint and 'wait until it is InService' for a
    Failed one, whose FailureReason it left out."""
    check = CONSUMERS[consumer]
    missing = unique("no-such")
    with pytest.raises(DeployError) as raised:
        check(missing)
    assert str(raised.value) == (
        f"endpoint {missing} does not exist in us-east-1: deploy it first, or name its region"
    )

    url = f"s3://{bucket}/mme/"
    single = endpoints(PrimaryContainer={"Image": OTHER_IMAGE, "ModelDataUrl": url + PLACED})
    _failed(single)
    with pytest.raises(DeployError) as raised:  # refused before its status
        check(single)
    assert str(raised.value) == (
        f"endpoint {single} is not a multi-model endpoint (its model {single} is in mode "
        "SingleModel): name one that serves an S3 prefix (Mode MultiModel)"
    )

    multi = endpoints(Containers=[_multi_model(OTHER_IMAGE, url)])
    reason = _failed(multi)
    with pytest.raises(DeployError) as raised:
        check(multi)
    assert str(raised.value) == (
        f"endpoint {multi} is Failed: it takes no requests ({reason}); test it once it is "
        "InService (mmelocal deploy creates or repairs it)"
    )


@pytest.mark.triton
def test_the_prefix_of_a_model_in_containers_is_read(
    endpoints: Callable[..., str], bucket: str
) -> None:
    """A model whose one container is in ``Containers`` (not ``PrimaryContainer``) serves
    its prefix; smoke's and the pytest mode's description read ``PrimaryContainer`` only and
    refused it as single-model."""
    from mmelocal.aws.endpoint import describe_mme
    from mmelocal.aws.session import connect
    from mmelocal.bench.endpoint.remote import connect_endpoint
    from mmelocal.testing.remote_endpoint import find_endpoint

    url = f"s3://{bucket}/mme/"
    name = endpoints(Containers=[_multi_model(TRITON_IMAGE, url)])
    sm = boto3.client("sagemaker")
    wait_for(
        lambda: sm.describe_endpoint(EndpointName=name)["EndpointStatus"] != "Creating",
        what=f"{name} out of Creating",
    )
    info = describe_mme(connect(), name)
    assert (info.status, info.model_data_url, info.model_name) == ("InService", url, name)
    assert (info.instance_type, info.instance_count) == (INSTANCE_TYPE, 1)
    found = find_endpoint(name)
    assert (found.bucket, found.prefix) == (bucket, "mme/")
    assert connect_endpoint(name).s3_url == url


def test_a_deleting_endpoint_whose_config_is_gone_names_its_status(
    endpoints: Callable[..., str], bucket: str, tmp_path: Path
) -> None:
    """Undeploy deletes the config while the endpoint is still going: the status says
    more than 'DescribeEndpointConfig failed ... Could not find'."""
    import dataclasses

    from mmelocal.aws.endpoint import describe_mme
    from mmelocal.aws.session import connect

    url = f"s3://{bucket}/mme/"
    name = endpoints(PrimaryContainer=_multi_model(OTHER_IMAGE, url))
    _failed(name)
    clients = connect()
    clients.sagemaker.delete_endpoint_config(EndpointConfigName=name)

    class Deleting:
        def __getattr__(self, attr: str) -> Any:
            return getattr(clients.sagemaker, attr)

        def describe_endpoint(self, **params: Any) -> Any:
            return {**clients.sagemaker.describe_endpoint(**params), "EndpointStatus": "Deleting"}

    with pytest.raises(DeployError, match=rf"^endpoint {name} is Deleting: it takes no requests"):
        describe_mme(dataclasses.replace(clients, sagemaker=Deleting()), name)
