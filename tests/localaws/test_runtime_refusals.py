"""The runtime calls the local AWS does not serve are refused in the service's shapes,
never answered with a success whose result never comes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from mmelocal.localaws import LocalAws
from mmelocal.localaws.app import LocalAwsApp


def _app(*, endpoint_in_service: bool) -> LocalAwsApp:
    """The WSGI app with an endpoint manager that knows one endpoint (or none); whatever
    reaches moto fails the test."""

    def moto(environ: dict[str, Any], start_response: Any) -> Any:
        raise AssertionError(f"reached moto: {environ['PATH_INFO']}")

    def choose(wanted: str | None) -> Any:
        raise AssertionError("the call was routed to a variant")

    fleets = SimpleNamespace(choose=choose) if endpoint_in_service else None
    endpoints: Any = SimpleNamespace(variants=lambda region, name: fleets)
    return LocalAwsApp(
        moto_app=moto,
        endpoints=endpoints,
        keys_under=lambda bucket, prefix: None,
        internal=lambda region: None,
        account_id="123456789012",
    )


def _runtime_client(app: LocalAwsApp) -> Any:
    """A sagemaker-runtime client whose requests the app answers in-process."""
    from werkzeug.test import Client

    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url="http://local",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    wsgi = Client(app)

    def send(request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        answer = wsgi.open(
            request.url.removeprefix("http://local"),
            method=request.method,
            headers=dict(request.headers),
            data=request.body or b"",
        )
        raw = SimpleNamespace(stream=lambda **kw: iter([answer.get_data()]))
        return AWSResponse(request.url, answer.status_code, dict(answer.headers), raw)

    client.meta.events.register_first("before-send", send)
    return client


@pytest.mark.parametrize("in_service", [False, True])
def test_invoke_endpoint_async_is_refused(in_service: bool) -> None:
    runtime = _runtime_client(_app(endpoint_in_service=in_service))
    with pytest.raises(ClientError) as info:
        runtime.invoke_endpoint_async(EndpointName="ep", InputLocation="s3://bucket/in.json")
    error = info.value.response["Error"]
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Code"] == "ValidationError"
    if in_service:
        assert "not an asynchronous inference endpoint" in error["Message"]
    else:
        assert error["Message"] == "Endpoint ep of account 123456789012 not found."


def test_invoke_endpoint_async_through_the_local_aws(local_aws_env: LocalAws) -> None:
    with pytest.raises(ClientError) as info:
        boto3.client("sagemaker-runtime").invoke_endpoint_async(
            EndpointName="nobody", InputLocation="s3://bucket/in.json"
        )
    assert info.value.response["Error"] == {
        "Code": "ValidationError",
        "Message": f"Endpoint nobody of account {local_aws_env.account_id} not found.",
    }


def test_inference_component_name_is_refused() -> None:
    runtime = _runtime_client(_app(endpoint_in_service=True))
    with pytest.raises(ClientError) as info:
        runtime.invoke_endpoint(
            EndpointName="ep", Body=b"{}", InferenceComponentName="ic-1", TargetModel="m.tar.gz"
        )
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert info.value.response["Error"]["Code"] == "ValidationError"
    assert "ic-1" in info.value.response["Error"]["Message"]


@pytest.mark.parametrize("in_service", [False, True])
def test_invoke_endpoint_with_response_stream_is_refused(in_service: bool) -> None:
    runtime = _runtime_client(_app(endpoint_in_service=in_service))
    with pytest.raises(ClientError) as info:
        runtime.invoke_endpoint_with_response_stream(EndpointName="ep", Body=b"{}")
    error = info.value.response["Error"]
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Code"] == "ValidationError"
    if in_service:
        assert "response streaming" in error["Message"]
    else:
        assert error["Message"] == "Endpoint ep of account 123456789012 not found."
