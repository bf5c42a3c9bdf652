"""The KServe v2 routes on a real Triton: the statuses Triton's own HTTP server gives
(``src/http_server.cc``, 2.51: ``HttpCodeFromError`` and ``HandleModelReady``), and reads
that are no use of a model (no load, no recency)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path

import numpy as np
import pytest
from emulator_helpers import output_of, payload, raw_request

from mmelocal.emulator.answers import CACHE_HEADER
from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.metrics import parse_prometheus
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import CONFIG, expected, write_tarball

pytestmark = pytest.mark.triton

MiB = 1024 * 1024
JSON = [("Content-Type", "application/json")]
_, BODY = payload(rows=1)


def _failing_tarball(path: Path, raises: str) -> None:
    """A tarball whose model.py raises ``raises`` when Triton loads it."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (
            ("m/config.pbtxt", CONFIG.format(name="m", scale=2.0).encode()),
            ("m/1/model.py", f"raise {raises}\n".encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def mme(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MmeEndpoint]:
    root = tmp_path_factory.mktemp("v2")
    store = root / "store"
    store.mkdir()
    for name in ("model-a", "model-b", "model-c"):
        write_tarball(store / f"{name}.tar.gz", scale=2.0)
    _failing_tarball(store / "failing-init.tar.gz", "RuntimeError('this model fails to import')")
    _failing_tarball(
        store / "oom-init.tar.gz", "MemoryError('CUDA out of memory. Tried to allocate 2 GiB')"
    )
    config = EmulatorConfig(
        store=str(store),
        cache_dir=root / "cache",
        disk_budget_bytes=64 * MiB,
        memory_budget_bytes=2048 * MiB,
        endpoint_name="ep",
    )
    with EmulatorServer(config) as server:
        yield MmeEndpoint(url=server.url, store=store, server=server, endpoint_name="ep")


def _error(data: bytes) -> str:
    message: str = json.loads(data)["error"]
    return message


@pytest.mark.parametrize(
    ("target", "words"),
    [("failing-init.tar.gz", "fails to import"), ("oom-init.tar.gz", "out of memory")],
)
def test_a_failed_load_is_tritons_400_on_the_v2_routes(
    mme: MmeEndpoint, target: str, words: str
) -> None:
    """Triton's v2 HTTP server answers a load that failed (the model raised, out-of-memory
    included) 400, as ``HttpCodeFromError`` maps the load's error; 424 (ModelError) and
    507 are SageMaker's statuses, which tritonclient never sees from Triton."""
    for method, path, body in (
        ("POST", f"/v2/models/{target}/infer", BODY),
        ("GET", f"/v2/models/{target}", b""),
        ("POST", f"/v2/repository/models/{target}/load", b""),
    ):
        status, _, data = raw_request(mme.url, method, path, JSON, body)
        assert status == 400, (method, path, data)
        assert words in _error(data), data
    # InvokeEndpoint keeps SageMaker's answers
    status, headers, data = raw_request(
        mme.url,
        "POST",
        "/endpoints/ep/invocations",
        [*JSON, ("X-Amzn-SageMaker-Target-Model", "failing-init.tar.gz")],
        BODY,
    )
    assert status == 424 and headers["x-amzn-errortype"] == "ModelError", data


def _loaded(mme: MmeEndpoint) -> list[str]:
    """The loaded set, least recently used first."""
    return [e["target"] for e in mme.state()["instances"][0]["loaded"]]


def _downloads(mme: MmeEndpoint) -> int:
    return sum(1 for e in mme.state()["events"] if e["kind"] == "download")


def test_ready_of_a_cold_model_is_tritons_not_ready_and_loads_nothing(mme: MmeEndpoint) -> None:
    """Triton's HandleModelReady answers a model it has not loaded 400 "Model version not
    ready" without loading it; tritonclient's is_model_ready reads that as False. A probe
    of readiness must not download, load, or evict for, a model."""
    loaded, downloads = _loaded(mme), _downloads(mme)
    assert "model-c.tar.gz" not in loaded
    status, _, data = raw_request(mme.url, "GET", "/v2/models/model-c.tar.gz/ready")
    triton_url = mme.state()["instances"][0]["http_url"]
    assert (status, data) == raw_request(triton_url, "GET", "/v2/models/model-c.tar.gz/ready")[::2]
    assert status == 400 and _error(data) == "Model version not ready"
    assert _loaded(mme) == loaded and _downloads(mme) == downloads


def test_reads_of_a_warm_model_are_no_use(mme: MmeEndpoint) -> None:
    """Only invocations are uses of a model (what the platform's least-recently-used
    eviction orders by): ready, metadata, config and stats of a loaded model answer from
    the Triton holding it and leave its recency alone."""
    for target in ("model-a.tar.gz", "model-b.tar.gz"):
        assert mme.invoke(target, BODY)
    before = _loaded(mme)
    assert before[-2:] == ["model-a.tar.gz", "model-b.tar.gz"]
    for suffix, words in (
        ("/ready", b""),
        ("", b'"name"'),
        ("/config", b'"input"'),
        ("/stats", b'"model_stats"'),
    ):
        status, _, data = raw_request(mme.url, "GET", f"/v2/models/model-a.tar.gz{suffix}")
        assert status == 200 and words in data, (suffix, data)
    assert _loaded(mme) == before


def test_stats_of_a_cold_model_is_tritons_answer_and_loads_nothing(mme: MmeEndpoint) -> None:
    """Statistics are an observation too: Triton answers a model it has not loaded 400
    "requested model ... is not available"."""
    loaded = _loaded(mme)
    status, _, data = raw_request(mme.url, "GET", "/v2/models/model-c.tar.gz/stats")
    assert status == 400 and "is not available" in _error(data), data
    assert _loaded(mme) == loaded


def test_metadata_of_a_cold_model_loads_it_on_demand(mme: MmeEndpoint) -> None:
    """tritonclient and perf_analyzer read a model's metadata and config before they infer
    (docs/serve.md: the TargetModel is loaded on demand); a plain Triton would answer
    "unknown model", so the emulator loads it, as the first invocation would."""
    state = mme.state()
    for entry in state["instances"][0]["loaded"]:
        raw_request(mme.url, "POST", f"/v2/repository/models/{entry['target']}/unload")
    assert _loaded(mme) == []
    status, _, data = raw_request(mme.url, "GET", "/v2/models/model-c.tar.gz/config")
    assert status == 200 and json.loads(data)["input"][0]["name"] == "INPUT0"
    assert _loaded(mme) == ["model-c.tar.gz"]


def test_a_version_in_the_path_reaches_triton(mme: MmeEndpoint) -> None:
    """``/v2/models/M/versions/N/...`` asks Triton for version N: a version the model does
    not have is Triton's error, not version 1's metadata."""
    assert mme.invoke("model-a.tar.gz", BODY)
    triton_url = mme.state()["instances"][0]["http_url"]
    for suffix in ("", "/config", "/ready"):
        path = f"/v2/models/model-a.tar.gz/versions/2{suffix}"
        status, _, data = raw_request(mme.url, "GET", path)
        assert status >= 400, (suffix, data)
        assert (status, data) == raw_request(triton_url, "GET", path)[::2]
        status, _, data = raw_request(mme.url, "GET", path.replace("/versions/2", "/versions/1"))
        assert status == 200, (suffix, data)


GENERATE_BODY = b'{"INPUT0": [1, 2, 3, 4]}'


def test_generate_is_an_inference_answered_as_triton_answers_it(mme: MmeEndpoint) -> None:
    """Triton 2.51's v2 model route takes ``generate`` and ``generate_stream`` (POST,
    ``HandleGenerate``): the emulator loads the model on demand, as for ``infer``, and
    passes Triton's answer on (it read ``M/generate`` as a model named so: 405 to a POST,
    400 "not found" to a GET, where Triton answers 405)."""
    target = "model-b.tar.gz"
    for action, kind in (
        ("generate", "application/json"),
        ("generate_stream", "text/event-stream"),
    ):
        path = f"/v2/models/{target}/{action}"
        status, headers, data = raw_request(mme.url, "POST", path, JSON, GENERATE_BODY)
        assert status == 200 and headers["content-type"].startswith(kind), (status, data)
        assert target in _loaded(mme)
        triton_url = next(i for i in mme.state()["instances"] if i["loaded"])["http_url"]
        direct = _dechunked(raw_request(triton_url, "POST", path, JSON, GENERATE_BODY))
        assert (status, data) == direct
        assert raw_request(mme.url, "GET", path)[::2] == (405, b'{"error":"Method Not Allowed"}')
    status, _, data = raw_request(
        mme.url, "POST", "/v2/models/no-such.tar.gz/generate", JSON, GENERATE_BODY
    )
    assert status == 400 and "not found" in _error(data)


def test_trace_settings_are_tritons(mme: MmeEndpoint) -> None:
    """``/v2/models/M/trace/setting`` is Triton's trace route (``HandleTrace``): the
    settings of a loaded model come from the Triton holding it; a model loaded nowhere is
    Triton's 400 "Request for unknown model", with no load; with a version it is no route
    (404). ``/v2/trace/setting`` and ``/v2/logging`` are the server's settings."""
    assert mme.invoke("model-a.tar.gz", BODY)
    triton_url = mme.state()["instances"][0]["http_url"]
    for path in (
        "/v2/models/model-a.tar.gz/trace/setting",
        "/v2/models/model-a.tar.gz/versions/1/trace/setting",
        "/v2/trace/setting",
        "/v2/logging",
    ):
        mine = raw_request(mme.url, "GET", path)[::2]
        assert mine == raw_request(triton_url, "GET", path)[::2], path
        assert mine[0] in (200, 404)
    raw_request(mme.url, "POST", "/v2/repository/models/model-c.tar.gz/unload")
    loaded, downloads = _loaded(mme), _downloads(mme)
    assert "model-c.tar.gz" not in loaded
    status, _, data = raw_request(mme.url, "GET", "/v2/models/model-c.tar.gz/trace/setting")
    assert (status, _error(data)) == (400, "Request for unknown model : model-c.tar.gz")
    assert _loaded(mme) == loaded and _downloads(mme) == downloads


def _dechunked(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, bytes]:
    """Status and body of a raw answer, a chunked body joined (Triton streams them)."""
    status, headers, data = answer
    if headers.get("transfer-encoding") != "chunked":
        return status, data
    out = b""
    while True:
        size, _, data = data.partition(b"\r\n")
        if not int(size, 16):
            return status, out
        out, data = out + data[: int(size, 16)], data[int(size, 16) + 2 :]


def test_all_models_statistics_are_tritons_route_not_a_model_named_stats(
    mme: MmeEndpoint,
) -> None:
    """``GET /v2/models/stats`` is Triton's statistics of every model (``Handle`` matches
    the path before ``model_regex_``, ``src/http_server.cc`` 2.51): it was read as the
    metadata of a model named "stats", a load of a TargetModel that does not exist. The
    answer is Triton's, whatever it is: tritonserver 2.51 with model namespacing on (the
    SageMaker entrypoint's default) answers it 400 "Request for unknown model:
    '...::MODEL' is not found" once a model is loaded."""
    assert mme.invoke("model-a.tar.gz", BODY)
    triton_url = mme.state()["instances"][0]["http_url"]
    downloads = _downloads(mme)
    status, headers, data = raw_request(mme.url, "GET", "/v2/models/stats")
    assert (status, data) == raw_request(triton_url, "GET", "/v2/models/stats")[::2]
    assert headers["content-type"].startswith("application/json")
    assert b".tar.gz" in data and b"TargetModel 'stats'" not in data
    assert _downloads(mme) == downloads
    for method in ("POST", "PUT"):
        mine = raw_request(mme.url, method, "/v2/models/stats")[::2]
        assert (
            mine
            == raw_request(triton_url, method, "/v2/models/stats")[::2]
            == (
                405,
                b'{"error":"Method Not Allowed"}',
            )
        )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/models/"),  # no model name: no route
        ("GET", "/v2/models//ready"),
        ("GET", "/v2/models/model-a.tar.gz/"),
        ("POST", "/v2/models//infer"),
        ("POST", "/v2"),  # the server routes take GET alone
        ("PUT", "/v2/health/live"),
        ("POST", "/v2/health/ready"),
        ("DELETE", "/v2/models/model-a.tar.gz"),
        ("POST", "/v2/models/model-a.tar.gz/ready"),
        ("GET", "/v2/repository/index"),  # the repository routes take POST alone
        ("GET", "/v2/repository/models/model-a.tar.gz/load"),
        ("POST", "/v2/repository/models/model-a.tar.gz/reload"),  # no such action
        ("POST", "/v2/repository/some-repo/models/model-a.tar.gz/load"),  # named repository
        ("GET", "/v2/no-such-route"),
    ],
)
def test_what_tritons_v2_routes_refuse_is_refused_as_triton_refuses_it(
    mme: MmeEndpoint, method: str, path: str
) -> None:
    """Each fixed word of Triton's v2 route table (``server_regex_``, ``model_regex_``,
    ``modelcontrol_regex_``, ``src/http_server.cc`` 2.51) as Triton answers it: a path no
    route takes is 404 "Not Found", a method the route does not take 405 "Method Not
    Allowed", a named repository 501 (the emulator answered its own words, took an empty
    model name for a TargetModel and answered no route for a named repository)."""
    triton_url = mme.state()["instances"][0]["http_url"]
    downloads = _downloads(mme)
    mine = raw_request(mme.url, method, path, JSON)[::2]
    assert mine == raw_request(triton_url, method, path, JSON)[::2]
    assert mine[0] in (404, 405, 501), mine
    assert _downloads(mme) == downloads


def test_the_index_of_a_named_repository_is_the_index(mme: MmeEndpoint) -> None:
    """Triton's ``HandleRepositoryIndex`` takes ``/v2/repository/NAME/index`` and does not
    read NAME: the same index."""
    status, _, data = raw_request(mme.url, "POST", "/v2/repository/some-repo/index")
    assert status == 200, data
    assert json.loads(data) == json.loads(raw_request(mme.url, "POST", "/v2/repository/index")[2])


@pytest.mark.parametrize(
    "body", [b"not json", b'{"ready": true', b'{"ready": 1}', b'{"ready": "yes"}']
)
def test_an_index_body_triton_refuses_is_refused_in_its_words(
    mme: MmeEndpoint, body: bytes
) -> None:
    """``HandleRepositoryIndex`` parses the body and reads ``ready`` as a boolean: a body
    that is no JSON and a ``ready`` that is no boolean are Triton's 500 (the emulator
    ignored the body and listed the models)."""
    triton_url = mme.state()["instances"][0]["http_url"]
    path = "/v2/repository/index"
    mine = raw_request(mme.url, "POST", path, JSON, body)[::2]
    assert mine == raw_request(triton_url, "POST", path, JSON, body)[::2]
    assert mine[0] == 500, mine


def test_the_index_of_ready_models_lists_those_ready(mme: MmeEndpoint) -> None:
    """``{"ready": true}`` lists the models ready to serve, as Triton's own index does."""
    assert mme.invoke("model-a.tar.gz", BODY)
    triton_url = mme.state()["instances"][0]["http_url"]
    ready = b'{"ready": true}'
    status, _, data = raw_request(mme.url, "POST", "/v2/repository/index", JSON, ready)
    assert status == 200, data
    listed = json.loads(data)
    assert {"name": "model-a.tar.gz", "version": "1", "state": "READY"} in listed
    assert all(m["state"] == "READY" for m in listed)
    tritons = json.loads(raw_request(triton_url, "POST", "/v2/repository/index", JSON, ready)[2])
    assert {m["name"] for m in listed} == {m["name"] for m in tritons}


def test_a_load_overriding_the_config_is_refused_to_tritonclient(mme: MmeEndpoint) -> None:
    """tritonclient's ``load_model(config=...)`` asks Triton to load the model with another
    config; the emulator loaded the store's tarball and answered 200, the override
    dropped. Refused (501, the emulator's words: the platform loads a model from its
    tarball alone), nothing loaded."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    target = "model-c.tar.gz"
    client = httpclient.InferenceServerClient(mme.url.removeprefix("http://"))
    with pytest.raises(InferenceServerException, match="tarball") as refused:
        client.load_model(target, config=json.dumps({"max_batch_size": 4}))
    assert refused.value.status() == "501"
    assert not any(m["target"] == target for m in mme.state()["instances"][0]["loaded"])


@pytest.mark.parametrize(
    "body",
    [b'{"parameters": 1}', b'{"parameters": {"config": 1}}', b'{"parameters": {"bogus": "x"}}'],
)
def test_a_load_body_triton_refuses_is_refused_in_its_words(mme: MmeEndpoint, body: bytes) -> None:
    """``HandleRepositoryControl`` reads ``parameters`` before it loads: what it refuses
    there is its 500, in its words (the emulator loaded the model)."""
    triton_url = mme.state()["instances"][0]["http_url"]
    path = "/v2/repository/models/model-c.tar.gz/load"
    mine = raw_request(mme.url, "POST", path, JSON, body)[::2]
    assert mine == raw_request(triton_url, "POST", path, JSON, body)[::2]
    assert mine[0] == 500, mine


def test_system_shared_memory_is_registered_with_triton_and_serves_inputs(
    mme: MmeEndpoint,
) -> None:
    """``/v2/systemsharedmemory/...`` (status, register, unregister) are Triton's routes
    (``systemsharedmemory_regex_``, ``HandleSystemSharedMemory``): they answered 404. A
    region registered through the emulator is registered with its Triton (on this
    machine: same ``/dev/shm``), and an inference reading its input from the region
    gets the model's answer."""
    x = np.arange(4, dtype=np.float32).reshape(1, 4) + 1.0
    region = SharedMemory(name=f"mmelocal-test-{os.getpid()}", create=True, size=x.nbytes)
    try:
        np.ndarray(x.shape, x.dtype, buffer=region.buf)[:] = x
        triton_url = mme.state()["instances"][0]["http_url"]
        register = json.dumps({"key": f"/{region.name}", "offset": 0, "byte_size": x.nbytes})
        path = "/v2/systemsharedmemory/region/input0/register"
        status, _, data = raw_request(mme.url, "POST", path, JSON, register.encode())
        assert status == 200, data
        status, _, data = raw_request(mme.url, "GET", "/v2/systemsharedmemory/status")
        assert (status, data) == raw_request(triton_url, "GET", "/v2/systemsharedmemory/status")[
            ::2
        ]
        assert [r["name"] for r in json.loads(data)] == ["input0"]
        infer = {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 4],
                    "datatype": "FP32",
                    "parameters": {
                        "shared_memory_region": "input0",
                        "shared_memory_byte_size": x.nbytes,
                    },
                }
            ]
        }
        path = "/v2/models/model-a.tar.gz/infer"
        status, _, data = raw_request(mme.url, "POST", path, JSON, json.dumps(infer).encode())
        assert status == 200, data
        np.testing.assert_allclose(output_of(data), expected(x, scale=2.0))
        for method, path in (
            ("GET", "/v2/systemsharedmemory/region/input0/register"),  # POST only
            ("POST", "/v2/systemsharedmemory/status"),  # GET only
            ("POST", "/v2/systemsharedmemory/register"),  # no region name: Triton's 400
        ):
            mine = raw_request(mme.url, method, path, JSON, b"{}")[::2]
            assert mine == raw_request(triton_url, method, path, JSON, b"{}")[::2], path
        path = "/v2/systemsharedmemory/region/input0/unregister"
        assert raw_request(mme.url, "POST", path)[0] == 200
        assert raw_request(triton_url, "GET", "/v2/systemsharedmemory/status")[2] == b"[]"
    finally:
        raw_request(triton_url, "POST", "/v2/systemsharedmemory/unregister")
        region.close()
        region.unlink()


def test_cuda_shared_memory_routes_are_tritons(mme: MmeEndpoint) -> None:
    """``/v2/cudasharedmemory/...`` reach Triton too (they answered 404): its status,
    and its own answer to a registration (a handle this test cannot make: Triton's 400)."""
    triton_url = mme.state()["instances"][0]["http_url"]
    register = json.dumps({"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 16})
    for method, path, body in (
        ("GET", "/v2/cudasharedmemory/status", b""),
        ("POST", "/v2/cudasharedmemory/region/r0/register", register.encode()),
        ("POST", "/v2/cudasharedmemory/region/r0/unregister", b""),
        ("PUT", "/v2/cudasharedmemory/status", b""),
    ):
        mine = raw_request(mme.url, method, path, JSON, body)[::2]
        assert mine == raw_request(triton_url, method, path, JSON, body)[::2], path
        assert mine[0] != 404, (path, mine)


def _cache_hit(mme: MmeEndpoint) -> tuple[float, float]:
    """``ModelCacheHit``'s sample count and sum from ``/metrics``."""
    text = raw_request(mme.url, "GET", "/metrics")[2].decode()
    values = {k.partition("{")[0]: v for k, v in parse_prometheus(text).items()}
    return values["ModelCacheHit_count"], values["ModelCacheHit_sum"]


def test_model_cache_hit_counts_every_call_that_reached_its_model(mme: MmeEndpoint) -> None:
    """``ModelCacheHit``: "The number of InvokeEndpoint requests sent to the multi-model
    endpoint for which the model was already loaded. The Average statistic shows the
    ratio of requests for which the model was already loaded" (SageMaker Developer Guide,
    multi-model endpoint model loading metrics): every request is a sample, 1 when its
    model was loaded, a failed one too. A call whose load failed was no sample (the
    ratio counted only the calls Triton answered); a call refused before it names a model
    (no TargetModel) is none."""
    headers = [*JSON, ("X-Amzn-SageMaker-Target-Model", "failing-init.tar.gz")]
    invocations = "/endpoints/ep/invocations"
    for expected_status, call_headers, body, sample in (
        (424, headers, BODY, 0.0),  # a cold model whose load fails: a miss
        (400, JSON, BODY, None),  # no TargetModel: refused before any model
    ):
        count, total = _cache_hit(mme)
        status, answer_headers, _ = raw_request(mme.url, "POST", invocations, call_headers, body)
        assert status == expected_status
        # the emulator's own header says the sample, a failed call's too (a replay reads it)
        cache = answer_headers.get(CACHE_HEADER.lower())
        if sample is None:
            assert _cache_hit(mme) == (count, total) and cache is None
        else:
            assert _cache_hit(mme) == (count + 1, total + sample) and cache == "miss"
    assert mme.invoke("model-a.tar.gz", BODY)
    count, total = _cache_hit(mme)
    loaded = [*JSON, ("X-Amzn-SageMaker-Target-Model", "model-a.tar.gz")]
    status, answer_headers, _ = raw_request(
        mme.url, "POST", invocations, loaded, b'{"inputs": "no"}'
    )
    assert status == 424  # the loaded model refused the body: a hit all the same
    assert _cache_hit(mme) == (count + 1, total + 1)
    assert answer_headers.get(CACHE_HEADER.lower()) == "hit"
