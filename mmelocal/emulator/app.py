"""The HTTP face of the emulator: SageMaker's runtime API and KServe v2 on one port.

* ``POST /endpoints/{name}/invocations`` answers exactly what boto3's ``sagemaker-runtime``
  client parses: 200 with the model's raw body, ``Content-Type``,
  ``x-Amzn-Invoked-Production-Variant`` (and custom attributes when the model sets them);
  errors as rest-json with ``x-amzn-ErrorType``: 400 ``ValidationError``, 424 ``ModelError``
  (``OriginalStatusCode``, ``OriginalMessage``), 429 ``ModelNotReadyException``, 503
  ``ServiceUnavailable`` (retryable), 507 when nothing is left to evict, 500 ``InternalFailure``.
* ``/v2/...``: KServe v2 with on-demand loading, so tritonclient and perf_analyzer work
  against MME semantics; the binary extension (``Inference-Header-Content-Length``) is
  translated to and from Triton's SageMaker binary content type.
* ``GET /ping``, ``GET /metrics`` (Prometheus text, CloudWatch names), ``GET /emulator/state``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any
from urllib.parse import quote

from aiohttp import web

from mmelocal.emulator.instance import InstanceUnavailableError, ModelNotReadyError
from mmelocal.emulator.platform import Emulator
from mmelocal.errors import (
    ModelLoadError,
    ModelNotFoundError,
    OutOfMemoryError,
    UserInputError,
    ValidationError,
)

logger = logging.getLogger(__name__)

TARGET_HEADER = "X-Amzn-SageMaker-Target-Model"
CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
VARIANT_HEADER = "x-Amzn-Invoked-Production-Variant"
SAGEMAKER_BINARY = "application/vnd.sagemaker-triton.binary+json;json-header-size="
V2_BINARY_HEADER = "Inference-Header-Content-Length"
#: the emulator's own answer header: was the model already loaded ("hit") or not ("miss")
CACHE_HEADER = "X-Mmelocal-Model-Cache"
MAX_BODY_BYTES = 128 * 1024 * 1024
EMULATOR_KEY: web.AppKey[Emulator] = web.AppKey("emulator", Emulator)


def error_for(exc: BaseException) -> tuple[int, str, str]:
    """(HTTP status, SageMaker error type, message) for an exception from the platform."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, ModelNotReadyError):
        return 429, "ModelNotReadyException", message
    if isinstance(exc, InstanceUnavailableError):
        return 503, "ServiceUnavailable", message
    if isinstance(exc, OutOfMemoryError):
        return 507, "InsufficientMemory", message
    if isinstance(exc, ModelLoadError):
        return 424, "ModelError", message
    if isinstance(exc, (UserInputError, ModelNotFoundError, ValidationError)):
        return 400, "ValidationError", message
    return 500, "InternalFailure", message


def sagemaker_error(status: int, error_type: str, message: str, **extra: object) -> web.Response:
    """A rest-json error body and headers as botocore parses them."""
    body = {"__type": error_type, "message": message, "Message": message, **extra}
    return web.Response(
        status=status,
        body=json.dumps(body).encode(),
        content_type="application/json",
        headers={"x-amzn-ErrorType": error_type, "x-amzn-RequestId": str(uuid.uuid4())},
    )


async def invocations(request: web.Request) -> web.Response:
    """``InvokeEndpoint`` for a multi-model endpoint."""
    emulator = request.app[EMULATOR_KEY]
    t0 = time.perf_counter()
    response, model_s = await _invocations(request, emulator)
    emulator.metrics.record_invocation(response.status)
    total = time.perf_counter() - t0
    emulator.metrics.observe("OverheadLatency", max(0.0, total - model_s) * 1e6)
    return response


async def _invocations(request: web.Request, emulator: Emulator) -> tuple[web.Response, float]:
    name = request.match_info["name"]
    configured = emulator.config.endpoint_name
    if configured is not None and name != configured:
        return sagemaker_error(400, "ValidationError", f"Endpoint {name} not found."), 0.0
    target = request.headers.get(TARGET_HEADER)
    if target is None:
        return (
            sagemaker_error(
                400,
                "ValidationError",
                f"This is a multi-model endpoint: the {TARGET_HEADER} header (boto3: "
                "TargetModel=...) must name the model, e.g. 'model-7.tar.gz'",
            ),
            0.0,
        )
    body = await request.read()
    headers = _forward_headers(request)
    try:
        result = await emulator.invoke(target, body, headers)
    except Exception as exc:
        status, kind, message = error_for(exc)
        if status == 500:
            logger.exception("invocation of %r failed", target)
        extra: dict[str, object] = {}
        if isinstance(exc, ModelLoadError):
            extra = {
                "OriginalStatusCode": exc.status_code or 500,
                "OriginalMessage": exc.triton_message or message,
            }
        return sagemaker_error(status, kind, message, **extra), 0.0
    if result.status != 200:
        original = result.body.decode("utf-8", errors="replace")
        message = (
            f"Received client error ({result.status}) from model {target!r} with message "
            f'"{original}".'
            if result.status < 500
            else f"Received server error ({result.status}) from model {target!r} with message "
            f'"{original}".'
        )
        return (
            sagemaker_error(
                424,
                "ModelError",
                message,
                OriginalStatusCode=result.status,
                OriginalMessage=original,
                LogStreamArn=f"local:{request.app[EMULATOR_KEY].cache.root}",
            ),
            result.model_latency_s,
        )
    out = {
        "Content-Type": result.headers.get("content-type", "application/json"),
        VARIANT_HEADER: "AllTraffic",
        "x-amzn-RequestId": str(uuid.uuid4()),
        CACHE_HEADER: "hit" if result.cache_hit else "miss",
    }
    custom = result.headers.get(CUSTOM_ATTRIBUTES.lower())
    if custom is not None:
        out[CUSTOM_ATTRIBUTES] = custom
    return web.Response(body=result.body, headers=out), result.model_latency_s


def _forward_headers(
    request: web.Request, content_type: str | None = None
) -> list[tuple[str, str]]:
    incoming = request.headers
    kind = content_type or incoming.get("Content-Type") or "application/json"
    headers = [("Content-Type", kind)]
    for name in ("Accept", "Content-Encoding", CUSTOM_ATTRIBUTES):
        value = incoming.get(name)
        if value is not None:
            headers.append((name, value))
    return headers


# -- KServe v2 --------------------------------------------------------------------------
V2_ACTIONS = ("infer", "ready", "config", "stats")


def parse_v2_path(tail: str) -> tuple[str, str | None, str]:
    """``target[/versions/N][/action]`` -> (target, version, action; "" = metadata)."""
    action = ""
    for candidate in V2_ACTIONS:
        if tail.endswith("/" + candidate):
            action = candidate
            tail = tail[: -len(candidate) - 1]
            break
    version: str | None = None
    head, sep, last = tail.rpartition("/versions/")
    if sep and last.isdigit():
        tail, version = head, last
    return tail, version, action


def v2_error(status: int, message: str) -> web.Response:
    """Triton's error shape (``{"error": ...}``), which tritonclient raises as its exception."""
    return web.json_response({"error": message}, status=status)


async def v2_models(request: web.Request) -> web.StreamResponse:
    """Everything under ``/v2/models/``."""
    emulator = request.app[EMULATOR_KEY]
    target, _version, action = parse_v2_path(request.match_info["tail"])
    try:
        if action == "infer" and request.method == "POST":
            return await _v2_infer(request, emulator, target)
        if request.method != "GET":
            return v2_error(405, f"{request.method} is not supported on {request.path}")
        inst = await emulator.ensure_loaded(target)
        if action == "ready":
            return web.Response(status=200)
        suffix = f"/{action}" if action else ""
        assert emulator.session is not None
        url = f"{inst.launcher.endpoints.http_url}/v2/models/{quote(target, safe='')}{suffix}"
        async with emulator.session.get(url) as resp:
            data = await resp.read()
            return web.Response(
                status=resp.status,
                body=data,
                content_type="application/json",
            )
    except Exception as exc:
        status, _kind, message = error_for(exc)
        if status == 500:
            logger.exception("v2 request for %r failed", target)
        return v2_error(status if status != 429 else 503, message)


async def _v2_infer(request: web.Request, emulator: Emulator, target: str) -> web.Response:
    t0 = time.perf_counter()
    body = await request.read()
    header_length = request.headers.get(V2_BINARY_HEADER)
    content_type = SAGEMAKER_BINARY + header_length if header_length else "application/json"
    headers = _forward_headers(request, content_type)
    model_s = 0.0
    try:
        result = await emulator.invoke(target, body, headers)
        model_s = result.model_latency_s
        out: dict[str, str] = {}
        content_type = result.headers.get("content-type", "application/json")
        if content_type.startswith(SAGEMAKER_BINARY):
            out[V2_BINARY_HEADER] = content_type[len(SAGEMAKER_BINARY) :]
            content_type = "application/octet-stream"
        out["Content-Type"] = content_type
        response = web.Response(status=result.status, body=result.body, headers=out)
    except Exception as exc:
        status, _kind, message = error_for(exc)
        if status == 500:
            logger.exception("v2 infer for %r failed", target)
        response = v2_error(status if status != 429 else 503, message)
    emulator.metrics.record_invocation(response.status)
    total = time.perf_counter() - t0
    emulator.metrics.observe("OverheadLatency", max(0.0, total - model_s) * 1e6)
    return response


async def v2_live(request: web.Request) -> web.Response:
    """``GET /v2/health/live``."""
    return web.Response(status=200)


async def v2_ready(request: web.Request) -> web.Response:
    """``GET /v2/health/ready``: 200 when an instance is up."""
    emulator = request.app[EMULATOR_KEY]
    return web.Response(status=200 if any(i.up for i in emulator.instances) else 503)


async def v2_server(request: web.Request) -> web.Response:
    """``GET /v2``: the first instance's server metadata."""
    emulator = request.app[EMULATOR_KEY]
    assert emulator.session is not None
    url = f"{emulator.instances[0].launcher.endpoints.http_url}/v2"
    async with emulator.session.get(url) as resp:
        return web.Response(
            status=resp.status, body=await resp.read(), content_type="application/json"
        )


async def v2_index(request: web.Request) -> web.Response:
    """``POST /v2/repository/index``: loaded models (the store is open-ended)."""
    emulator = request.app[EMULATOR_KEY]
    models = [
        {"name": t, "version": "1", "state": "READY"}
        for inst in emulator.instances
        for t in inst.loaded()
    ]
    return web.json_response(models)


async def v2_repository_action(request: web.Request) -> web.Response:
    """``POST /v2/repository/models/{target}/load|unload``."""
    emulator = request.app[EMULATOR_KEY]
    tail = request.match_info["tail"]
    target, _, action = tail.rpartition("/")
    try:
        if action == "load":
            await emulator.ensure_loaded(target)
        elif action == "unload":
            for inst in emulator.instances:
                await inst.unload(target, reason="unload requested through /v2/repository")
        else:
            return v2_error(404, f"unknown repository action {action!r}")
    except Exception as exc:
        status, _kind, message = error_for(exc)
        return v2_error(status if status != 429 else 503, message)
    return web.Response(status=200)


# -- platform views ----------------------------------------------------------------------
async def ping(request: web.Request) -> web.Response:
    """``GET /ping``: healthy when an instance is up; names the memory probe."""
    emulator = request.app[EMULATOR_KEY]
    up = any(i.up for i in emulator.instances)
    body = {
        "status": "Healthy" if up else "Unhealthy",
        "instances": [
            {"index": i.index, "up": i.up, "probe": i.probe.name} for i in emulator.instances
        ],
    }
    return web.json_response(body, status=200 if up else 503)


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text with the CloudWatch names."""
    emulator = request.app[EMULATOR_KEY]
    gauges = await asyncio.get_running_loop().run_in_executor(None, emulator.gauges)
    return web.Response(
        text=emulator.metrics.render(gauges), content_type="text/plain", charset="utf-8"
    )


async def state(request: web.Request) -> web.Response:
    """``GET /emulator/state``: loaded set, footprints, recent events, metric snapshot."""
    emulator = request.app[EMULATOR_KEY]
    data: dict[str, Any] = emulator.state()
    data["metrics"] = {
        k: v for k, v in emulator.metrics.snapshot().items() if not isinstance(v, float)
    }
    data["metrics"].update({k: v for k, v in emulator.metrics.counters.items()})
    return web.json_response(data, dumps=lambda d: json.dumps(d, default=str))


def create_app(emulator: Emulator) -> web.Application:
    """The aiohttp application serving ``emulator`` (started and stopped with the app)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[EMULATOR_KEY] = emulator

    async def lifecycle(app: web.Application) -> Any:
        await emulator.start()
        yield
        await emulator.stop()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/endpoints/{name}/invocations", invocations)
    app.router.add_get("/ping", ping)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/emulator/state", state)
    app.router.add_get("/v2", v2_server)
    app.router.add_get("/v2/health/live", v2_live)
    app.router.add_get("/v2/health/ready", v2_ready)
    app.router.add_post("/v2/repository/index", v2_index)
    app.router.add_post("/v2/repository/models/{tail:.+}", v2_repository_action)
    app.router.add_route("*", "/v2/models/{tail:.+}", v2_models)
    return app


__all__ = ["CACHE_HEADER", "create_app", "error_for", "parse_v2_path", "sagemaker_error"]
