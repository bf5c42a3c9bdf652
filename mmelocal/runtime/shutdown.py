"""Unload what a Triton server has loaded before it is told to stop.

On SIGTERM tritonserver unloads its models itself (``InferenceServer::Stop`` in
triton-inference-server/core ``src/server.cc``) but then checks for live models once a
second: a model whose unload takes a moment (a Python-backend stub needs about 1 s to
finish) costs whole seconds more on every stop. Unloading the ready models first through the
repository API (``POST /v2/repository/models/NAME/unload``, which returns at once) and
waiting for them here on a short poll leaves Triton's stop nothing to wait for: its first
check finds no live model and it exits.

Anything that does not go to plan (no explicit model control, a name that model
namespacing makes ambiguous, an unload that outlasts the bound) is left to Triton's own
stop: :func:`unload_before_stop` never raises and never waits past its bound.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
from urllib.parse import quote, urlsplit

logger = logging.getLogger(__name__)

#: model states Triton counts as live at stop (``ModelLifeCycle::LiveModelStates``)
LIVE_STATES = frozenset({"READY", "LOADING", "UNLOADING"})
#: seconds between two reads of the repository index while the unloads finish
POLL_INTERVAL_S = 0.02


class _Connection:
    """One keep-alive HTTP connection to the server, every call bounded by a deadline."""

    def __init__(self, http_url: str, deadline: float) -> None:
        parts = urlsplit(http_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self._deadline = deadline
        self._conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: dict[str, object]) -> tuple[int, bytes]:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the unload bound has passed")
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=remaining)
        self._conn.timeout = remaining
        if self._conn.sock is not None:
            self._conn.sock.settimeout(remaining)
        try:
            self._conn.request(
                "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            response = self._conn.getresponse()
            return response.status, response.read()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _live(conn: _Connection) -> dict[str, str]:
    """Model name -> state, for every live model in the repository index."""
    status, body = conn.post("/v2/repository/index", {})
    if status != 200:
        raise ValueError(f"repository index answered {status}: {body[:200]!r}")
    return {
        str(entry["name"]): str(entry.get("state"))
        for entry in json.loads(body)
        if entry.get("state") in LIVE_STATES
    }


def unload_before_stop(http_url: str, *, timeout_s: float) -> list[str]:
    """Unload every ready model of the server at ``http_url`` (with its dependents) and
    wait, at most ``timeout_s`` in all, until none of them is live any more.

    Returns the models that were unloaded in time; what is still live then (a load in
    progress, a refused or slow unload) is left to the server's own stop. Never raises.
    """
    deadline = time.monotonic() + timeout_s
    conn = _Connection(http_url, deadline)
    asked: set[str] = set()
    try:
        ready = [name for name, state in _live(conn).items() if state == "READY"]
        for name in ready:
            status, body = conn.post(
                f"/v2/repository/models/{quote(name, safe='')}/unload",
                {"parameters": {"unload_dependents": True}},
            )
            if status == 200:
                asked.add(name)
            else:  # e.g. not explicit model control, or a name namespacing makes ambiguous
                logger.debug("unload %s before stop answered %s: %r", name, status, body[:200])
        while asked:
            still = asked & _live(conn).keys()
            if not still:
                return sorted(asked)
            time.sleep(max(0.0, min(POLL_INTERVAL_S, deadline - time.monotonic())))
    except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException) as exc:
        logger.debug("unloading before stop at %s gave up: %s", http_url, exc)
        return []
    finally:
        conn.close()
    return []


__all__ = ["LIVE_STATES", "unload_before_stop"]
