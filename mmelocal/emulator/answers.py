"""The two hot routes, independent of the HTTP server that carries them.

:func:`handle_invocation` (SageMaker ``InvokeEndpoint``) and :func:`handle_v2_infer`
(KServe v2 ``infer``) take the request's pieces (a header getter and the body) and return
an :class:`Answer` (status, headers, body). The routes (:mod:`.routes`) and the hot lane
(:mod:`.hotlane`) both build their answers here, so a warm call and a cold one are
answered alike, byte for byte.

Errors are shaped as botocore's rest-json parser expects: JSON ``{"__type", "message"}``
plus the ``x-amzn-ErrorType`` header. Which exception becomes which status, error type and
extra fields is :data:`~mmelocal.facts.invoke_errors.SAGEMAKER_ERRORS`, one table (adding an
error code is one entry).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from mmelocal.emulator.emulator import Emulator, InvokeResult
from mmelocal.facts.invoke_errors import (
    INTERNAL_FAILURE,
    LOAD_ERROR_STATUS,
    PAYLOAD_TOO_LARGE_STATUS,
    SAGEMAKER_ERRORS,
    SageMakerError,
    error_kind,
)
from mmelocal.facts.sagemaker import (
    CUSTOM_ATTRIBUTES_HEADER,
    ERROR_TYPE_HEADER,
    INVOKED_VARIANT_HEADER,
    REQUEST_ID_HEADER,
    SAGEMAKER_BINARY_CONTENT_TYPE,
    TARGET_MODEL_HEADER,
)

logger = logging.getLogger(__name__)

TARGET_HEADER = TARGET_MODEL_HEADER
CUSTOM_ATTRIBUTES = CUSTOM_ATTRIBUTES_HEADER
VARIANT_HEADER = INVOKED_VARIANT_HEADER
SAGEMAKER_BINARY = SAGEMAKER_BINARY_CONTENT_TYPE
V2_BINARY_HEADER = "Inference-Header-Content-Length"
#: the emulator's own answer header: was the model already loaded ("hit") or not ("miss")
CACHE_HEADER = "X-Mmelocal-Model-Cache"
JSON_TYPE = "application/json"

HeaderGetter = Callable[[str], "str | None"]

#: the most either HTTP server reads of one request body (v2 infer has no service limit;
#: InvokeEndpoint bodies over ``--max-payload`` are answered 413 once read)
MAX_BODY_BYTES = 128 * 1024 * 1024


def body_limit_bytes(emulator: Emulator) -> int:
    """How much of one request body the HTTP server reads before answering 413."""
    return max(MAX_BODY_BYTES, emulator.config.max_payload_bytes + 1)


_REQUEST_IDS = itertools.count()
_HEX = uuid.uuid4().hex
_REQUEST_PREFIX = f"{_HEX[:8]}-{_HEX[8:12]}-{_HEX[12:16]}-{_HEX[16:20]}-"


def request_id() -> str:
    """A unique ``x-amzn-RequestId`` (uuid-shaped; a counter after a random prefix)."""
    return f"{_REQUEST_PREFIX}{next(_REQUEST_IDS):012x}"


class Answer(NamedTuple):
    """A complete HTTP answer (a tuple: built on every request)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def log_stream_arn(log_path: Path | None, instance: int = 0) -> str:
    """Where to read what the model said: the Triton log (SageMaker names its CloudWatch
    log stream here)."""
    return f"local:{log_path}" if log_path is not None else f"local:triton-{instance}"


def sagemaker_error(status: int, error_type: str, message: str, **extra: object) -> Answer:
    """A rest-json error as botocore parses it."""
    body = {"__type": error_type, "message": message, "Message": message, **extra}
    headers = [
        ("Content-Type", JSON_TYPE),
        (ERROR_TYPE_HEADER, error_type),
        (REQUEST_ID_HEADER, request_id()),
    ]
    return Answer(status, headers, json.dumps(body).encode())


def payload_too_large(limit_bytes: int) -> Answer:
    """The service's answer to a body over the InvokeEndpoint limit: 413 with no ``__type``,
    which boto3 raises as ClientError Code "413" (the limit's source:
    :data:`~mmelocal.facts.sagemaker.MAX_PAYLOAD_BYTES`)."""
    message = (
        f"HTTP content length exceeded {limit_bytes} bytes. (InvokeEndpoint bodies are capped "
        "at 6 MB; send less per call, or raise the emulator's cap with --max-payload)"
    )
    headers = [("Content-Type", JSON_TYPE), (REQUEST_ID_HEADER, request_id())]
    return Answer(PAYLOAD_TOO_LARGE_STATUS, headers, json.dumps({"message": message}).encode())


def v2_error(status: int, message: str) -> Answer:
    """Triton's error shape (``{"error": ...}``), which tritonclient raises as its exception."""
    return Answer(status, [("Content-Type", JSON_TYPE)], json.dumps({"error": message}).encode())


#: request headers passed on to Triton as they came, besides the content type
FORWARDED_HEADERS = ("Accept", "Content-Encoding", CUSTOM_ATTRIBUTES)


def forward_headers(get: HeaderGetter, content_type: str | None = None) -> list[tuple[str, str]]:
    """The request headers Triton needs (content type, accept, encoding, custom attributes)."""
    headers = [("Content-Type", content_type or get("Content-Type") or JSON_TYPE)]
    for name in FORWARDED_HEADERS:
        value = get(name)
        if value is not None:
            headers.append((name, value))
    return headers


async def handle_invocation(
    emulator: Emulator, endpoint_name: str, get: HeaderGetter, body: bytes
) -> Answer:
    """``POST /endpoints/{name}/invocations`` (metrics recorded here)."""
    t0 = time.perf_counter()
    limit = emulator.config.max_payload_bytes
    if len(body) > limit:
        answer, model_s = payload_too_large(limit), 0.0
    else:
        answer, model_s = await _invocation(emulator, endpoint_name, get, body)
    emulator.metrics.record_invocation(answer.status, time.perf_counter() - t0 - model_s)
    return answer


async def _invocation(
    emulator: Emulator, name: str, get: HeaderGetter, body: bytes
) -> tuple[Answer, float]:
    configured = emulator.config.endpoint_name
    if configured is not None and name != configured:
        return sagemaker_error(400, "ValidationError", f"Endpoint {name} not found."), 0.0
    target = get(TARGET_HEADER)
    if target is None:
        message = (
            f"This is a multi-model endpoint: the {TARGET_HEADER} header (boto3: "
            "TargetModel=...) must name the model, e.g. 'model-7.tar.gz'"
        )
        return sagemaker_error(400, "ValidationError", message), 0.0
    try:
        result = await emulator.invoke(target, body, forward_headers(get))
    except Exception as exc:
        return invocation_error(exc, target), 0.0
    return invocation_answer(emulator, target, result), result.model_latency_s


def invocation_error(exc: BaseException, target: str) -> Answer:
    """The InvokeEndpoint answer for an exception from the platform."""
    kind = error_kind(exc)
    message = str(exc) or type(exc).__name__
    if kind is INTERNAL_FAILURE:
        logger.error("invocation of %r failed", target, exc_info=exc)
    extra: dict[str, object] = {}
    if kind.model_error:
        extra = {
            "OriginalStatusCode": getattr(exc, "status_code", None) or LOAD_ERROR_STATUS,
            "OriginalMessage": getattr(exc, "triton_message", "") or message,
            "LogStreamArn": log_stream_arn(getattr(exc, "log_path", None)),
        }
    return sagemaker_error(kind.status, kind.error_type, message, **extra)


def invocation_answer(emulator: Emulator, target: str, result: InvokeResult) -> Answer:
    """The InvokeEndpoint answer for Triton's reply: the body unchanged on success, a
    ``ModelError`` carrying Triton's status and message otherwise."""
    if result.status != 200:
        original = result.body.decode("utf-8", errors="replace")
        side = "client" if result.status < 500 else "server"
        message = (
            f"Received {side} error ({result.status}) from model {target!r} with message "
            f'"{original}".'
        )
        return sagemaker_error(
            424,
            "ModelError",
            message,
            OriginalStatusCode=result.status,
            OriginalMessage=original,
            LogStreamArn=log_stream_arn(
                emulator.instances[result.instance].launcher.log_path, result.instance
            ),
        )
    headers = [
        ("Content-Type", result.headers.get("content-type", JSON_TYPE)),
        (VARIANT_HEADER, emulator.config.variant_name),
        (REQUEST_ID_HEADER, request_id()),
        (CACHE_HEADER, "hit" if result.cache_hit else "miss"),
    ]
    custom = result.headers.get(CUSTOM_ATTRIBUTES.lower())
    if custom is not None:
        headers.append((CUSTOM_ATTRIBUTES, custom))
    return Answer(200, headers, result.body)


async def handle_v2_infer(
    emulator: Emulator, target: str, get: HeaderGetter, body: bytes
) -> Answer:
    """``POST /v2/models/{target}/infer``: on-demand load, binary extension translated."""
    t0 = time.perf_counter()
    header_length = get(V2_BINARY_HEADER)
    content_type = SAGEMAKER_BINARY + header_length if header_length else JSON_TYPE
    model_s = 0.0
    try:
        result = await emulator.invoke(target, body, forward_headers(get, content_type))
        model_s = result.model_latency_s
        answer = v2_answer(result)
    except Exception as exc:
        answer = v2_infer_error(exc, target)
    emulator.metrics.record_invocation(answer.status, time.perf_counter() - t0 - model_s)
    return answer


def v2_answer(result: InvokeResult) -> Answer:
    """The v2 infer answer for Triton's reply (SageMaker's binary content type translated
    back to the v2 binary extension's header)."""
    out: list[tuple[str, str]] = []
    kind = result.headers.get("content-type", JSON_TYPE)
    if kind.startswith(SAGEMAKER_BINARY):
        out.append((V2_BINARY_HEADER, kind[len(SAGEMAKER_BINARY) :]))
        kind = "application/octet-stream"
    out.append(("Content-Type", kind))
    return Answer(result.status, out, result.body)


def v2_infer_error(exc: BaseException, target: str) -> Answer:
    """The v2 infer answer (Triton's error shape) for an exception from the platform."""
    if error_kind(exc) is INTERNAL_FAILURE:
        logger.error("v2 infer for %r failed", target, exc_info=exc)
    return v2_exception(exc)


def v2_exception(exc: BaseException) -> Answer:
    """The v2 answer (Triton's error shape, :attr:`SageMakerError.v2` status) for ``exc``."""
    return v2_error(error_kind(exc).v2, str(exc) or type(exc).__name__)


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


__all__ = [
    "CACHE_HEADER",
    "FORWARDED_HEADERS",
    "INTERNAL_FAILURE",
    "MAX_BODY_BYTES",
    "SAGEMAKER_ERRORS",
    "Answer",
    "SageMakerError",
    "body_limit_bytes",
    "error_kind",
    "forward_headers",
    "handle_invocation",
    "handle_v2_infer",
    "invocation_answer",
    "invocation_error",
    "log_stream_arn",
    "parse_v2_path",
    "sagemaker_error",
    "v2_answer",
    "v2_error",
    "v2_exception",
    "v2_infer_error",
]
