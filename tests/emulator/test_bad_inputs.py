"""At least 30 bad inputs: each gets the right 4xx and a clear message; the emulator stays up
and nothing is written outside its cache folder. Raw sockets send what client libraries
would not: pipelined and malformed requests, HEAD, Expect, slow and silent clients."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from emulator_helpers import output_of, payload, raw_request
from emulator_hostile import make_hostile

from mmelocal.emulator import http_server
from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.http_server import HttpTimeouts
from mmelocal.emulator.metrics import parse_prometheus
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton

MiB = 1024 * 1024
GOOD = "model-0.tar.gz"
UNICODE = "modèle-ü.tar.gz"
#: short, so the slow-client tests are quick; every other test sends at once
TIMEOUTS = HttpTimeouts(header_s=1.0, body_s=1.0, idle_s=2.0)
JSON = "application/json"


class Setup:
    def __init__(self, root: Path, url: str, store: Path, escape: Path) -> None:
        self.root, self.url, self.store, self.escape = root, url, store, escape

    def invoke_with(
        self, body: bytes, extra: list[tuple[str, str]]
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        return self.invoke(GOOD, body, extra=extra)

    def invoke(
        self,
        target: str | None,
        body: bytes,
        content_type: str = JSON,
        endpoint: str = "ep",
        extra: list[tuple[str, str]] | None = None,
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        headers = [("Content-Type", content_type), *(extra or [])]
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
    write_tarball(store / UNICODE, scale=5.0)
    make_hostile(store, escape)
    config = EmulatorConfig(
        store=str(store),
        cache_dir=root / "cache",
        disk_budget_bytes=64 * MiB,
        memory_budget_bytes=2048 * MiB,
        endpoint_name="ep",
    )
    with EmulatorServer(config, timeouts=TIMEOUTS) as server:
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
    ("x" * 300 + ".tar.gz", "not found"),  # a segment longer than a file name (was a 500)
    ("d/" + "y" * 400 + "/m.tar.gz", "not found"),
    ("model\u00a0.tar.gz", "regular expression pattern"),
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


def test_a_call_to_another_endpoint_is_not_counted_as_this_ones(setup: Setup) -> None:
    """The metrics carry ``EndpointName="ep"``: a call naming another endpoint is none of
    its invocations (nor an ``Invocation4XXErrors``, "where the model returned a 4xx")."""

    def counts() -> tuple[float, float]:
        parsed = parse_prometheus(raw_request(setup.url, "GET", "/metrics")[2].decode())
        labels = '{EndpointName="ep",VariantName="AllTraffic"}'
        return parsed[f"Invocations{labels}"], parsed[f"Invocation4XXErrors{labels}"]

    before = counts()
    status, _, body = setup.invoke(GOOD, GOOD_BODY, endpoint="other")
    assert status == 400 and "Endpoint other not found" in body["message"]
    assert counts() == before


@pytest.mark.parametrize(
    ("endpoint", "words"),
    [
        ("bad_name", "regular expression pattern"),
        ("-ep", "regular expression pattern"),
        ("a" * 64, "less than or equal to 63"),
        ("", "regular expression pattern"),
        ("a%2Fb", "regular expression pattern"),
    ],
)
def test_endpoint_names_the_service_refuses(setup: Setup, endpoint: str, words: str) -> None:
    """botocore's EndpointName shape (63 characters, ^[a-zA-Z0-9](-*[a-zA-Z0-9])*): the
    service's 400 ValidationError, not 405."""
    status, headers, body = setup.invoke(GOOD, GOOD_BODY, endpoint=endpoint)
    assert status == 400, body
    assert headers["x-amzn-errortype"] == "ValidationError"
    assert "at 'endpointName' failed to satisfy constraint" in body["message"]
    assert words in body["message"]


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("X-Amzn-SageMaker-Custom-Attributes", "a" * 1025, "'customAttributes'"),
        ("X-Amzn-SageMaker-Custom-Attributes", "trace=\u00e9t\u00e9", "'customAttributes'"),
        ("X-Amzn-SageMaker-Inference-Id", "i" * 65, "less than or equal to 64"),
        ("X-Amzn-SageMaker-Inference-Id", "", "greater than or equal to 1"),
        ("X-Amzn-SageMaker-Inference-Id", "id\twith-tab", "regular expression pattern"),
    ],
)
def test_headers_over_the_service_limits_are_validation_errors(
    setup: Setup, name: str, value: str, words: str
) -> None:
    """botocore's sagemaker-runtime model: CustomAttributesHeader max 1024, pattern
    \\p{ASCII}*; InferenceId 1 to 64, pattern \\A\\S[\\p{Print}]*\\z. botocore checks
    only minimums on the client, so the service's 400 ValidationError is what a caller
    gets."""
    raw = value.encode() if value.isascii() else value.encode("utf-8")
    status, headers, body = setup.invoke_with(GOOD_BODY, [(name, raw.decode("latin-1"))])
    assert status == 400, body
    assert headers["x-amzn-errortype"] == "ValidationError"
    assert body["__type"] == "ValidationError"
    assert words in body["message"]


def test_headers_at_the_service_limits_are_served(setup: Setup) -> None:
    extra = [
        ("X-Amzn-SageMaker-Custom-Attributes", "c" * 1024),
        ("X-Amzn-SageMaker-Inference-Id", "i" * 64),
    ]
    status, _, body = setup.invoke_with(GOOD_BODY, extra)
    assert status == 200, body


def test_a_target_variant_the_endpoint_lacks_is_a_validation_error(setup: Setup) -> None:
    """``TargetVariant`` names the production variant to serve the call (botocore's
    sagemaker-runtime model: header ``X-Amzn-SageMaker-Target-Variant``); a name the
    endpoint does not have is the service's ValidationError naming it (the SageMaker SDK's
    integration test ``test_spark_ml_predict_invocation_with_target_variant``), as the
    local AWS answers. The emulator serves one variant, ``AllTraffic``."""
    client = MmeEndpoint(url=setup.url, store=setup.store, server=None).client()
    _, body = payload(rows=1)

    def call(variant: str) -> Any:
        return client.invoke_endpoint(
            EndpointName="ep", TargetModel=GOOD, ContentType=JSON, Body=body, TargetVariant=variant
        )

    assert call("AllTraffic")["InvokedProductionVariant"] == "AllTraffic"
    with pytest.raises(client.exceptions.ValidationError) as info:
        call("VariantB")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    message = info.value.response["Error"]["Message"]
    assert "VariantB" in message and '"ep"' in message and "AllTraffic" in message
    # another endpoint's call is "not found" first, whatever variant it names
    with pytest.raises(client.exceptions.ValidationError, match="Endpoint other not found"):
        client.invoke_endpoint(
            EndpointName="other",
            TargetModel=GOOD,
            ContentType=JSON,
            Body=body,
            TargetVariant="VariantB",
        )


def test_a_non_ascii_target_is_read_as_utf8(setup: Setup) -> None:
    """boto3 sends TargetModel as UTF-8; the service reads it so, and so does the emulator."""
    client = MmeEndpoint(url=setup.url, store=setup.store, server=None).client()
    x, body = payload(rows=2)
    answer = client.invoke_endpoint(
        EndpointName="ep", TargetModel=UNICODE, ContentType=JSON, Body=body
    )
    assert (output_of(answer["Body"].read()) == expected(x, 5.0)).all()


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


# -- raw HTTP/1.1: framing, pipelining, limits, slow clients --------------------------------


def connect(setup: Setup) -> socket.socket:
    host, port = setup.url.split("://", 1)[1].split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def split_answers(raw: bytes, head_first: bool = False) -> list[tuple[int, bytes]]:
    """(status, body) of each answer in ``raw``, framed by Content-Length (no body for
    the first when ``head_first``)."""
    answers: list[tuple[int, bytes]] = []
    while raw:
        head, sep, raw = raw.partition(b"\r\n\r\n")
        assert sep, f"unframed bytes: {head[:80]!r}"
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if head_first and not answers:
            length = 0
        answers.append((int(lines[0].split()[1]), raw[:length]))
        raw = raw[length:]
    return answers


def request(method: str, path: str, body: bytes = b"", *extra: str) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def invocation(body: bytes, *extra: str) -> bytes:
    return request(
        "POST",
        "/endpoints/ep/invocations",
        body,
        f"X-Amzn-SageMaker-Target-Model: {GOOD}",
        "Content-Type: application/json",
        *extra,
    )


def test_head_answers_carry_no_body(setup: Setup) -> None:
    """A HEAD answer with a body would be read as the start of the next answer."""
    with connect(setup) as sock:
        sock.sendall(request("HEAD", "/ping") + request("GET", "/ping", b"", "Connection: close"))
        raw = read_until_closed(sock)
    answers = split_answers(raw, head_first=True)
    # the next answer starts right after the HEAD answer's headers: no body bytes between
    assert raw.split(b"\r\n\r\n", 1)[1].startswith(b"HTTP/1.1 200 ")
    assert len(answers) == 2
    assert [status for status, _ in answers][1:] == [200]
    assert answers[0][1] == b""
    assert json.loads(answers[1][1])["status"] == "Healthy"


def test_after_a_413_the_connection_closes_unread(setup: Setup) -> None:
    oversize = b"x" * (6 * MiB + 1)
    with connect(setup) as sock:
        sock.sendall(invocation(oversize) + invocation(GOOD_BODY))
        answers = split_answers(read_until_closed(sock))
    assert [status for status, _ in answers] == [413]
    assert b"HTTP content length exceeded" in answers[0][1]


def test_expect_100_continue_with_an_oversize_length_gets_413_at_once(setup: Setup) -> None:
    head = (
        b"POST /endpoints/ep/invocations HTTP/1.1\r\nHost: x\r\n"
        b"X-Amzn-SageMaker-Target-Model: model-0.tar.gz\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (7 * MiB)
    )
    with connect(setup) as sock:
        sock.sendall(head)  # and no body: the client waits for 100 Continue
        raw = read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 413 "), raw[:80]
    assert b"100 Continue" not in raw
    # within the limit the client is asked for its body and served
    with connect(setup) as sock:
        sock.sendall(
            invocation(b"", "Expect: 100-continue").replace(
                b"Length: 0", b"Length: %d" % len(GOOD_BODY)
            )
        )
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(GOOD_BODY)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_curl_style_expect_continue_and_chunked_body(setup: Setup) -> None:
    """What curl sends for a body of unknown length: Expect 100-continue and a chunked body
    (and Connection: close, so the final answer ends where the bytes do). The 100 Continue
    comes while the client waits with its body, the final answer only after the body."""
    x, body = payload(rows=1)
    head = "\r\n".join([
        "POST /endpoints/ep/invocations HTTP/1.1", "Host: x",
        f"X-Amzn-SageMaker-Target-Model: {GOOD}", "Content-Type: application/json",
        "Expect: 100-continue", "Transfer-Encoding: chunked", "Connection: close",
    ])  # fmt: skip
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    with connect(setup) as sock:
        sock.sendall(head.encode() + b"\r\n\r\n")
        before_body = b""  # read no further than the interim answer's length
        while len(before_body) < len(interim):
            chunk = sock.recv(len(interim) - len(before_body))
            assert chunk, f"closed before the body was sent, after {before_body!r}"
            before_body += chunk
        assert before_body == interim
        half = len(body) // 2
        for part in (body[:half], body[half:]):
            sock.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        sock.sendall(b"0\r\n\r\n")
        after_body = read_until_closed(sock)
    assert after_body.startswith(b"HTTP/1.1 200 "), after_body[:80]
    ((status, answer),) = split_answers(after_body)  # the final answer, and nothing else
    assert status == 200
    assert (output_of(answer) == expected(x, 3.0)).all()


def test_complete_requests_before_a_malformed_one_are_answered_first(setup: Setup) -> None:
    """RFC 9112: the requests received before the broken one get their answers, in order."""
    with connect(setup) as sock:
        sock.sendall(request("GET", "/ping") + invocation(GOOD_BODY) + b"NOT HTTP AT ALL\r\n\r\n")
        answers = split_answers(read_until_closed(sock))
    assert [status for status, _ in answers] == [200, 200, 400]
    x, _ = payload(rows=1)
    assert (output_of(answers[1][1]) == expected(x, 3.0)).all()
    assert b"bad HTTP request" in answers[2][1]


def test_gzip_v2_infer_is_inflated_as_triton_does(setup: Setup) -> None:
    x, body = payload(rows=2)
    packed = gzip.compress(body)
    with connect(setup) as sock:
        sock.sendall(
            request(
                "POST",
                f"/v2/models/{GOOD}/infer",
                packed,
                "Content-Encoding: gzip",
                "Content-Type: application/json",
                "Connection: close",
            )
        )
        answers = split_answers(read_until_closed(sock))
    assert answers[0][0] == 200, answers
    assert (output_of(answers[0][1]) == expected(x, 3.0)).all()
    # Triton's SageMaker front end inflates gzip too (SageMakerMMEHandleInfer)
    status, _, answer = setup.invoke_with(packed, [("Content-Encoding", "gzip")])
    assert status == 200, answer
    assert (output_of(json.dumps(answer).encode()) == expected(x, 3.0)).all()
    # a gzip bomb is refused, not inflated into memory
    bomb = gzip.compress(bytes(200 * MiB))
    status, _, data = raw_request(
        setup.url,
        "POST",
        f"/v2/models/{GOOD}/infer",
        [("Content-Encoding", "gzip"), ("Content-Type", JSON)],
        bomb,
    )
    assert status == 413 and b"inflates to over" in data


def closed_after(sock: socket.socket) -> tuple[bytes, float]:
    t0 = time.monotonic()
    raw = read_until_closed(sock)
    return raw, time.monotonic() - t0


def test_headers_that_never_finish_get_408_and_close(setup: Setup) -> None:
    with connect(setup) as sock:
        sock.sendall(b"POST /endpoints/ep/invocations HTTP/1.1\r\nHost: x\r\n")
        raw, waited_s = closed_after(sock)
    assert raw.startswith(b"HTTP/1.1 408 "), raw[:80]
    assert b"headers did not arrive within 1s" in raw
    assert waited_s >= TIMEOUTS.header_s * 0.9


def test_a_body_that_stalls_gets_408_and_close(setup: Setup) -> None:
    with connect(setup) as sock:
        sock.sendall(invocation(GOOD_BODY)[: -len(GOOD_BODY) // 2])
        raw, waited_s = closed_after(sock)
    assert raw.startswith(b"HTTP/1.1 408 "), raw[:80]
    assert b"body paused" in raw
    assert waited_s >= TIMEOUTS.body_s * 0.9


def test_a_head_that_keeps_coming_gets_431_and_close(setup: Setup) -> None:
    """One header value that never ends is not buffered without bound (it was: httptools
    holds a field until it ends, for as long as the header timeout allows)."""
    sent = 0
    with connect(setup) as sock:
        sock.sendall(request("GET", "/ping") + b"GET /ping HTTP/1.1\r\nX-Big: ")
        chunk = b"a" * 16384
        with contextlib.suppress(OSError):  # the server closes while we still send
            while sent < 256 * http_server.MAX_HEAD_BYTES:
                sock.sendall(chunk)
                sent += len(chunk)
        answers = split_answers(read_until_closed(sock))
    assert [status for status, _ in answers] == [200, 431], answers
    assert b"request line and headers over" in answers[1][1]
    assert sent < 256 * http_server.MAX_HEAD_BYTES


def test_silent_and_idle_connections_are_closed(setup: Setup) -> None:
    with connect(setup) as silent, connect(setup) as idle:
        idle.sendall(request("GET", "/ping"))
        status, _ = split_answers(idle.recv(65536))[0]
        assert status == 200
        raw, waited_s = closed_after(silent)
        assert raw == b""
        assert waited_s >= TIMEOUTS.header_s * 0.5
        raw, _ = closed_after(idle)
        assert raw == b""


# -- the last raw-socket findings: HTTP/0.9, CONNECT, unknown content codings -------------


def test_a_request_line_without_a_version_gets_400_and_close(setup: Setup) -> None:
    with connect(setup) as sock:
        sock.sendall(b"GET /ping\r\n\r\nGET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = split_answers(read_until_closed(sock))
    assert [status for status, _ in answers] == [400]
    assert b"no HTTP version" in answers[0][1]


def test_connect_gets_405_and_close_with_nothing_in_the_log(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), connect(setup) as sock:
        sock.sendall(
            b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
            + request("GET", "/ping")
        )
        answers = split_answers(read_until_closed(sock))
    assert [status for status, _ in answers] == [405]
    assert b"CONNECT is not supported" in answers[0][1]
    # no traceback (asyncio logged "Fatal error on transport" with one), no error line
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert raw_request(setup.url, "GET", "/ping")[0] == 200


def test_unknown_content_codings_get_tritons_answers(setup: Setup) -> None:
    """Triton's HTTP front ends inflate exactly "gzip" and "deflate": for another coding
    the SageMaker front end answers 415 with no body and Accept-Encoding (a ModelError
    through InvokeEndpoint) and the v2 endpoint 501 "Unsupported compression type"."""
    for coding in ("br", "GZIP", "x-custom"):
        with connect(setup) as sock:
            sock.sendall(invocation(GOOD_BODY, f"Content-Encoding: {coding}", "Connection: close"))
            raw = read_until_closed(sock)
        ((status, body),) = split_answers(raw)
        answer = json.loads(body)
        assert status == 424 and answer["__type"] == "ModelError", answer
        assert answer["OriginalStatusCode"] == 415 and answer["OriginalMessage"] == ""
        with connect(setup) as sock:
            sock.sendall(
                request(
                    "POST",
                    f"/v2/models/{GOOD}/infer",
                    GOOD_BODY,
                    f"Content-Encoding: {coding}",
                    "Connection: close",
                )
            )
            raw = read_until_closed(sock)
        ((status, body),) = split_answers(raw)
        assert status == 501, raw
        assert json.loads(body) == {"error": "Unsupported compression type"}
        assert b"\r\nAccept-Encoding: gzip, deflate\r\n" in raw
    # identity is the body as sent, on both routes
    status, _, answer = setup.invoke_with(GOOD_BODY, [("Content-Encoding", "identity")])
    assert status == 200, answer


def test_v2_metadata_of_a_target_with_sub_delimiters(setup: Setup) -> None:
    """Triton 2.51's v2 HTTP endpoint does not percent-decode the model name in the path:
    the emulator asks for ``a=b,c@d+e.tar.gz`` with those characters as they are (legal in
    a path), not as ``a%3Db%2Cc%40d%2Be.tar.gz``, a name Triton does not know."""
    target = "a=b,c@d+e.tar.gz"
    write_tarball(setup.store / target, scale=2.0)
    for suffix in ("", "/config", "/stats"):
        status, _, data = raw_request(setup.url, "GET", f"/v2/models/{target}{suffix}")
        assert status == 200, (suffix, data)
    assert json.loads(data)["model_stats"][0]["name"] == target
