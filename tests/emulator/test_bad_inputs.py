"""At least 30 bad inputs: each gets the right 4xx and a clear message; the emulator stays up
and nothing is written outside its cache folder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from emulator_helpers import output_of, payload, raw_request
from emulator_hostile import make_hostile

from mmelocal.emulator.platform import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton

MiB = 1024 * 1024
GOOD = "model-0.tar.gz"
JSON = "application/json"


class Setup:
    def __init__(self, root: Path, url: str, store: Path, escape: Path) -> None:
        self.root, self.url, self.store, self.escape = root, url, store, escape

    def invoke(
        self, target: str | None, body: bytes, content_type: str = JSON, endpoint: str = "ep"
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        headers = [("Content-Type", content_type)]
        if target is not None:
            headers.append(("X-Amzn-SageMaker-Target-Model", target))
        status, out, data = raw_request(
            self.url, "POST", f"/endpoints/{endpoint}/invocations", headers, body
        )
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = {"raw": data.decode("latin-1")}
        return status, out, parsed


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "cache" not in p.parts}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("bad")
    store = root / "store"
    store.mkdir()
    escape = root / "escape"
    escape.mkdir()
    (escape / "target.txt").write_text("secret")
    write_tarball(store / GOOD, scale=3.0)
    make_hostile(store, escape)
    config = EmulatorConfig(
        store=str(store),
        cache_dir=root / "cache",
        disk_budget_bytes=64 * MiB,
        memory_budget_bytes=2048 * MiB,
        endpoint_name="ep",
    )
    with EmulatorServer(config) as server:
        yield Setup(root, server.url, store, escape)


_, GOOD_BODY = payload(rows=1)
BAD_TARGETS = [
    ("../model-0.tar.gz", "'..'"),
    ("a/../../etc/passwd", "'..'"),
    ("/etc/passwd", "leading '/'"),
    ("./model-0.tar.gz", "'.'"),
    ("a//b.tar.gz", "empty path segments"),
    ("a\\b.tar.gz", "backslash"),
    ("x" * 2000, "at most 1024"),
    ("", "must not be empty"),
    ("missing.tar.gz", "not found"),
    ("sub/missing.tar.gz", "not found"),
]


@pytest.mark.parametrize(("target", "words"), BAD_TARGETS)
def test_bad_target_names(setup: Setup, target: str, words: str) -> None:
    status, headers, body = setup.invoke(target, GOOD_BODY)
    assert status == 400, body
    assert headers["x-amzn-errortype"] == "ValidationError"
    assert body["__type"] == "ValidationError"
    assert words in body["message"]


@pytest.mark.parametrize("target", ["model\x00.tar.gz", "model\x01.tar.gz", "a\x7f"])
def test_nul_and_control_characters_are_refused(setup: Setup, target: str) -> None:
    status, _, body = setup.invoke(target, GOOD_BODY)
    assert status == 400
    text = json.dumps(body)
    assert "Invalid header value char" in text or "control characters" in text


def test_missing_target_header_and_unknown_endpoint(setup: Setup) -> None:
    status, _, body = setup.invoke(None, GOOD_BODY)
    assert status == 400 and "multi-model endpoint" in body["message"]
    status, _, body = setup.invoke(GOOD, GOOD_BODY, endpoint="other")
    assert status == 400 and "Endpoint other not found" in body["message"]


HOSTILE = [
    ("evil-traversal.tar.gz", 400),
    ("evil-absolute.tar.gz", 400),
    ("evil-symlink.tar.gz", 400),
    ("evil-hardlink.tar.gz", 400),
    ("evil-device.tar.gz", 400),
    ("evil-fifo.tar.gz", 400),
    ("evil-bomb.tar.gz", 400),
    ("no-config.tar.gz", 424),  # Triton refuses the load (400): a ModelError
    ("not-gzip.tar.gz", 400),
    ("empty.tar.gz", 400),
    ("truncated.tar.gz", 400),
    ("broken-config.tar.gz", 424),  # the container refuses the load (400): a ModelError
    ("failing-init.tar.gz", 424),
]


@pytest.mark.parametrize(("target", "code"), HOSTILE)
def test_hostile_tarballs(setup: Setup, target: str, code: int) -> None:
    status, _, body = setup.invoke(target, GOOD_BODY)
    assert status == code, body
    assert len(body["message"]) > 20
    if code == 424:
        assert body["__type"] == "ModelError"
        assert body["OriginalStatusCode"] == 400
    assert (setup.escape / "target.txt").read_text() == "secret"
    assert sorted(p.name for p in setup.escape.iterdir()) == ["target.txt"]


def _v2(inputs: list[dict[str, Any]]) -> bytes:
    return json.dumps({"inputs": inputs}).encode()


BAD_PAYLOADS = [
    ("not json", b"hello world", JSON),
    ("json array", b"[1, 2, 3]", JSON),
    ("empty body", b"", JSON),
    ("no inputs", b"{}", JSON),
    (
        "tensor name",
        _v2([{"name": "NOPE", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]),
        JSON,
    ),
    (
        "dtype",
        _v2([{"name": "INPUT0", "shape": [1, 4], "datatype": "INT32", "data": [1] * 4}]),
        JSON,
    ),
    (
        "shape",
        _v2([{"name": "INPUT0", "shape": [1, 5], "datatype": "FP32", "data": [1] * 5}]),
        JSON,
    ),
    (
        "data count",
        _v2([{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1] * 3}]),
        JSON,
    ),
    (
        "batch",
        _v2([{"name": "INPUT0", "shape": [16, 4], "datatype": "FP32", "data": [1] * 64}]),
        JSON,
    ),
    (
        "binary header size",
        b'{"inputs": []}',
        "application/vnd.sagemaker-triton.binary+json;json-header-size=99999",
    ),
]


@pytest.mark.parametrize(("case", "body", "content_type"), BAD_PAYLOADS)
def test_bad_payloads_are_model_errors(
    setup: Setup, case: str, body: bytes, content_type: str
) -> None:
    status, headers, answer = setup.invoke(GOOD, body, content_type)
    assert status == 424, (case, answer)
    assert headers["x-amzn-errortype"] == "ModelError"
    assert answer["OriginalStatusCode"] == 400
    assert answer["OriginalMessage"], case
    assert GOOD in answer["message"]


def test_boto3_raises_the_modelled_exceptions(setup: Setup) -> None:
    """botocore's sagemaker-runtime model: ValidationError (400) and ModelError (424, with
    OriginalStatusCode / OriginalMessage / LogStreamArn) come out as the client's classes."""
    client = MmeEndpoint(url=setup.url, store=setup.store, server=None).client()

    def call(target: str, body: bytes, endpoint: str = "ep") -> Any:
        return client.invoke_endpoint(
            EndpointName=endpoint, TargetModel=target, ContentType=JSON, Body=body
        )

    for target, endpoint, words in (
        ("missing.tar.gz", "ep", "not found"),
        ("../x.tar.gz", "ep", "'..'"),
        (GOOD, "other", "Endpoint other not found"),
    ):
        with pytest.raises(client.exceptions.ValidationError) as info:
            call(target, GOOD_BODY, endpoint)
        assert words in info.value.response["Error"]["Message"]
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    wrong = _v2([{"name": "NOPE", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}])
    with pytest.raises(client.exceptions.ModelError) as model_error:
        call(GOOD, wrong)
    response = model_error.value.response
    assert response["OriginalStatusCode"] == 400
    assert "NOPE" in response["OriginalMessage"]
    assert response["LogStreamArn"].endswith("tritonserver.log")
    with pytest.raises(client.exceptions.ModelError) as load_error:
        call("failing-init.tar.gz", GOOD_BODY)
    assert load_error.value.response["OriginalStatusCode"] == 400
    assert "fails to import" in load_error.value.response["OriginalMessage"]


def test_still_up_and_nothing_written_outside(setup: Setup) -> None:
    status, _, _ = raw_request(setup.url, "GET", "/ping")
    assert status == 200
    x, body = payload(rows=2)
    status, _, data = raw_request(
        setup.url,
        "POST",
        "/endpoints/ep/invocations",
        [("Content-Type", JSON), ("X-Amzn-SageMaker-Target-Model", GOOD)],
        body,
    )
    assert status == 200
    assert (output_of(data) == expected(x, 3.0)).all()
    assert snapshot(setup.root) == {
        "store",
        "escape",
        "escape/target.txt",
        *(f"store/{p.name}" for p in setup.store.iterdir()),
    }
    metrics = raw_request(setup.url, "GET", "/metrics")[2].decode()
    assert "Invocation4XXErrors" in metrics
