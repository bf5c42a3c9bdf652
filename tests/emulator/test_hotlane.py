"""The hot lane (warm targets served with callbacks) answers byte for byte as the
coroutine path does, keeps answers in order on one connection, and hands a request back
when Triton lost the model."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from emulator_helpers import output_of, payload

from mmelocal.emulator.cache import target_key
from mmelocal.emulator.emulator import Emulator, EmulatorConfig
from mmelocal.emulator.server import EmulatorServer, Listener
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton

SCALES = {"a.tar.gz": 2.0, "b.tar.gz": 3.0, "c.tar.gz": 5.0, "slow.tar.gz": 7.0}
SLOW_MS = 50.0
BINARY = "application/vnd.sagemaker-triton.binary+json;json-header-size="


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EmulatorServer]]:
    """Two emulators on one store: with the hot lane and without it."""
    root = tmp_path_factory.mktemp("hotlane")
    store = root / "store"
    store.mkdir()
    for name, scale in SCALES.items():
        slow = name == "slow.tar.gz"  # waits SLOW_MS per execution and batches requests
        compute_ms = SLOW_MS if slow else 0.0
        write_tarball(store / name, scale=scale, compute_ms=compute_ms, dynamic_batching=slow)
    made = {
        kind: EmulatorServer(
            EmulatorConfig(  # paths of one length: error bodies name the Triton log
                store=str(store), cache_dir=root / f"cache-{index}", memory_budget_bytes=4 << 30
            ),
            hot_lane=kind == "lane",
        )
        for index, kind in enumerate(("lane", "plain"))
    }
    with made["lane"], made["plain"]:
        yield made


def _binary_body(x: np.ndarray) -> tuple[bytes, int]:
    import tritonclient.http as httpclient

    tensor = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor], [out])
    return body, int(json_size)


def _requests() -> list[tuple[str, str, dict[str, str], bytes]]:
    """(label, path, headers, body): success and failure on both hot routes."""
    x, body = payload(rows=3, start=1.5)
    binary, json_size = _binary_body(x)
    wrong = json.dumps(
        {"inputs": [{"name": "NOPE", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    ).encode()
    mme = "/endpoints/ep/invocations"
    target = {"X-Amzn-SageMaker-Target-Model": "a.tar.gz"}
    js = {"Content-Type": "application/json"}
    return [
        ("mme json", mme, {**js, **target, "Accept": "application/json"}, body),
        (
            "mme binary + custom attributes",
            mme,
            {
                "Content-Type": f"{BINARY}{json_size}",
                "X-Amzn-SageMaker-Custom-Attributes": "trace=1",
                **target,
            },
            binary,
        ),
        ("mme wrong input name", mme, {**js, **target}, wrong),
        ("v2 json", "/v2/models/a.tar.gz/infer", js, body),
        ("v2 version path", "/v2/models/b.tar.gz/versions/1/infer", js, body),
        (
            "v2 binary",
            "/v2/models/a.tar.gz/infer",
            {"Inference-Header-Content-Length": str(json_size)},
            binary,
        ),
        ("v2 wrong input name", "/v2/models/a.tar.gz/infer", js, wrong),
    ]


def _send(
    conn: http.client.HTTPConnection, path: str, headers: dict[str, str], body: bytes
) -> tuple[int, list[tuple[str, str]], bytes]:
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    kept = [(k.lower(), v) for k, v in response.getheaders() if k.lower() != "x-amzn-requestid"]
    return response.status, kept, data


def test_the_lane_answers_exactly_as_the_coroutine_path(
    servers: dict[str, EmulatorServer],
) -> None:
    conns = {
        kind: http.client.HTTPConnection(server.host, server.port, timeout=120)
        for kind, server in servers.items()
    }
    requests = _requests()
    for _label, path, headers, body in requests:  # first calls load the models
        for conn in conns.values():
            _send(conn, path, headers, body)
    lane_metrics = servers["lane"].emulator.metrics.counters
    before = lane_metrics["HotLaneInvocations"]
    for label, path, headers, body in requests:
        answers = {}
        for kind, conn in conns.items():
            status, head, data = _send(conn, path, headers, body)
            cache = str(servers[kind].emulator.cache_dir).encode()
            answers[kind] = (status, head, data.replace(cache, b"<cache>"))
        assert answers["lane"] == answers["plain"], label
        assert answers["lane"][0] in (200, 400, 424), label
    assert lane_metrics["HotLaneInvocations"] - before == len(requests)
    assert servers["plain"].emulator.metrics.counters["HotLaneInvocations"] == 0
    for conn in conns.values():
        conn.close()


def _read_answers(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """``count`` HTTP answers (status, body) read in order from one connection."""
    buffer = b""
    answers: list[tuple[int, bytes]] = []
    while len(answers) < count:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = buffer[:end].decode("latin-1").split("\r\n")
            length = next(
                int(line.split(":", 1)[1])
                for line in head
                if line.lower().startswith("content-length:")
            )
            if len(buffer) >= end + 4 + length:
                answers.append((int(head[0].split()[1]), buffer[end + 4 : end + 4 + length]))
                buffer = buffer[end + 4 + length :]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed after {len(answers)} answers")
        buffer += chunk
    return answers


def test_pipelined_requests_are_answered_in_order(servers: dict[str, EmulatorServer]) -> None:
    server = servers["lane"]
    x, body = payload(rows=2, start=-3.0)
    with closing(http.client.HTTPConnection(server.host, server.port, timeout=120)) as conn:
        for target in ("a.tar.gz", "b.tar.gz"):
            _send(conn, f"/v2/models/{target}/infer", {}, body)  # warm
    server.call(server.emulator.instances[0].unload("c.tar.gz", reason="test: make it cold"))
    order = ["a.tar.gz", "c.tar.gz", "b.tar.gz"]  # warm (lane), cold (queued), warm (queued)
    data = b"".join(
        b"POST /endpoints/ep/invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        b"\r\nX-Amzn-SageMaker-Target-Model: %s\r\nContent-Length: %d\r\n\r\n%s"
        % (target.encode(), len(body), body)
        for target in order
    )
    with socket.create_connection((server.host, server.port), timeout=120) as sock:
        sock.sendall(data)  # one write: the server parses all three at once
        answers = _read_answers(sock, len(order))
    for target, (status, answer) in zip(order, answers, strict=True):
        assert status == 200, answer
        np.testing.assert_array_equal(output_of(answer), expected(x, SCALES[target]))


def test_a_model_triton_lost_goes_back_to_the_coroutine_path(
    servers: dict[str, EmulatorServer],
) -> None:
    server = servers["lane"]
    x, body = payload(rows=1, start=7.0)
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": "b.tar.gz"}
    with closing(http.client.HTTPConnection(server.host, server.port, timeout=120)) as conn:
        assert _send(conn, "/endpoints/ep/invocations", headers, body)[0] == 200  # warm
        sagemaker_url = server.emulator.instances[0].launcher.endpoints.sagemaker_url
        request = urllib.request.Request(
            f"{sagemaker_url}/models/{target_key('b.tar.gz')}",
            headers={"X-Amzn-SageMaker-Target-Model": "b.tar.gz"},
            method="DELETE",
        )
        urllib.request.urlopen(request, timeout=60).read()  # behind the emulator's back
        counters = server.emulator.metrics.counters
        fallbacks = counters["HotLaneFallbacks"]
        status, _, answer = _send(conn, "/endpoints/ep/invocations", headers, body)
    assert status == 200, answer
    np.testing.assert_array_equal(output_of(answer), expected(x, SCALES["b.tar.gz"]))
    assert counters["HotLaneFallbacks"] == fallbacks + 1
    assert server.emulator.instances[0].is_ready("b.tar.gz")


def test_the_switch_turns_the_lane_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    emulator = Emulator(EmulatorConfig(store=str(tmp_path), cache_dir=tmp_path / "cache"))
    monkeypatch.setenv("MMELOCAL_EMULATOR_HOT_LANE", "0")
    assert Listener(emulator).hot_lane is False
    monkeypatch.delenv("MMELOCAL_EMULATOR_HOT_LANE")
    assert Listener(emulator).hot_lane is True
    assert Listener(emulator, hot_lane=False).hot_lane is False


def test_concurrent_hits_on_a_batching_model_are_batched_through_the_lane(
    servers: dict[str, EmulatorServer],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = servers["lane"]
    path = "/endpoints/ep/invocations"
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": "slow.tar.gz"}
    x, body = payload(rows=1, start=2.0)

    def call(_: int) -> tuple[float, int, bytes]:
        with closing(http.client.HTTPConnection(server.host, server.port, timeout=120)) as conn:
            t0 = time.perf_counter()
            status, _, answer = _send(conn, path, headers, body)
            return time.perf_counter() - t0, status, answer

    call(0)  # load
    with ThreadPoolExecutor(8) as pool:  # a first burst opens the upstream connections
        list(pool.map(call, range(8)))
    counters = server.emulator.metrics.counters
    before = counters["HotLaneInvocations"]
    with urllib.request.urlopen(f"{server.url}/v2/models/slow.tar.gz/stats") as r:
        stats0 = json.loads(r.read())["model_stats"][0]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(8)))
    with urllib.request.urlopen(f"{server.url}/v2/models/slow.tar.gz/stats") as r:
        stats1 = json.loads(r.read())["model_stats"][0]
    for seconds, status, answer in results:
        assert status == 200, answer
        assert seconds >= SLOW_MS / 1e3  # the model's compute time is really spent
        np.testing.assert_array_equal(output_of(answer), expected(x, SCALES["slow.tar.gz"]))
    inferences = stats1["inference_count"] - stats0["inference_count"]
    executions = stats1["execution_count"] - stats0["execution_count"]
    assert inferences == 8
    assert executions < inferences  # Triton batched requests that came through the lane
    assert counters["HotLaneInvocations"] - before == 8


def _invocation_bytes(target: str, body: bytes, length: int | None = None) -> bytes:
    return (
        b"POST /endpoints/ep/invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        b"\r\nX-Amzn-SageMaker-Target-Model: %s\r\nContent-Length: %d\r\n\r\n%s"
        % (target.encode(), len(body) if length is None else length, body)
    )


def test_raw_socket_oversized_body_is_413_and_the_rest_is_never_served(
    servers: dict[str, EmulatorServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmelocal.emulator import answers

    server = servers["lane"]
    monkeypatch.setattr(answers, "MAX_BODY_BYTES", 1 << 20)
    limit = answers.body_limit_bytes(server.emulator)
    _, body = payload(rows=1, start=1.0)
    counters = server.emulator.metrics.counters
    before = counters["Invocations"]
    oversized = _invocation_bytes("a.tar.gz", b" " * (limit + 1))
    with socket.create_connection((server.host, server.port), timeout=120) as sock:
        with contextlib.suppress(ConnectionError):  # the server closes as soon as it answers
            sock.sendall(oversized + _invocation_bytes("a.tar.gz", body))
        ((status, answer),) = _read_answers(sock, 1)
        assert status == 413, answer
        assert sock.recv(65536) == b""  # closed, with nothing more answered
    assert counters["Invocations"] == before
    with closing(http.client.HTTPConnection(server.host, server.port, timeout=120)) as conn:
        headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": "a.tar.gz"}
        assert _send(conn, "/endpoints/ep/invocations", headers, body)[0] == 200  # still serving


def test_raw_socket_many_pipelined_requests_are_all_answered_in_order(
    servers: dict[str, EmulatorServer],
) -> None:
    from mmelocal.emulator.http_server import MAX_QUEUED

    server = servers["lane"]
    order = ["a.tar.gz", "b.tar.gz", "c.tar.gz"] * MAX_QUEUED  # 3x the queue's bound
    x, body = payload(rows=1, start=0.5)
    with socket.create_connection((server.host, server.port), timeout=120) as sock:
        sock.sendall(b"".join(_invocation_bytes(target, body) for target in order))
        answers = _read_answers(sock, len(order))
    for target, (status, answer) in zip(order, answers, strict=True):
        assert status == 200, answer
        np.testing.assert_array_equal(output_of(answer), expected(x, SCALES[target]))
