"""The non-invocation routes, driven through :func:`mmelocal.emulator.routes.route` with a
fake emulator that records what it was asked (no Triton): what Triton's own front ends
refuse before they look at a model, the emulator refuses before it loads one."""

from __future__ import annotations

import asyncio
import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from mmelocal.emulator import routes
from mmelocal.emulator.shared_memory import SharedMemoryRegions


class FakeEmulator:
    """Records the loads a route asks for; any v2 read answers 200 ``{}``; no model is
    loaded before a route asks."""

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.instances: list[Any] = []
        self.shared_memory = SharedMemoryRegions()
        self.router = SimpleNamespace(reading=lambda target: contextlib.nullcontext(None))

    async def ensure_loaded(self, target: str) -> Any:
        self.loaded.append(target)

        async def v2_get(path: str) -> Any:
            return SimpleNamespace(status=200, body=b"{}")

        return SimpleNamespace(control=SimpleNamespace(v2_get=v2_get))


def call(emulator: FakeEmulator, method: str, path: str) -> routes.Answer:
    return asyncio.run(
        routes.route(emulator, method, path, lambda name: None, b"")  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE"])
@pytest.mark.parametrize(
    "path", ["/v2/models/model-1.tar.gz/infer", "/v2/models/m/versions/1/infer"]
)
def test_infer_by_another_method_is_405_and_loads_nothing(method: str, path: str) -> None:
    """Triton's v2 HandleInfer (src/http_server.cc) answers a non-POST infer 405 Method Not
    Allowed before it looks at the model: a GET must not load (and evict for) a model."""
    emulator = FakeEmulator()
    answer = call(emulator, method, path)
    assert answer.status == 405
    assert emulator.loaded == []
    assert "error" in json.loads(answer.body)


def test_model_metadata_by_get_still_loads_on_demand() -> None:
    emulator = FakeEmulator()
    answer = call(emulator, "GET", "/v2/models/model-1.tar.gz/config")
    assert answer.status == 200
    assert emulator.loaded == ["model-1.tar.gz"]


@pytest.mark.parametrize(("up", "status"), [(True, 200), (False, 400)])
def test_server_ready_answers_as_triton(up: bool, status: int) -> None:
    """Triton's HandleServerHealth (src/http_server.cc) answers a server that is not ready
    400 (EVHTP_RES_BADREQ), not 503; tritonclient's is_server_ready reads only 200."""
    emulator = FakeEmulator()
    emulator.instances = [SimpleNamespace(up=up)]
    answer = call(emulator, "GET", "/v2/health/ready")
    assert answer.status == status
    assert answer.body == b""


def test_ping_with_no_instance_up_answers_as_tritons_sagemaker_front_end() -> None:
    """The container a user deploys answers ``/ping`` of a server that is not healthy 400
    with no body (Triton 2.51's SageMaker front end routes ``/ping`` to HandleServerHealth,
    src/http_server.cc: ``ready ? EVHTP_RES_OK : EVHTP_RES_BADREQ``); SageMaker reads only
    whether it is 200 ("How Your Container Should Respond to Health Check (Ping)
    Requests"). It answered 503 with a JSON body."""
    emulator = FakeEmulator()
    emulator.instances = [SimpleNamespace(index=0, up=False, probe=SimpleNamespace(name="p"))]
    answer = call(emulator, "GET", "/ping")
    assert (answer.status, answer.body) == (400, b"")


def test_ping_with_an_instance_up_is_200_and_names_the_probes() -> None:
    emulator = FakeEmulator()
    emulator.instances = [
        SimpleNamespace(index=0, up=False, probe=SimpleNamespace(name="host-pss")),
        SimpleNamespace(index=1, up=True, probe=SimpleNamespace(name="nvml:0")),
    ]
    answer = call(emulator, "GET", "/ping")
    assert answer.status == 200
    body = json.loads(answer.body)
    assert body["status"] == "Healthy"
    assert [i["probe"] for i in body["instances"]] == ["host-pss", "nvml:0"]


@pytest.mark.parametrize("action", ["ready", "stats", "versions/1/ready"])
def test_ready_and_stats_of_a_model_loaded_nowhere_load_nothing(action: str) -> None:
    """Triton answers readiness and statistics of a model it has not loaded 400; a probe
    must not download, load or evict (tests/emulator/test_v2_routes.py: on a real Triton)."""
    emulator = FakeEmulator()
    answer = call(emulator, "GET", f"/v2/models/model-1.tar.gz/{action}")
    assert answer.status == 400
    assert emulator.loaded == []


def _holding(**states: str) -> Any:
    """An instance whose loaded set holds each target in its state."""
    models = {t: SimpleNamespace(target=t, state=state) for t, state in states.items()}
    ready = [t for t, state in states.items() if state == "ready"]
    return SimpleNamespace(models=models, up=True, loaded=lambda: ready)


def test_the_repository_index_lists_a_model_held_twice_once() -> None:
    """A hot model is loaded on a second instance; Triton's index (one server) lists each
    model once, and so does the emulator's, which stands for one server."""
    emulator = FakeEmulator()
    emulator.instances = [
        _holding(**{"a.tar.gz": "ready", "b.tar.gz": "ready"}),
        _holding(**{"b.tar.gz": "ready", "c.tar.gz": "ready"}),
    ]
    answer = call(emulator, "POST", "/v2/repository/index")
    assert [m["name"] for m in json.loads(answer.body)] == ["a.tar.gz", "b.tar.gz", "c.tar.gz"]


def index(emulator: FakeEmulator, body: bytes) -> routes.Answer:
    return asyncio.run(
        routes.route(emulator, "POST", "/v2/repository/index", lambda name: None, body)  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("body", "listed"),
    [
        (b"", ["a:READY", "b:READY", "c:LOADING", "d:UNLOADING"]),
        (b'{"ready": false}', ["a:READY", "b:READY", "c:LOADING", "d:UNLOADING"]),
        (b'{"ready": true}', ["a:READY", "b:READY"]),
        (b"[1]", ["a:READY", "b:READY", "c:LOADING", "d:UNLOADING"]),  # no object: no ready
        (b"null", ["a:READY", "b:READY", "c:LOADING", "d:UNLOADING"]),
    ],
)
def test_the_repository_index_reads_ready_as_triton_does(body: bytes, listed: list[str]) -> None:
    """Triton's ``HandleRepositoryIndex`` reads the body's ``ready`` (false when absent):
    true lists the ready models alone, false every model it holds with its state
    (``RepositoryIndex``: LOADING, UNLOADING). The emulator ignored the body and listed
    the ready models alone whatever it said. A model ready on one instance and loading
    on another is ready."""
    emulator = FakeEmulator()
    emulator.instances = [
        _holding(b="loading", a="ready", d="unloading"),
        _holding(b="ready", c="loading"),
    ]
    answer = index(emulator, body)
    assert answer.status == 200, answer.body
    got = [f"{m['name']}:{m['state']}" for m in json.loads(answer.body)]
    assert got == listed
    assert all(m["version"] == "1" for m in json.loads(answer.body))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"ready": 1}', "attempt to access JSON non-boolean as boolean"),
        (b'{"ready": null}', "attempt to access JSON non-boolean as boolean"),
        (b"not json", "failed to parse the request JSON buffer: "),
    ],
)
def test_an_index_body_triton_cannot_read_is_its_500(body: bytes, message: str) -> None:
    """TritonJson's errors are ``TRITONSERVER_ERROR_INTERNAL``: Triton 2.51 answers a body
    that is no JSON, and a ``ready`` that is no boolean, 500 (with no instance up to ask
    for its parser's words, the emulator's own)."""
    emulator = FakeEmulator()
    emulator.instances = [SimpleNamespace(models={}, up=False, loaded=lambda: [])]
    answer = index(emulator, body)
    assert answer.status == 500
    assert json.loads(answer.body)["error"].startswith(message)


def test_server_metadata_comes_from_an_instance_that_is_up() -> None:
    """``GET /v2`` asks a running Triton; with every one restarting it is the retryable
    503 of the error table, not a 500."""
    asked: list[int] = []

    def instance(index: int, up: bool) -> Any:
        async def v2_get(path: str) -> Any:
            asked.append(index)
            return SimpleNamespace(status=200, body=b'{"name":"triton"}')

        return SimpleNamespace(index=index, up=up, control=SimpleNamespace(v2_get=v2_get))

    emulator = FakeEmulator()
    emulator.instances = [instance(0, False), instance(1, True)]
    assert call(emulator, "GET", "/v2").status == 200 and asked == [1]
    emulator.instances = [instance(0, False)]
    answer = call(emulator, "GET", "/v2")
    assert answer.status == 503 and "restarting" in json.loads(answer.body)["error"]


def test_every_models_statistics_list_a_model_held_twice_once() -> None:
    """``GET /v2/models/stats`` with several instances up: each model once, from the
    first instance listing it (the one its own ``/v2/models/M/stats`` reads), as one
    Triton lists its models; an instance's error comes back as Triton gave it."""

    def instance(index: int, names: list[str], status: int = 200) -> Any:
        async def v2_get(path: str) -> Any:
            assert path == "/v2/models/stats"
            stats = [{"name": n, "version": "1", "inference_count": index} for n in names]
            body = json.dumps({"model_stats": stats}) if status == 200 else '{"error":"x"}'
            return SimpleNamespace(status=status, body=body.encode())

        return SimpleNamespace(index=index, up=True, control=SimpleNamespace(v2_get=v2_get))

    emulator = FakeEmulator()
    emulator.instances = [instance(0, ["a", "b"]), instance(1, ["b", "c"])]
    answer = call(emulator, "GET", "/v2/models/stats")
    stats = json.loads(answer.body)["model_stats"]
    assert answer.status == 200 and emulator.loaded == []
    assert [(m["name"], m["inference_count"]) for m in stats] == [("a", 0), ("b", 0), ("c", 1)]
    emulator.instances = [instance(0, ["a"]), instance(1, [], status=400)]
    assert call(emulator, "GET", "/v2/models/stats")[::2] == (400, b'{"error":"x"}')


def test_a_shared_memory_region_is_registered_on_every_instance_or_on_none() -> None:
    """An invocation may go to any instance (a hot model has copies): a region is
    registered on every instance up; when one refuses it, those that took it unregister
    it again and the caller gets the refusal as Triton gave it. A status is one
    instance's; an instance that is down is not asked."""
    asked: list[tuple[int, str, str]] = []

    def instance(index: int, up: bool = True, refuses: bool = False) -> Any:
        async def v2_request(method: str, path: str, headers: Any = None, body: bytes = b"") -> Any:
            asked.append((index, method, path))
            if refuses and path.endswith("/register"):
                return SimpleNamespace(status=400, headers={}, body=b'{"error":"no key"}')
            return SimpleNamespace(status=200, headers={}, body=b"[]")

        return SimpleNamespace(index=index, up=up, control=SimpleNamespace(v2_request=v2_request))

    register = "/v2/systemsharedmemory/region/r/register"
    emulator = FakeEmulator()
    emulator.instances = [instance(0), instance(1, up=False), instance(2)]
    assert call(emulator, "POST", register).status == 200
    assert asked == [(0, "POST", register), (2, "POST", register)]
    asked.clear()
    assert call(emulator, "GET", "/v2/systemsharedmemory/status").status == 200
    assert asked == [(0, "GET", "/v2/systemsharedmemory/status")]
    asked.clear()
    emulator.instances = [instance(0), instance(1, refuses=True), instance(2)]
    assert call(emulator, "POST", register)[::2] == (400, b'{"error":"no key"}')
    unregister = "/v2/systemsharedmemory/region/r/unregister"
    assert asked == [(0, "POST", register), (1, "POST", register), (0, "POST", unregister)]


def load(emulator: FakeEmulator, body: bytes) -> routes.Answer:
    path = "/v2/repository/models/model-1.tar.gz/load"
    return asyncio.run(
        routes.route(emulator, "POST", path, lambda name: None, body)  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"parameters": {"config": "{\\"max_batch_size\\": 4}"}}', "'config'"),
        (b'{"parameters": {"file:1/model.py": "eA=="}}', "'file:1/model.py'"),
        (b'{"parameters": {"config": "{}", "file:config.pbtxt": ""}}', "'file:config.pbtxt'"),
    ],
)
def test_a_load_overriding_the_config_or_files_is_refused_and_loads_nothing(
    body: bytes, named: str
) -> None:
    """tritonclient's ``load_model(config=..., files=...)`` sends ``parameters`` that Triton
    loads the model with (``HandleRepositoryControl``); the emulator loaded the store's
    tarball and answered 200, as if the override had been made. SageMaker's Triton serves
    no repository API, and the platform loads a model from its tarball alone: refused,
    Triton's 501 (UNSUPPORTED), naming the parameters and what to do instead."""
    emulator = FakeEmulator()
    answer = load(emulator, body)
    assert answer.status == 501
    message = json.loads(answer.body)["error"]
    assert named in message and "tarball" in message
    assert emulator.loaded == []


@pytest.mark.parametrize("body", [b"", b"{}", b'{"parameters": {}}', b"[1]"])
def test_a_load_with_no_override_loads_from_the_store(body: bytes) -> None:
    emulator = FakeEmulator()
    assert load(emulator, body).status == 200
    assert emulator.loaded == ["model-1.tar.gz"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "failed to parse the request JSON buffer: "),
        (b'{"parameters": 1}', "attempt to get members for non-object"),
        (b'{"parameters": null}', "attempt to get members for non-object"),
        (b'{"parameters": {"config": 1}}', "attempt to access JSON non-string as string"),
        (b'{"parameters": {"bogus": "x"}}', "unexpected error on creating Triton parameter"),
    ],
)
def test_a_load_body_triton_cannot_read_is_its_500(body: bytes, message: str) -> None:
    """What Triton 2.51's HandleRepositoryControl answers (measured with the wheel's
    tritonserver): TritonJson's errors and an unknown parameter, 500, with no load."""
    emulator = FakeEmulator()
    answer = load(emulator, body)
    assert answer.status == 500
    assert json.loads(answer.body)["error"].startswith(message)
    assert emulator.loaded == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/models"),
        ("POST", "/models"),
        ("GET", "/models/model-1.tar.gz"),
        ("DELETE", "/models/model-1.tar.gz"),
        ("POST", "/models/model-1.tar.gz/invoke"),
        ("PUT", "/models"),
        ("POST", "/invocations"),
    ],
)
def test_the_containers_own_routes_say_which_route_to_call(method: str, path: str) -> None:
    """``/models...`` and ``/invocations`` are the container's routes (Triton's SageMaker
    front end, ``sagemaker_server.cc``), which the platform calls, never a client: the
    emulator is the endpoint, whose client calls InvokeEndpoint. It answered "no route
    POST /models" (as if the path were a typo); now the answer names the routes to call
    and loads nothing. 404, the emulator's own: the container would take these calls, so
    its 400 with no body (``Handle``'s answer to a path it does not take) would mislead."""
    emulator = FakeEmulator()
    answer = call(emulator, method, path)
    assert answer.status == 404
    message = json.loads(answer.body)["error"]
    assert "container" in message and "/endpoints/" in message and "/v2/" in message
    assert emulator.loaded == []


def test_ping_by_another_method_is_tritons_405() -> None:
    """The SageMaker front end routes ``/ping`` to ``HandleServerHealth``, which answers a
    method but GET 405 "Method Not Allowed" (measured: tritonserver 2.51's SageMaker port)."""
    answer = call(FakeEmulator(), "POST", "/ping")
    assert (answer.status, json.loads(answer.body)) == (405, {"error": "Method Not Allowed"})
