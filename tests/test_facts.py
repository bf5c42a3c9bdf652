"""The platform's facts (``mmelocal.facts``) against their sources, and the client policies."""

from __future__ import annotations

from pathlib import Path

import botocore.session
import pytest

from mmelocal.bench.capacity.projection import load_gpus
from mmelocal.errors import UserInputError
from mmelocal.facts import aws, cards, sagemaker, triton_images
from mmelocal.units import MiB


def test_the_payload_cap_is_botocores_body_limit() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    invoke = model.operation_model("InvokeEndpoint").input_shape
    assert invoke.members["Body"].metadata["max"] == sagemaker.MAX_PAYLOAD_BYTES


def test_the_target_model_header_is_botocores() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    invoke = model.operation_model("InvokeEndpoint").input_shape
    assert invoke.members["TargetModel"].serialization["name"] == sagemaker.TARGET_MODEL_HEADER


def test_model_not_ready_is_botocores_error_shape() -> None:
    """The error type the load test's pre-warm, the endpoint bench and the emulator's table
    name is botocore's shape, with the status the emulator answers."""
    from mmelocal.errors import ModelNotReadyError
    from mmelocal.facts.invoke_errors import MODEL_NOT_READY, error_kind

    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    shape = model.shape_for(MODEL_NOT_READY)
    kind = error_kind(ModelNotReadyError("", target_model=""))
    assert kind.error_type == MODEL_NOT_READY
    assert shape.metadata["error"]["httpStatusCode"] == kind.status == 429


def test_unload_outwaits_triton_and_loads_are_named_apart() -> None:
    assert sagemaker.UNLOAD_TIMEOUT_S > sagemaker.TRITON_UNLOAD_WAIT_S
    assert sagemaker.DIRECT_LOAD_TIMEOUT_S < sagemaker.LOAD_LIMIT_S


def test_a_policy_is_a_botocore_config_and_overrides_win() -> None:
    config = aws.LOCAL.config(read_timeout=7, s3={"addressing_style": "path"})
    assert config.connect_timeout == aws.LOCAL.connect_timeout_s
    assert config.read_timeout == 7
    assert config.retries == {"max_attempts": aws.LOCAL.retries, "mode": "standard"}
    assert config.s3 == {"addressing_style": "path"}


def test_the_factory_makes_a_client_with_the_policy() -> None:
    session = botocore.session.get_session()
    import boto3

    boto = boto3.session.Session(
        botocore_session=session,
        region_name=aws.LOCAL_REGION,
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    client = aws.aws_client(
        "sagemaker-runtime", aws.RUNTIME, session=boto, endpoint_url="http://127.0.0.1:9"
    )
    assert client.meta.config.read_timeout == aws.RUNTIME.read_timeout_s
    assert client.meta.endpoint_url == "http://127.0.0.1:9"


def _files_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths botocore's JSON file loader reads from now on (in order)."""
    from botocore.loaders import JSONFileLoader

    read: list[str] = []
    real = JSONFileLoader.load_file

    def load_file(self: JSONFileLoader, file_path: str) -> object:
        read.append(file_path)
        return real(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", load_file)
    return read


def test_new_sessions_parse_the_service_models_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every session reads its credentials and region when made; botocore's data files are
    parsed once per process: a second session's SageMaker client reads no file (each new
    boto3 session parsed SageMaker's service model again: 50 ms to 1 s each)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    first = aws.new_session(region_name="eu-west-1")
    first.client("sagemaker")
    read = _files_read(monkeypatch)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second")
    second = aws.new_session(region_name="us-west-2")
    client = second.client("sagemaker")
    assert read == []
    assert client.meta.region_name == "us-west-2"
    credentials = second.get_credentials()
    assert credentials is not None and credentials.access_key == "second"
    assert first.get_credentials().access_key == "first"
    assert second.get_available_regions("sagemaker")  # the endpoints data, shared too


def test_the_request_checks_read_the_shared_service_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """deploy's request validation and the local AWS's input checks and listings read
    botocore's SageMaker model; each check of another operation made a new botocore session
    (``get_session()``), which parsed the file again."""
    from mmelocal.deploy import resources
    from mmelocal.deploy.resources import validate_request
    from mmelocal.localaws import checks
    from mmelocal.localaws.checks import model_violations
    from mmelocal.localaws.listing import _summary_members

    for cached in (resources._input_shape, checks._service_model, _summary_members):
        cached.cache_clear()  # read again from the models, as a new process reads them
    aws.service_model("sagemaker")
    read = _files_read(monkeypatch)
    validate_request("sagemaker", "CreateModel", {"ModelName": "m"})
    assert model_violations("CreateEndpointConfig", {"EndpointConfigName": "c"}) is None
    assert "EndpointName" in _summary_members("ListEndpoints")
    assert read == []


def test_a_second_connect_parses_no_service_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy's, undeploy's and smoke's clients (``connect``): a second set reads no file
    (each parsed S3's and SageMaker's service models again, about 1 s per set here)."""
    from mmelocal.aws.session import connect

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    connect("us-east-1")
    read = _files_read(monkeypatch)
    clients = connect("eu-west-1")
    assert read == []
    assert clients.region == "eu-west-1" == clients.sagemaker.meta.region_name


def test_new_sessions_read_their_own_data_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``AWS_DATA_PATH`` (botocore's extra folders of models) is read per session, as boto3
    reads it: another value gets its own parsed files."""
    aws.new_session(region_name="us-east-1").client("sagemaker-runtime")
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    read = _files_read(monkeypatch)
    session = aws.new_session(region_name="us-east-1")
    session.client("sagemaker-runtime")
    assert any(path.endswith("sagemaker-runtime/2017-05-13/service-2") for path in read), read


def test_card_memory_and_the_published_reading_are_two_facts() -> None:
    t4 = next(g for g in load_gpus() if g.name == "T4")
    reading = cards.published_reading("T4")
    assert reading.ecc and reading.nvml_total_mib * MiB < t4.memory_bytes
    with pytest.raises(KeyError, match="A10G"):
        cards.published_reading("A10G")


class _AutoScalingErrors:
    """A loopback server that answers each Application Auto Scaling request with the next
    of ``answers`` (an error code, or '' for success), as the service's JSON protocol does;
    ``requests`` counts what it received."""

    def __init__(self, answers: list[str]) -> None:
        import http.server
        import json
        import threading

        self.answers, self.requests = answers, 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                code = owner.answers[min(owner.requests, len(owner.answers) - 1)]
                owner.requests += 1
                body = json.dumps({"__type": code, "message": "no"} if code else {}).encode()
                self.send_response(400 if code else 200)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_quota_error_is_not_retried_as_throttling() -> None:
    """botocore's standard mode counts LimitExceededException among its throttling codes
    (Kinesis's throttling error), but Application Auto Scaling answers it for a full
    per-account quota (its model: 'A per-account resource limit is exceeded'): retrying it
    5 times only delays the error. Real throttling is still retried."""
    import boto3
    from botocore.exceptions import ClientError

    boto = boto3.session.Session(
        region_name=aws.LOCAL_REGION, aws_access_key_id="k", aws_secret_access_key="s"
    )
    target = {
        "ServiceNamespace": "sagemaker",
        "ResourceId": "endpoint/ep/variant/AllTraffic",
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
    }
    for answers, attempts in ((["LimitExceededException"], 1), (["ThrottlingException", ""], 2)):
        server = _AutoScalingErrors(answers)
        try:
            client = aws.aws_client(
                "application-autoscaling", aws.CONTROL_PLANE, session=boto, endpoint_url=server.url
            )
            if answers[-1]:
                with pytest.raises(ClientError, match=answers[0]):
                    client.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2)
            else:
                client.register_scalable_target(**target, MinCapacity=1, MaxCapacity=2)
            assert server.requests == attempts, answers
        finally:
            server.close()


def test_the_target_model_rule_is_botocores_and_the_emulators() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    shape = model.operation_model("InvokeEndpoint").input_shape.members["TargetModel"]
    assert shape.metadata["pattern"] == sagemaker.TARGET_MODEL_PATTERN
    assert (shape.metadata["min"], shape.metadata["max"]) == (1, sagemaker.MAX_TARGET_MODEL_LENGTH)
    from mmelocal.emulator.store import validate_target
    from mmelocal.errors import InvalidTargetError

    # the emulator's store refuses what the service refuses, with the same words (it adds
    # its own rules for a safe key on top: '..', a leading '/')
    for target in ("", "x" * 1025, "a\x00b", "\tm", " m", "a\u2028b", "m.tar.gz", "é/m.tar.gz"):
        problem = sagemaker.target_model_problem(target)
        try:
            validate_target(target)
        except InvalidTargetError as exc:
            assert str(exc) == problem
        else:
            assert problem is None


def test_the_endpoint_statuses_are_botocores() -> None:
    from mmelocal.facts import runtime_api

    model = botocore.session.get_session().get_service_model("sagemaker")
    status = model.operation_model("DescribeEndpoint").output_shape.members["EndpointStatus"]
    for statuses in (runtime_api.IN_PROGRESS_STATUSES, runtime_api.NO_REQUESTS_STATUSES):
        assert statuses <= set(status.enum)
    assert runtime_api.UPDATE_ROLLBACK_FAILED in status.enum


def test_the_image_account_depends_on_the_release() -> None:
    """Two sets of accounts serve SageMaker's Triton images, by release: 23.12 and later in
    the Deep Learning Containers accounts (sagemaker-python-sdk
    ``image_uri_config/sagemaker-tritonserver.json``), earlier releases in the per-region
    accounts of the AWS Triton notebooks' ``account_id_map`` (amazon-sagemaker-examples
    ``sm-triton_mme_bert_trt.ipynb``: 785573368785 in us-east-1, release 23.02);
    deep-learning-containers ``available_images.md``, "NVIDIA Triton Inference Containers"."""
    uri = triton_images.sagemaker_image_uri
    assert uri("us-east-1", "24.09") == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
    )
    assert uri("us-east-1", "23.02") == (
        "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:23.02-py3"
    )
    assert uri("cn-north-1", "23.02").startswith(
        "472730292857.dkr.ecr.cn-north-1.amazonaws.com.cn/"
    )
    assert uri("cn-north-1", "24.05").startswith(
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/"
    )
    assert uri("il-central-1", "23.12").startswith("780543022126.")
    assert uri("ap-southeast-7", "25.04").startswith("590183813437.")


@pytest.mark.parametrize(
    ("region", "version", "there"),
    [
        ("us-east-1", "24.10", "24.09, 25.04"),  # never published for SageMaker
        ("cn-north-1", "25.09", "25.04 from account 727897471807"),  # the SDK has no cn- 25.09
        ("il-central-1", "23.02", "23.12"),  # the old accounts have no Tel Aviv
        ("us-east-1", "19.01", "21.08"),
    ],
)
def test_a_release_not_published_in_the_region_is_refused_with_what_is(
    region: str, version: str, there: str
) -> None:
    with pytest.raises(UserInputError, match="not in the image table") as caught:
        triton_images.sagemaker_image_uri(region, version)
    assert there in str(caught.value) and region in str(caught.value)
    with pytest.raises(UserInputError, match="no SageMaker Triton image known for region 'mars-1'"):
        triton_images.sagemaker_image_uri("mars-1", "24.09")


def test_the_default_release_is_the_newest_at_or_before_the_wheels_triton() -> None:
    """The pip wheel's tritonserver is 2.51 = NGC 24.10, which SageMaker never published;
    24.09 (2.50) is the newest SageMaker release at or before it, and its SageMaker front end
    (``docker/sagemaker/serve``, ``src/sagemaker_server.cc``) is r24.10's unchanged."""
    assert triton_images.WHEEL_TRITON_VERSION == "2.51"
    assert triton_images.ngc_image() == "nvcr.io/nvidia/tritonserver:24.10-py3"
    assert triton_images.DEFAULT_SAGEMAKER_RELEASE == "24.09"
    older = [v for v in triton_images.releases() if v <= triton_images.WHEEL_NGC_RELEASE]
    assert max(older) == triton_images.DEFAULT_SAGEMAKER_RELEASE
    assert triton_images.sagemaker_image_uri("eu-west-1").endswith(":24.09-py3")
