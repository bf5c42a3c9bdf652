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
from typing import Any
from urllib.parse import quote

from aiohttp import web

from mmelocal.emulator.handlers import (
    Answer,
    body_limit_bytes,
    error_for,
    handle_invocation,
    handle_v2_infer,
    parse_v2_path,
    v2_error,
)
from mmelocal.emulator.platform import Emulator

logger = logging.getLogger(__name__)

EMULATOR_KEY: web.AppKey[Emulator] = web.AppKey("emulator", Emulator)


def to_response(answer: Answer) -> web.Response:
    """An :class:`Answer` as an aiohttp response."""
    return web.Response(status=answer.status, body=answer.body, headers=answer.headers)


async def invocations(request: web.Request) -> web.Response:
    """``InvokeEndpoint`` for a multi-model endpoint."""
    body = await request.read()
    answer = await handle_invocation(
        request.app[EMULATOR_KEY], request.match_info["name"], request.headers.get, body
    )
    return to_response(answer)


async def v2_models(request: web.Request) -> web.StreamResponse:
    """Everything under ``/v2/models/``."""
    emulator = request.app[EMULATOR_KEY]
    target, _version, action = parse_v2_path(request.match_info["tail"])
    try:
        if action == "infer" and request.method == "POST":
            return await _v2_infer(request, emulator, target)
        if request.method != "GET":
            return to_response(
                v2_error(405, f"{request.method} is not supported on {request.path}")
            )
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
        return to_response(v2_error(status if status != 429 else 503, message))


async def _v2_infer(request: web.Request, emulator: Emulator, target: str) -> web.Response:
    body = await request.read()
    return to_response(await handle_v2_infer(emulator, target, request.headers.get, body))


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
            return to_response(v2_error(404, f"unknown repository action {action!r}"))
    except Exception as exc:
        status, _kind, message = error_for(exc)
        return to_response(v2_error(status if status != 429 else 503, message))
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
    gauges = emulator.gauges()
    gauges.update(await asyncio.get_running_loop().run_in_executor(None, emulator.read_gauges))
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
    app = web.Application(client_max_size=body_limit_bytes(emulator))
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


__all__ = ["EMULATOR_KEY", "create_app", "to_response"]
