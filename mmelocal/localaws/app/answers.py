"""What the app answers: a body as it is, a JSON payload, an :class:`AwsServiceError` as
moto renders its own errors, and the refusal of an operation no part implements (the
service's error, never moto's HTML 500)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from mmelocal.errors import AwsServiceError
from mmelocal.localaws.app.wsgi import StartResponse

logger = logging.getLogger(__name__)

#: the content type of the JSON protocols' answers
JSON_11 = "application/x-amz-json-1.1"


def answer(
    start_response: StartResponse, status: int, headers: Iterable[tuple[str, str]], body: bytes
) -> Iterable[bytes]:
    """``body`` as it is, under ``headers`` and its length."""
    headers = [*headers, ("Content-Length", str(len(body)))]
    start_response(f"{status} {'OK' if status == 200 else 'Error'}", headers)
    return [body]


def json_answer(
    start_response: StartResponse, status: int, payload: Any, content_type: str
) -> Iterable[bytes]:
    """``payload`` (JSON, or bytes as they are) as the answer."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return answer(start_response, status, [("Content-Type", content_type)], body)


def moto_error(
    exc: AwsServiceError, environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """``exc`` rendered by moto, as its own errors of the JSON protocols."""
    from moto.core.exceptions import JsonRESTError

    error = JsonRESTError(exc.code, str(exc))
    error.code = exc.status
    return error(environ, start_response)  # type: ignore[no-any-return]


def not_built(
    environ: dict[str, Any], start_response: StartResponse, target: str, exc: Exception
) -> Iterable[bytes]:
    """The refusal of an operation moto raised ``NotImplementedError`` for: the JSON
    protocols' ``UnknownOperationException`` where the call has an ``X-Amz-Target``, the
    query protocols' ``InvalidAction`` otherwise."""
    operation = target.partition(".")[2] or environ.get("PATH_INFO", "")
    message = f"mmelocal's local AWS does not implement {operation or 'this operation'}"
    logger.warning("%s (%s)", message, exc)
    if target:  # a JSON protocol
        body = json.dumps({"__type": "UnknownOperationException", "message": message}).encode()
        headers = [
            ("Content-Type", JSON_11),
            ("x-amzn-ErrorType", "UnknownOperationException"),
        ]
    else:
        body = (
            "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidAction</Code>"
            f"<Message>{message}</Message></Error></ErrorResponse>"
        ).encode()
        headers = [("Content-Type", "text/xml")]
    start_response("400 Bad Request", [*headers, ("Content-Length", str(len(body)))])
    return [body]


__all__ = ["JSON_11", "answer", "json_answer", "moto_error", "not_built"]
