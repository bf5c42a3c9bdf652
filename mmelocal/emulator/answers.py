"""The answers of the two invocation routes, and how any answer is written.

SageMaker ``InvokeEndpoint`` and KServe v2 ``infer`` (served by :mod:`.invocation`, the one
path of every invocation, warm or cold) and every other route (:mod:`.routes`) build their
answers here as :class:`Answer` (status, headers, body); :func:`encode_answer` writes one.
A success's head is encoded once per content type (:func:`encode_invocation_ok`,
:func:`encode_v2_ok`), from the same header lists, so it is the same bytes.

Errors are shaped as botocore's rest-json parser expects: JSON ``{"__type", "message"}``
plus the ``x-amzn-ErrorType`` header. Which exception becomes which status, error type and
extra fields is :data:`~mmelocal.facts.invoke_errors.SAGEMAKER_ERRORS`, one table (adding an
error code is one entry).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import uuid
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import NamedTuple

from mmelocal.emulator.emulator import Emulator, InvokeResult
from mmelocal.emulator.upstream import Reply
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
    INFERENCE_HEADER_CONTENT_LENGTH,
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
V2_BINARY_HEADER = INFERENCE_HEADER_CONTENT_LENGTH
#: the emulator's own answer header: was the model already loaded ("hit") or not ("miss");
#: on every InvokeEndpoint answer of a call that reached its model (a ``ModelCacheHit``
#: sample), a failed one too, and on no other
CACHE_HEADER = "X-Mmelocal-Model-Cache"
JSON_TYPE = "application/json"

HeaderGetter = Callable[[str], "str | None"]

#: the most the HTTP server reads of one request body (v2 infer has no service limit;
#: InvokeEndpoint bodies over ``--max-payload`` are answered 413 once read)
MAX_BODY_BYTES = 128 * 1024 * 1024


def body_limit_bytes(emulator: Emulator) -> int:
    """How much of one request body the HTTP server reads before answering 413."""
    return max(MAX_BODY_BYTES, emulator.config.max_payload_bytes + 1)


_REQUEST_IDS = itertools.count()
_HEX = uuid.uuid4().hex
_REQUEST_PREFIX = f"{_HEX[:8]}-{_HEX[8:12]}-{_HEX[12:16]}-{_HEX[16:20]}-"
_REQUEST_PREFIX_BYTES = _REQUEST_PREFIX.encode()


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
    """Triton's error shape (``{"error": ...}``, compact as Triton's JSON writer writes it),
    which tritonclient raises as its exception."""
    body = json.dumps({"error": message}, separators=(",", ":")).encode()
    return Answer(status, [("Content-Type", JSON_TYPE)], body)


#: request headers passed on to Triton as they came, besides the content type
FORWARDED_HEADERS = ("Accept", "Content-Encoding", CUSTOM_ATTRIBUTES)


def missing_target() -> Answer:
    """InvokeEndpoint without a TargetModel on this multi-model endpoint."""
    message = (
        f"This is a multi-model endpoint: the {TARGET_HEADER} header (boto3: "
        "TargetModel=...) must name the model, e.g. 'model-7.tar.gz'"
    )
    return sagemaker_error(400, "ValidationError", message)


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
        return with_cache_header(
            sagemaker_error(
                424,
                "ModelError",
                message,
                OriginalStatusCode=result.status,
                OriginalMessage=original,
                LogStreamArn=log_stream_arn(result.log_path, result.instance),
            ),
            result.cache_hit,
        )
    headers = _ok_headers(
        result.headers.get("content-type", JSON_TYPE),
        emulator.config.variant_name,
        request_id(),
        result.cache_hit,
    )
    custom = result.headers.get(CUSTOM_ATTRIBUTES.lower())
    if custom is not None:
        headers.append((CUSTOM_ATTRIBUTES, custom))
    return Answer(200, headers, result.body)


def with_cache_header(answer: Answer, cache_hit: bool) -> Answer:
    """``answer`` with :data:`CACHE_HEADER`: the answer of a call that reached its model
    (its ``ModelCacheHit`` sample, which a failed call is too)."""
    answer.headers.append((CACHE_HEADER, "hit" if cache_hit else "miss"))
    return answer


def _ok_headers(
    content_type: str, variant: str, request: str, cache_hit: bool
) -> list[tuple[str, str]]:
    """The headers of an InvokeEndpoint success (custom attributes come after them)."""
    return [
        ("Content-Type", content_type),
        (VARIANT_HEADER, variant),
        (REQUEST_ID_HEADER, request),
        (CACHE_HEADER, "hit" if cache_hit else "miss"),
    ]


_ID_MARK = "\x00request-id\x00"


@functools.lru_cache(maxsize=256)
def _ok_head(content_type: str, variant: str, cache_hit: bool) -> tuple[bytes, bytes]:
    """An InvokeEndpoint success's head, encoded once: the bytes before and after its
    request id."""
    head = answer_head(200, _ok_headers(content_type, variant, _ID_MARK, cache_hit))
    before, _, after = head.partition(_ID_MARK.encode())
    return before, after


def encode_invocation_ok(
    content_type: str, variant: str, cache_hit: bool, body: bytes, *, keep_alive: bool
) -> bytes:
    """``encode_answer(invocation_answer(...))`` of a success without custom attributes,
    byte for byte, from a head encoded once per content type and variant."""
    before, after = _ok_head(content_type, variant, cache_hit)
    return b"%s%s%012x%sContent-Length: %d\r\n%s\r\n%s" % (
        before,
        _REQUEST_PREFIX_BYTES,  # request_id()'s sequence, as bytes
        next(_REQUEST_IDS),
        after,
        len(body),
        b"" if keep_alive else _CLOSE,
        body,
    )


def v2_answer(result: InvokeResult) -> Answer:
    """The v2 infer answer for Triton's reply (SageMaker's binary content type translated
    back to the v2 binary extension's header)."""
    headers = _v2_headers(result.headers.get("content-type", JSON_TYPE))
    return Answer(result.status, headers, result.body)


def _v2_headers(kind: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if kind.startswith(SAGEMAKER_BINARY):
        out.append((V2_BINARY_HEADER, kind[len(SAGEMAKER_BINARY) :]))
        kind = "application/octet-stream"
    out.append(("Content-Type", kind))
    return out


@functools.lru_cache(maxsize=256)
def _v2_head(status: int, kind: str) -> bytes:
    return answer_head(status, _v2_headers(kind))


def encode_v2_ok(status: int, content_type: str, body: bytes, *, keep_alive: bool) -> bytes:
    """``encode_answer(v2_answer(...))`` byte for byte, from a head encoded once."""
    return b"%sContent-Length: %d\r\n%s\r\n%s" % (
        _v2_head(status, content_type),
        len(body),
        b"" if keep_alive else _CLOSE,
        body,
    )


_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_CLOSE = b"Connection: close\r\n"


def answer_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """The status line and header lines of an answer (Content-Length and the blank line
    come after)."""
    text = "".join([f"{name}: {value}\r\n" for name, value in headers])
    return b"HTTP/1.1 %d %s\r\n%s" % (
        status,
        _REASONS.get(status, b"Unknown"),
        text.encode("utf-8", "surrogateescape"),
    )


def encode_answer(answer: Answer, *, keep_alive: bool, head_only: bool = False) -> bytes:
    """Status line, headers and body as one buffer (``head_only``: no body, for ``HEAD``)."""
    status, headers, body = answer
    return b"%sContent-Length: %d\r\n%s\r\n%s" % (
        answer_head(status, headers),
        len(body),
        b"" if keep_alive else _CLOSE,
        b"" if head_only else body,
    )


def reply_answer(reply: Reply) -> Answer:
    """Triton's reply as it came: status, content type (a stream's own) and body."""
    kind = reply.headers.get("content-type", JSON_TYPE)
    return Answer(reply.status, [("Content-Type", kind)], reply.body)


def v2_infer_error(exc: BaseException, target: str) -> Answer:
    """The v2 infer answer (Triton's error shape) for an exception from the platform."""
    if error_kind(exc) is INTERNAL_FAILURE:
        logger.error("v2 infer for %r failed", target, exc_info=exc)
    return v2_exception(exc)


def v2_exception(exc: BaseException) -> Answer:
    """The v2 answer (Triton's error shape, :attr:`SageMakerError.v2` status) for ``exc``."""
    return v2_error(error_kind(exc).v2, str(exc) or type(exc).__name__)


#: the actions of Triton's v2 model route (``model_regex_``, ``src/http_server.cc`` 2.51:
#: ``infer|generate|generate_stream|ready|config|stats|trace/setting``)
V2_ACTIONS = (
    "infer",
    "generate",
    "generate_stream",
    "ready",
    "config",
    "stats",
    "trace/setting",
)


#: the part of a v2 model path after ``/v2/models/``, as Triton's ``model_regex_`` reads
#: it (``([^/]+)(?:/versions/([0-9]+))?(?:/(ACTIONS))?``, matched on the raw path), but for
#: the name: a TargetModel may hold ``/`` (an S3 key under the prefix) and tritonclient
#: does not encode it, so the name is any run that neither starts nor ends with ``/``
_V2_MODEL_TAIL = re.compile(
    r"([^/](?:.*?[^/])??)(?:/versions/([0-9]+))?(?:/("
    + "|".join(re.escape(a) for a in V2_ACTIONS)
    + r"))?"
)


def parse_v2_path(tail: str) -> tuple[str, str | None, str] | None:
    """``target[/versions/N][/action]`` -> (target, version, action; "" = metadata), or
    None when Triton's model route does not take it (an empty name: Triton's 404)."""
    match = _V2_MODEL_TAIL.fullmatch(tail)
    if match is None:
        return None
    target, version, action = match.groups()
    return target, version, action or ""


__all__ = [
    "CACHE_HEADER",
    "FORWARDED_HEADERS",
    "INTERNAL_FAILURE",
    "MAX_BODY_BYTES",
    "SAGEMAKER_ERRORS",
    "Answer",
    "SageMakerError",
    "answer_head",
    "body_limit_bytes",
    "encode_answer",
    "encode_invocation_ok",
    "encode_v2_ok",
    "error_kind",
    "invocation_answer",
    "invocation_error",
    "log_stream_arn",
    "missing_target",
    "parse_v2_path",
    "reply_answer",
    "sagemaker_error",
    "v2_answer",
    "v2_error",
    "v2_exception",
    "v2_infer_error",
    "with_cache_header",
]
