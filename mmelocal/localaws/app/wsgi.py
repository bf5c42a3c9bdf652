"""The WSGI plumbing every part of the app shares: what a request says (its SigV4 scope,
its body, its JSON parameters, a header's environ key) and forwarding it to moto."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
#: forward the (possibly changed) parameters to moto: its status and parsed JSON answer
Forward = Callable[[dict[str, Any]], tuple[int, Any]]

_SCOPE = re.compile(r"Credential=[^/]*/[^/]*/([^/]*)/([^/]*)/aws4_request")


def credential_scope(environ: dict[str, Any]) -> tuple[str, str]:
    """``(region, service)`` from the SigV4 ``Authorization`` header (``("", "")`` if none)."""
    match = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    return (match.group(1), match.group(2)) if match else ("", "")


def read_body(environ: dict[str, Any]) -> bytes:
    """The request's body, read once and put back as ``wsgi.input`` for whoever reads next."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    body = environ["wsgi.input"].read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def json_params(environ: dict[str, Any]) -> Any:
    """The request's JSON parameters (none where the body is not JSON: the operation's own
    checks then name what is missing)."""
    try:
        return json.loads(read_body(environ) or b"{}")
    except ValueError:
        return {}


def replace_body(environ: dict[str, Any], params: dict[str, Any]) -> None:
    """Make ``params``, as JSON, the request's body (what moto reads next)."""
    body = json.dumps(params).encode()
    environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))


def environ_key(header: str) -> str:
    """The WSGI environ key of a request header."""
    key = header.upper().replace("-", "_")
    return key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"


def moto_json(moto_app: WsgiApp, environ: dict[str, Any]) -> tuple[int, Any]:
    """Forward the request to moto; its status and parsed JSON (bytes if not JSON)."""
    from werkzeug.wrappers import Response

    response = Response.from_app(moto_app, environ, buffered=True)
    data = response.get_data()
    try:
        return response.status_code, json.loads(data) if data else {}
    except ValueError:
        return response.status_code, data


__all__ = [
    "Forward",
    "StartResponse",
    "WsgiApp",
    "credential_scope",
    "environ_key",
    "json_params",
    "moto_json",
    "read_body",
    "replace_body",
]
