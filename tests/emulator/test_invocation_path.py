"""The one invocation path: a warm call and a cold one are answered alike, answers on one
connection come in order, and a model Triton lost is loaded again and the call answered.
The answer heads encoded once are the bytes the general encoder writes."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import numpy as np
import pytest
from emulator_helpers import output_of, payload, wait_for

from mmelocal.emulator.cache import target_key
from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.metrics import parse_prometheus
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton

SCALES = {"a.tar.gz": 2.0, "b.tar.gz": 3.0, "c.tar.gz": 5.0, "slow.tar.gz": 7.0}
SLOW_MS = 50.0
BINARY = "application/vnd.sagemaker-triton.binary+json;json-header-size="


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EmulatorServer]]:
    """One emulator (a dict, as the tests name it "lane")."""
    root = tmp_path_factory.mktemp("invocation")
    store = root / "store"
    store.mkdir()
    for name, scale in SCALES.items():
        slow = name == "slow.tar.gz"  # waits SLOW_MS per execution and batches requests
        compute_ms = SLOW_MS if slow else 0.0
        write_tarball(store / name, scale=scale, compute_ms=compute_ms, dynamic_batching=slow)
    config = EmulatorConfig(store=str(store), cache_dir=root / "cache", memory_budget_bytes=4 << 30)
    with EmulatorServer(config) as server:
        yield {"lane": server}


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


def _without_cache(head: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in head if k != "x-mmelocal-model-cache"]


#: the requests also sent cold (each cold call is a load, about a second)
COLD = ("mme json", "v2 binary")


def test_warm_and_cold_calls_are_answered_alike(servers: dict[str, EmulatorServer]) -> None:
    """Requests on both invocation routes, cold (the model unloaded first) and warm: the
    same status, headers (but the cache header and request id) and body."""
    import gc

    server = servers["lane"]
    assert gc.get_freeze_count() == 0  # a server in this process froze nothing of it
    emulator = server.emulator
    with closing(http.client.HTTPConnection(server.host, server.port, timeout=120)) as conn:
        for label, path, headers, body in _requests():
            target = "b.tar.gz" if "/b.tar.gz/" in path else "a.tar.gz"
            if label in COLD:
                server.call(emulator.instances[0].unload(target, reason="test: make it cold"))
            first = _send(conn, path, headers, body)
            warm = _send(conn, path, headers, body)
            assert (first[0], _without_cache(first[1]), first[2]) == (
                warm[0],
                _without_cache(warm[1]),
                warm[2],
            ), label
            assert warm[0] in (200, 400, 424), label
            if label in COLD and path.startswith("/endpoints/") and warm[0] == 200:
                assert dict(first[1])["x-mmelocal-model-cache"] == "miss", label
                assert dict(warm[1])["x-mmelocal-model-cache"] == "hit", label


def test_answer_heads_encoded_once_are_the_general_encoders_bytes() -> None:
    """The success heads kept per content type write what encode_answer writes for the
    answers' builders, for every keep-alive and cache state (request ids aside)."""
    import re
    from types import SimpleNamespace

    from mmelocal.emulator.answers import (
        encode_answer,
        encode_invocation_ok,
        encode_v2_ok,
        invocation_answer,
        v2_answer,
    )
    from mmelocal.emulator.emulator import InvokeResult

    ids = re.compile(rb"x-amzn-RequestId: [0-9a-f-]+\r\n")
    emulator: Any = SimpleNamespace(instances=[], config=SimpleNamespace(variant_name="Blue"))
    for content_type in ("application/json", f"{BINARY}42", "text/csv; charset=utf-8"):
        for cache_hit in (True, False):
            for keep_alive in (True, False):
                body = b'{"outputs": []}'
                result = InvokeResult(
                    status=200,
                    body=body,
                    headers={"content-type": content_type},
                    cache_hit=cache_hit,
                    model_latency_s=0.0,
                    wait_s=0.0,
                    instance=0,
                )
                general = encode_answer(
                    invocation_answer(emulator, "m", result),
                    keep_alive=keep_alive,  # type: ignore[arg-type]
                )
                fast = encode_invocation_ok(
                    content_type, "Blue", cache_hit, body, keep_alive=keep_alive
                )
                assert ids.sub(b"", fast) == ids.sub(b"", general)
                assert ids.search(fast) is not None
                for status in (200, 400):
                    result.status = status
                    assert encode_v2_ok(
                        status, content_type, body, keep_alive=keep_alive
                    ) == encode_answer(v2_answer(result), keep_alive=keep_alive)


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


def _cache_hits(server: EmulatorServer) -> tuple[float, float]:
    """``ModelCacheHit``'s count and sum, as ``/metrics`` shows them."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=60) as answer:
        metrics = parse_prometheus(answer.read().decode())
    return tuple(  # type: ignore[return-value]
        next(v for k, v in metrics.items() if k.startswith(f"ModelCacheHit_{part}{{"))
        for part in ("count", "sum")
    )


def test_a_model_triton_lost_is_loaded_again_and_the_call_answered(
    servers: dict[str, EmulatorServer],
) -> None:
    """Triton answers the invoke 404 (the model was unloaded behind the emulator's back):
    the model is loaded again and the call answered. The call counts once in
    ``ModelCacheHit``, as its model was when it arrived: loaded, a hit (the sample, and
    the answer's cache header, were the retry's: a miss, as it waited for the reload)."""
    server = servers["lane"]
    x, body = payload(rows=1, start=7.0)
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": "b.tar.gz"}
    with closing(http.client.HTTPConnection(server.host, server.port, timeout=120)) as conn:
        assert _send(conn, "/endpoints/ep/invocations", headers, body)[0] == 200  # warm
        hits = _cache_hits(server)
        sagemaker_url = server.emulator.instances[0].launcher.endpoints.sagemaker_url
        request = urllib.request.Request(
            f"{sagemaker_url}/models/{target_key('b.tar.gz')}",
            headers={"X-Amzn-SageMaker-Target-Model": "b.tar.gz"},
            method="DELETE",
        )
        urllib.request.urlopen(request, timeout=60).read()  # behind the emulator's back
        counters = server.emulator.metrics.counters
        retries = counters["InvocationRetries"]
        status, answer_headers, answer = _send(conn, "/endpoints/ep/invocations", headers, body)
    assert status == 200, answer
    np.testing.assert_array_equal(output_of(answer), expected(x, SCALES["b.tar.gz"]))
    assert counters["InvocationRetries"] == retries + 1
    count, hit_sum = _cache_hits(server)
    assert (count - hits[0], hit_sum - hits[1]) == (1, 1)  # one sample: a hit
    assert dict(answer_headers)["x-mmelocal-model-cache"] == "hit"
    assert server.emulator.instances[0].is_ready("b.tar.gz")


def test_concurrent_hits_on_a_batching_model_are_batched(
    servers: dict[str, EmulatorServer],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = servers["lane"]
    path = "/endpoints/ep/invocations"
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": "slow.tar.gz"}
    x, body = payload(rows=1, start=2.0)

    def call(_index: int) -> tuple[float, int, bytes]:
        with closing(http.client.HTTPConnection(server.host, server.port, timeout=120)) as conn:
            t0 = time.perf_counter()
            status, _, answer = _send(conn, path, headers, body)
            return time.perf_counter() - t0, status, answer

    def stats_once_counted(inferences: int) -> dict[str, int]:
        # Triton records a request's statistics as it releases it, just after the answer
        # went out: read them once every answered request is counted
        def read() -> dict[str, int] | None:
            with urllib.request.urlopen(f"{server.url}/v2/models/slow.tar.gz/stats") as r:
                stats: dict[str, int] = json.loads(r.read())["model_stats"][0]
            return stats if stats["inference_count"] >= inferences else None

        return wait_for(read, what=f"Triton's statistics to count {inferences} inferences")

    call(0)  # load
    with ThreadPoolExecutor(8) as pool:  # a first burst opens the upstream connections
        list(pool.map(call, range(8)))
    stats0 = stats_once_counted(1 + 8)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(8)))
    stats1 = stats_once_counted(stats0["inference_count"] + 8)
    for seconds, status, answer in results:
        assert status == 200, answer
        assert seconds >= SLOW_MS / 1e3  # the model's compute time is really spent
        np.testing.assert_array_equal(output_of(answer), expected(x, SCALES["slow.tar.gz"]))
    inferences = stats1["inference_count"] - stats0["inference_count"]
    executions = stats1["execution_count"] - stats0["execution_count"]
    assert inferences == 8
    assert executions < inferences  # Triton batched requests that came through the path


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
