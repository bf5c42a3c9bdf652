"""Every route of the emulator's HTTP face, independent of the server that carries it.

* ``POST /endpoints/{name}/invocations`` and ``POST /v2/models/{target}/infer`` are
  :mod:`.invocation`'s (:func:`invoke_route` recognises them; :func:`endpoint_name_error`
  is the service's check of the endpoint name).
* ``/v2/...``: KServe v2 with on-demand loading, so tritonclient and perf_analyzer work
  against MME semantics; ``generate`` / ``generate_stream``, trace and log settings reach
  the Triton that holds the model (or every Triton), as Triton 2.51's routes take them;
  the shared-memory routes are :mod:`.shared_memory_routes`', the repository routes
  (index, load, unload) :mod:`.repository_routes`'.
* ``GET /ping``, ``GET /metrics`` (Prometheus text, CloudWatch names), ``GET /emulator/state``.

:func:`route` takes the request's method, path (without the query), a header getter and
the body, and returns an :class:`~mmelocal.emulator.answers.Answer`; the fast front
server (:mod:`.http_server`) is the one HTTP server that calls it.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from typing import Any
from urllib.parse import quote, unquote

from mmelocal.emulator.answers import (
    INTERNAL_FAILURE,
    Answer,
    HeaderGetter,
    error_kind,
    parse_v2_path,
    reply_answer,
    sagemaker_error,
    v2_error,
    v2_exception,
)
from mmelocal.emulator.emulator import Emulator
from mmelocal.emulator.repository_routes import REPOSITORY_ROUTE, v2_repository
from mmelocal.emulator.shared_memory_routes import SHARED_MEMORY_ROUTE, shared_memory
from mmelocal.emulator.upstream import Reply
from mmelocal.errors import InstanceUnavailableError
from mmelocal.facts.invoke_errors import (
    V2_METHOD_NOT_ALLOWED,
    V2_NOT_AVAILABLE,
    V2_NOT_FOUND,
    V2_NOT_READY,
    V2_TRACE_UNKNOWN,
)
from mmelocal.facts.runtime_api import UNSERVED_RUNTIME_CALLS
from mmelocal.facts.sagemaker import (
    ENDPOINT_NAME_PATTERN,
    MAX_CUSTOM_ATTRIBUTES_LENGTH,
    MAX_ENDPOINT_NAME_LENGTH,
    MAX_INFERENCE_ID_LENGTH,
    TARGET_MODEL_PATTERN,
)

logger = logging.getLogger(__name__)

_JSON_HEADERS = [("Content-Type", "application/json; charset=utf-8")]


def json_answer(data: Any, status: int = 200) -> Answer:
    """A JSON answer (objects the standard encoder cannot write are written as text)."""
    return Answer(status, list(_JSON_HEADERS), json.dumps(data, default=str).encode())


def empty(status: int) -> Answer:
    """An answer with no body."""
    return Answer(status, [], b"")


_ENDPOINT_NAME = re.compile(ENDPOINT_NAME_PATTERN)


@functools.lru_cache(maxsize=1024)  # a hot-path check: the same few names every call
def endpoint_name_error(name: str) -> str | None:
    """The service's validation message for an EndpointName it refuses, else None."""
    shown = name[:80]
    if len(name) > MAX_ENDPOINT_NAME_LENGTH:
        return (
            f"1 validation error detected: Value '{shown}' at 'endpointName' failed to satisfy "
            f"constraint: Member must have length less than or equal to {MAX_ENDPOINT_NAME_LENGTH}"
        )
    if not _ENDPOINT_NAME.fullmatch(name):
        return (
            f"1 validation error detected: Value '{shown}' at 'endpointName' failed to satisfy "
            f"constraint: Member must satisfy regular expression pattern: {ENDPOINT_NAME_PATTERN}"
        )
    return None


def header_error(custom: bytes | None, inference_id: bytes | None) -> str | None:
    """The service's validation message for a ``CustomAttributes`` or ``InferenceId`` it
    refuses (botocore's shapes: at most 1024 ASCII characters; 1 to 64 printable
    characters, not starting with whitespace), else None. botocore checks only minimums
    on the client, so these reach the service (the values are read as UTF-8)."""
    errors: list[str] = []
    if custom is not None:
        if not custom.isascii():
            errors.append(
                "Value at 'customAttributes' failed to satisfy constraint: Member must "
                "satisfy regular expression pattern: \\p{ASCII}* (visible US-ASCII "
                "characters only)"
            )
        elif len(custom) > MAX_CUSTOM_ATTRIBUTES_LENGTH:
            errors.append(
                "Value at 'customAttributes' failed to satisfy constraint: Member must have "
                f"length less than or equal to {MAX_CUSTOM_ATTRIBUTES_LENGTH}"
            )
    if inference_id is not None:
        text = inference_id.decode("utf-8", "surrogateescape")
        shown = text[:80]
        if not text:
            errors.append(
                f"Value '{shown}' at 'inferenceId' failed to satisfy constraint: Member must "
                "have length greater than or equal to 1"
            )
        elif len(text) > MAX_INFERENCE_ID_LENGTH:
            errors.append(
                f"Value '{shown}' at 'inferenceId' failed to satisfy constraint: Member must "
                f"have length less than or equal to {MAX_INFERENCE_ID_LENGTH}"
            )
        elif text[0].isspace() or not text.isprintable():
            errors.append(
                f"Value {shown!r} at 'inferenceId' failed to satisfy constraint: Member "
                f"must satisfy regular expression pattern: {TARGET_MODEL_PATTERN}"
            )
    if not errors:
        return None
    count = f"{len(errors)} validation error{'s' if len(errors) > 1 else ''} detected"
    return f"{count}: {'; '.join(errors)}"


def invoke_route(method: str, path: str) -> tuple[str, str] | None:
    """``("invocations", endpoint name)`` or ``("infer", target)`` for the two invoke
    routes (``path`` without its query, still quoted); None for any other request. The
    endpoint name may be one the service refuses (see :func:`endpoint_name_error`)."""
    if method != "POST":
        return None
    if path.startswith("/endpoints/") and path.endswith("/invocations"):
        return "invocations", unquote(path[len("/endpoints/") : -len("/invocations")])
    if path.startswith("/v2/models/") and path.endswith("/infer"):
        parsed = parse_v2_path(path[len("/v2/models/") :])
        if parsed is None or parsed[2] != "infer":
            return None  # Triton's model route does not take it: no route
        return "infer", unquote(parsed[0])
    return None


async def route(
    emulator: Emulator, method: str, path: str, get: HeaderGetter, body: bytes
) -> Answer:
    """The answer to one request that is not an invocation (``path`` without its query
    string, still quoted)."""
    if invoke_route(method, path) is not None:  # served by .invocation, never routed
        raise AssertionError(f"{method} {path} is an invocation")
    if path == "/v2/models/stats":  # before the model route, as Triton's Handle matches
        return await v2_all_stats(emulator, method)
    if path.startswith("/v2/models/"):
        parsed = parse_v2_path(path[len("/v2/models/") :])
        if parsed is None:
            return v2_error(404, V2_NOT_FOUND)
        target, version, action = parsed
        return await v2_models(emulator, method, unquote(target), version, action, get, body)
    if path in _SERVER_SETTINGS:
        return await v2_server_setting(emulator, method, path, get, body)
    simple = _SIMPLE.get((method, path))
    if simple is not None:
        return await simple(emulator)
    shm = SHARED_MEMORY_ROUTE.fullmatch(path)
    if shm is not None:
        return await shared_memory(emulator, method, path, shm, _forwarded(get), body)
    repository = REPOSITORY_ROUTE.fullmatch(path)
    if repository is not None:
        return await v2_repository(emulator, method, *repository.groups(), body=body)
    unserved = _UNSERVED_CALL.fullmatch(path)
    if unserved is not None and method == "POST":
        return unserved_runtime_call(emulator, *unserved.groups())
    if path in _PATHS or path.startswith(_PREFIXES):
        return v2_error(405, V2_METHOD_NOT_ALLOWED)
    if path == "/v2" or path.startswith("/v2/"):
        return v2_error(404, V2_NOT_FOUND)  # Triton's answer to a path no route takes
    if _CONTAINER_ROUTE.fullmatch(path):
        return v2_error(404, _CONTAINER_ROUTE_MESSAGE.format(method=method, path=path))
    return v2_error(404, f"no route {method} {path}")


#: the runtime calls the emulator does not serve (:data:`UNSERVED_RUNTIME_CALLS`)
_UNSERVED_CALL = re.compile(
    rf"/endpoints/([^/]+)/({'|'.join(map(re.escape, UNSERVED_RUNTIME_CALLS))})"
)
#: the container's own routes (Triton's SageMaker front end, ``sagemaker_server.h`` 2.51:
#: ``/invocations`` and ``/models(?:/)?([^/]+)?(/invoke)?``), which the platform calls
_CONTAINER_ROUTE = re.compile(r"/invocations|/models(?:/[^/]*)?(?:/invoke)?")
_CONTAINER_ROUTE_MESSAGE = (
    "{method} {path} is a route of the SageMaker container, which the platform calls to "
    "load, unload and invoke models; the emulator is the endpoint and calls it itself. Call "
    "InvokeEndpoint (POST /endpoints/ENDPOINT/invocations with the header "
    "X-Amzn-SageMaker-Target-Model), or the KServe v2 routes (POST /v2/models/TARGET/infer, "
    "POST /v2/repository/models/TARGET/load)"
)


def unserved_runtime_call(emulator: Emulator, quoted_name: str, call: str) -> Answer:
    """``POST /endpoints/{name}/async-invocations`` or ``.../invocations-response-stream``:
    the service's error shape, a ``ValidationError`` (as the local AWS refuses them: no
    endpoint here serves them), with the endpoint name checked as InvokeEndpoint's is."""
    name = unquote(quoted_name)
    refused = endpoint_name_error(name)
    if refused is None:
        wanted = emulator.config.endpoint_name
        if wanted is not None and name != wanted:
            refused = f"Endpoint {name} not found."
        else:
            refused = (
                f"Endpoint {name} does not serve {UNSERVED_RUNTIME_CALLS[call]}: the MME "
                "emulator serves InvokeEndpoint only."
            )
    return sagemaker_error(400, "ValidationError", refused)


async def v2_models(
    emulator: Emulator,
    method: str,
    target: str,
    version: str | None,
    action: str,
    get: HeaderGetter | None = None,
    body: bytes = b"",
) -> Answer:
    """``/v2/models/`` but infer: ready, metadata, config and stats (GET); ``generate``
    and ``generate_stream`` (POST, :func:`v2_generate`) and ``trace/setting`` (GET or
    POST, :func:`v2_model_trace`). Any other method, and infer by anything but POST, is
    405 before any load, as Triton's ``HTTPAPIServer`` handlers answer
    (``src/http_server.cc``).

    A read is no use of the model (:meth:`~.router.Router.reading`): a loaded model's
    answer comes from the Triton holding it, its recency untouched. A model loaded nowhere
    is loaded for its metadata and config (:data:`_LOADING_READS`: what tritonclient and
    perf_analyzer read before they infer); its readiness and statistics are Triton's
    answers for a model it has not loaded, with no load.
    """
    if action in _GENERATE:
        if method != "POST":
            return v2_error(405, V2_METHOD_NOT_ALLOWED)
        return await v2_generate(emulator, target, version, action, get, body)
    if action == _TRACE:
        if version is not None:  # Triton's model route takes no version for it: no route
            return v2_error(404, V2_NOT_FOUND)
        if method not in ("GET", "POST"):
            return v2_error(405, V2_METHOD_NOT_ALLOWED)
        return await v2_model_trace(emulator, target, method, get, body)
    if method != "GET" or action == "infer":  # infer by POST is an invocation, never here
        return v2_error(405, V2_METHOD_NOT_ALLOWED)
    path = _model_path(target, version, action)
    try:
        with emulator.router.reading(target) as inst:
            if inst is not None:
                if action == "ready" and version is None:
                    return empty(200)
                return _json_reply(await inst.control.v2_get(path))
        if action == "ready":
            return v2_error(400, V2_NOT_READY)
        if action not in _LOADING_READS:
            return v2_error(400, V2_NOT_AVAILABLE.format(model=target))
        inst = await emulator.ensure_loaded(target)
        return _json_reply(await inst.control.v2_get(path))
    except Exception as exc:
        if error_kind(exc) is INTERNAL_FAILURE:
            logger.exception("v2 request for %r failed", target)
        return v2_exception(exc)


#: the v2 model reads that load a model loaded nowhere ("": metadata)
_LOADING_READS = frozenset({"", "config"})
_GENERATE = frozenset({"generate", "generate_stream"})
_TRACE = "trace/setting"
#: request headers a forwarded v2 request keeps (Triton answers the encodings it refuses)
_V2_FORWARDED = ("Content-Type", "Content-Encoding", "Accept-Encoding")


def _model_path(target: str, version: str | None, action: str) -> str:
    """The v2 path of ``target``'s ``action`` on the Triton that holds it."""
    path = f"/v2/models/{quote(target, safe=_PCHAR)}"
    if version is not None:
        path += f"/versions/{version}"
    if action:
        path += f"/{action}"
    return path


def _forwarded(get: HeaderGetter | None) -> list[tuple[str, str]]:
    if get is None:
        return []
    return [(name, value) for name in _V2_FORWARDED if (value := get(name)) is not None]


async def v2_generate(
    emulator: Emulator,
    target: str,
    version: str | None,
    action: str,
    get: HeaderGetter | None,
    body: bytes,
) -> Answer:
    """``POST /v2/models/{target}/generate`` (or ``generate_stream``): an inference, so
    the model is loaded on demand as for ``infer``, and Triton's answer is passed on (a
    stream's events arrive together, once Triton ends the stream). Counted in the
    invocation metrics as ``infer`` is."""
    metrics = emulator.metrics
    start = time.perf_counter()
    hit: bool | None = None  # a ModelCacheHit sample once the call reaches its model
    try:
        emulator.check_target(target)
        hit = False
        inst = emulator.router.pick(target)
        acquired = await inst.acquire(target, wait_timeout_s=emulator.config.load_wait_timeout_s)
        hit = acquired.cache_hit
        try:
            sent = time.perf_counter()
            path = _model_path(target, version, action)
            reply = await inst.control.v2_request(
                "POST", path, _forwarded(get), body, runs_model=True
            )
        finally:
            inst.release(target)
    except Exception as exc:
        if error_kind(exc) is INTERNAL_FAILURE:
            logger.exception("v2 %s for %r failed", action, target)
        answer = v2_exception(exc)
        metrics.record_invocation(answer.status, time.perf_counter() - start, hit)
        return answer
    latency_s = time.perf_counter() - sent
    overhead_s = time.perf_counter() - start - latency_s
    metrics.record_served(reply.status, overhead_s, latency_s, acquired.cache_hit, acquired.wait_s)
    return reply_answer(reply)


async def v2_model_trace(
    emulator: Emulator, target: str, method: str, get: HeaderGetter | None, body: bytes
) -> Answer:
    """``/v2/models/{target}/trace/setting``: read (GET) from the Triton holding the model,
    or changed (POST) on every Triton holding it; for a model loaded nowhere, Triton's
    answer for a model it has not loaded (400), with no load (a setting is no use)."""
    holders = [i for i in emulator.instances if i.up and i.is_ready(target)]
    if not holders:
        return v2_error(400, V2_TRACE_UNKNOWN.format(model=target))
    path = _model_path(target, None, _TRACE)
    try:
        for inst in holders[:1] if method == "GET" else holders:
            reply = await inst.control.v2_request(method, path, _forwarded(get), body)
    except Exception as exc:
        return v2_exception(exc)
    return reply_answer(reply)


async def v2_server_setting(
    emulator: Emulator, method: str, path: str, get: HeaderGetter | None, body: bytes
) -> Answer:
    """``/v2/trace/setting`` and ``/v2/logging``: read (GET) from an instance that is up,
    or changed (POST) on every instance up (one that starts later has Triton's defaults);
    other methods 405, as Triton's ``HandleTrace`` / ``HandleLogging`` answer."""
    if method not in ("GET", "POST"):
        return v2_error(405, V2_METHOD_NOT_ALLOWED)
    up = [i for i in emulator.instances if i.up]
    if not up:
        return v2_exception(InstanceUnavailableError("every Triton instance is restarting; retry"))
    try:
        for inst in up[:1] if method == "GET" else up:
            reply = await inst.control.v2_request(method, path, _forwarded(get), body)
    except Exception as exc:
        return v2_exception(exc)
    return reply_answer(reply)


#: server-wide settings every Triton has (``trace_regex_``, ``/v2/logging``: 2.51)
_SERVER_SETTINGS = frozenset({"/v2/trace/setting", "/v2/logging"})


#: the characters a path segment may hold as they are besides the unreserved ones (RFC
#: 3986 ``pchar``): Triton's v2 endpoint does not percent-decode a model name, so only the
#: characters a path cannot carry are encoded (a name with those, ``/`` included, cannot
#: be asked for there)
_PCHAR = "!$&'()*+,;=:@"


def _json_reply(reply: Reply) -> Answer:
    return Answer(reply.status, list(_JSON_HEADERS), reply.body)


async def v2_all_stats(emulator: Emulator, method: str) -> Answer:
    """``GET /v2/models/stats``: the statistics of every model (Triton's
    ``HandleModelStats`` with no name), from every instance that is up: one instance's
    answer as Triton gave it; with several, each model once, from the first instance that
    lists it (the one a model's own statistics come from), and the first answer that is
    not a 200 as it came."""
    if method != "GET":
        return v2_error(405, V2_METHOD_NOT_ALLOWED)
    up = [i for i in emulator.instances if i.up]
    if not up:
        return v2_exception(InstanceUnavailableError("every Triton instance is restarting; retry"))
    models: dict[tuple[object, object], Any] = {}
    try:
        for inst in up:
            reply = await inst.control.v2_get("/v2/models/stats")
            if reply.status != 200 or len(up) == 1:
                return _json_reply(reply)
            for model in json.loads(reply.body).get("model_stats", []):
                models.setdefault((model.get("name"), model.get("version")), model)
    except Exception as exc:
        if error_kind(exc) is INTERNAL_FAILURE:
            logger.exception("v2 statistics of every model failed")
        return v2_exception(exc)
    body = json.dumps({"model_stats": list(models.values())}, separators=(",", ":"))
    return Answer(200, list(_JSON_HEADERS), body.encode())


async def v2_server(emulator: Emulator) -> Answer:
    """``GET /v2``: the server metadata of the first instance that is up (the error
    table's retryable 503 while every one restarts)."""
    inst = next((i for i in emulator.instances if i.up), None)
    if inst is None:
        return v2_exception(InstanceUnavailableError("every Triton instance is restarting; retry"))
    try:
        return _json_reply(await inst.control.v2_get("/v2"))
    except Exception as exc:
        if error_kind(exc) is INTERNAL_FAILURE:
            logger.exception("v2 server metadata failed")
        return v2_exception(exc)


async def v2_live(emulator: Emulator) -> Answer:
    """``GET /v2/health/live``."""
    return empty(200)


async def v2_ready(emulator: Emulator) -> Answer:
    """``GET /v2/health/ready``: 200 when an instance is up, else 400 as Triton answers a
    server that is not ready (``HandleServerHealth``, ``src/http_server.cc``)."""
    return empty(200 if any(i.up for i in emulator.instances) else 400)


async def ping(emulator: Emulator) -> Answer:
    """``GET /ping``: 200 when an instance is up, naming each instance's memory probe;
    otherwise 400 with no body, as the deployed container answers a server that is not
    healthy (Triton's SageMaker front end: ``HandleServerHealth``, ``src/http_server.cc``).
    SageMaker reads only whether the answer is 200 ("How Your Container Should Respond to
    Health Check (Ping) Requests"); ``/emulator/state`` says which instance is down."""
    if not any(i.up for i in emulator.instances):
        return empty(400)
    body = {
        "status": "Healthy",
        "instances": [
            {"index": i.index, "up": i.up, "probe": i.probe.name} for i in emulator.instances
        ],
    }
    return json_answer(body)


async def metrics(emulator: Emulator) -> Answer:
    """``GET /metrics``: Prometheus text with the CloudWatch names."""
    gauges = await emulator.scrape_gauges()
    text = emulator.metrics.render(gauges)
    return Answer(200, [("Content-Type", "text/plain; charset=utf-8")], text.encode())


async def state(emulator: Emulator) -> Answer:
    """``GET /emulator/state``: loaded set, footprints, recent events, metric snapshot."""
    data: dict[str, Any] = emulator.state()
    data["metrics"] = {
        k: v for k, v in emulator.metrics.snapshot().items() if not isinstance(v, float)
    }
    data["metrics"].update({k: v for k, v in emulator.metrics.counters.items()})
    return json_answer(data)


_SIMPLE = {
    ("GET", "/ping"): ping,
    ("GET", "/metrics"): metrics,
    ("GET", "/emulator/state"): state,
    ("GET", "/v2"): v2_server,
    ("GET", "/v2/health/live"): v2_live,
    ("GET", "/v2/health/ready"): v2_ready,
}
#: paths and path prefixes that exist (another method on them is a 405, not a 404)
_PATHS = frozenset(path for _, path in _SIMPLE)
_PREFIXES = ("/endpoints/",)

__all__ = ["endpoint_name_error", "header_error", "invoke_route", "json_answer", "route"]
