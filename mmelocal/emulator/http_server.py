"""The emulator's one HTTP/1.1 server (``httptools``, the parser uvicorn uses).

Every invocation pays the HTTP server's cost, and a framework's request/response objects
cost more than Triton's own handling of a small model (``benchmarks/overhead.py``'s
aiohttp arm: 35-55 % more CPU per request). Warm invocations take the hot lane
(:mod:`.hotlane`); everything else is answered by :func:`.routes.route`. Requests on one
connection are answered in order (HTTP/1.1 keep-alive, no pipelining reordering).

What one connection may hold is bounded: a body over the limit is answered 413 and the
connection is closed with nothing after it parsed or served (an ``Expect: 100-continue``
request whose ``Content-Length`` is over the limit gets its 413 before sending the body);
any 413 closes the connection. Requests that arrived complete before a malformed one are
answered first, then the error, then the connection closes (RFC 9112 section 9.3).
Pipelined requests queue up to :data:`MAX_QUEUED` requests or :data:`MAX_QUEUED_BYTES` of
bodies, then the connection stops being read until the queue is half drained (TCP pushes
back on the client). :class:`HttpTimeouts` bounds how long a connection may take to send
its headers, to send its body, and to sit idle between requests. ``HEAD`` answers carry
the headers of the answer and no body.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from mmelocal.emulator.answers import Answer, body_limit_bytes, payload_too_large, v2_error
from mmelocal.emulator.emulator import Emulator
from mmelocal.emulator.hotlane import HotLane
from mmelocal.emulator.routes import endpoint_name_error, invoke_route, route
from mmelocal.errors import UserInputError

logger = logging.getLogger(__name__)

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
#: pipelined requests one connection may have waiting before it is no longer read
MAX_QUEUED = 32
#: bytes of bodies one connection may have waiting before it is no longer read
MAX_QUEUED_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class HttpTimeouts:
    """How long the HTTP server waits for a client, in seconds.

    ``header_s``: from a connection's first byte of a request (or its opening) until the
    request's headers are complete; ``body_s``: the longest pause between two reads of a
    body; ``idle_s``: a keep-alive connection with no request in progress. Past the first
    two the client gets ``408 Request Timeout`` and the connection is closed; past the
    third it is closed. A request being answered (a cold load may take minutes) is never
    cut short by these.
    """

    header_s: float = 30.0
    body_s: float = 30.0
    idle_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("header_s", "body_s", "idle_s"):
            value = getattr(self, name)
            if not value > 0:
                raise UserInputError(f"HttpTimeouts.{name} must be > 0 seconds, got {value}")


def encode_answer(answer: Answer, *, keep_alive: bool, head_only: bool = False) -> bytes:
    """Status line, headers and body as one buffer (``head_only``: no body, for ``HEAD``)."""
    status, headers, body = answer
    text = "".join([f"{name}: {value}\r\n" for name, value in headers])
    head = text.encode("utf-8", "surrogateescape")
    close = b"" if keep_alive else b"Connection: close\r\n"
    return b"HTTP/1.1 %d %s\r\n%sContent-Length: %d\r\n%s\r\n%s" % (
        status,
        _REASONS.get(status, b"Unknown"),
        head,
        len(body),
        close,
        b"" if head_only else body,
    )


class _Request:
    __slots__ = ("body", "error", "headers", "keep_alive", "method", "url")

    def __init__(self) -> None:
        self.url = b""
        self.method = b""
        self.headers: dict[bytes, bytes] = {}
        self.body: list[bytes] = []
        self.keep_alive = True
        #: not a request: the error answer that ends the connection, after those before it
        self.error: Answer | None = None


class _Protocol(asyncio.Protocol):
    def __init__(self, server: FastFrontServer) -> None:
        import httptools

        self.server = server
        self.timeouts = server.timeouts
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.request = _Request()
        self.queue: deque[_Request] = deque()
        self.queued_bytes = 0
        self.paused = False
        self.worker: asyncio.Task[None] | None = None
        #: a request is on the hot lane: later ones wait in the queue (answers in order)
        self.busy = False
        self.size = 0
        #: the parser is inside a request (its headers or body are still arriving)
        self.reading = False
        #: an error was found and the connection will close: nothing more is parsed
        self.failed = False
        self.timer: asyncio.TimerHandle | None = None

    # -- transport callbacks -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._arm(self.timeouts.header_s, self._header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._disarm()
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()

    def data_received(self, data: bytes) -> None:
        import httptools

        if self.failed:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(v2_error(400, f"bad HTTP request: {exc}"))
        if not self.paused and self.transport is not None and self._queue_full():
            self.paused = True
            self.transport.pause_reading()

    def _queue_full(self) -> bool:
        return len(self.queue) >= MAX_QUEUED or self.queued_bytes >= MAX_QUEUED_BYTES

    def _fail(self, answer: Answer) -> None:
        """Stop reading; answer the complete requests before this point, then ``answer``,
        then close (RFC 9112: a server answers the requests it received in order)."""
        if self.failed:
            return
        self.failed = True
        self.reading = False
        self._disarm()
        error = _Request()
        error.error = answer
        self.queue.append(error)
        self._kick()

    # -- timeouts ----------------------------------------------------------------------
    def _arm(self, delay_s: float, callback: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(delay_s, callback)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _header_timeout(self) -> None:
        self.timer = None
        self._timed_out(f"the request's headers did not arrive within {self.timeouts.header_s:g}s")

    def _body_timeout(self) -> None:
        self.timer = None
        self._timed_out(f"the request body paused for over {self.timeouts.body_s:g}s")

    def _timed_out(self, message: str) -> None:
        if self.reading:
            self._fail(v2_error(408, message))
        elif self._settled() and self.transport is not None:
            self.transport.close()  # nothing was asked yet: a silent connection is dropped

    def _idle_timeout(self) -> None:
        self.timer = None
        if self._settled() and not self.reading and self.transport is not None:
            self.transport.close()

    def _settled(self) -> bool:
        """Nothing is being answered or waits to be."""
        return not self.busy and not self.queue and (self.worker is None or self.worker.done())

    def _idle(self) -> None:
        """An answer went out: with nothing else under way, the connection is idle."""
        if not self.reading and not self.failed and not self.queue and not self.busy:
            self._arm(self.timeouts.idle_s, self._idle_timeout)

    # -- parser callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.failed:
            return
        self.request = _Request()
        self.size = 0
        self.reading = True
        self._arm(self.timeouts.header_s, self._header_timeout)

    def on_url(self, url: bytes) -> None:
        self.request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.request.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        if self.failed:
            return
        self._arm(self.timeouts.body_s, self._body_timeout)
        headers = self.request.headers
        expect = headers.get(b"expect")
        if expect is None or expect.lower() != b"100-continue" or self.transport is None:
            return
        too_large = self._declared_too_large(headers.get(b"content-length"))
        if too_large is not None:
            self._fail(too_large)
            return
        self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _declared_too_large(self, declared: bytes | None) -> Answer | None:
        """The 413 for a ``Content-Length`` over what this route reads, else None."""
        try:
            length = int(declared or b"0")
        except ValueError:
            return None
        emulator = self.server.emulator
        hit = invoke_route(self.parser.get_method().decode("latin-1"), self._path())
        if hit is not None and hit[0] == "invocations":
            limit = emulator.config.max_payload_bytes
            return payload_too_large(limit) if length > limit else None
        limit = body_limit_bytes(emulator)
        return v2_error(413, f"request body over {limit} bytes") if length > limit else None

    def _path(self) -> str:
        return self.request.url.partition(b"?")[0].decode("latin-1")

    def on_body(self, body: bytes) -> None:
        if self.failed:
            return
        self.size += len(body)
        limit = body_limit_bytes(self.server.emulator)
        if self.size > limit:
            self._fail(v2_error(413, f"request body over {limit} bytes"))
            return
        self.request.body.append(body)
        self._arm(self.timeouts.body_s, self._body_timeout)

    def on_message_complete(self) -> None:
        if self.failed:
            return
        self.reading = False
        self._disarm()
        request = self.request
        request.method = self.parser.get_method()
        request.keep_alive = self.parser.should_keep_alive()
        if self._settled() and self.server.serve_hot(request, self):
            self.busy = True
            return
        self.queue.append(request)
        self.queued_bytes += self.size
        self._kick()

    # -- serving -----------------------------------------------------------------------
    def _kick(self) -> None:
        """Serve the queue on the coroutine path unless that is already under way."""
        if self.queue and not self.busy and (self.worker is None or self.worker.done()):
            self.worker = asyncio.ensure_future(self._serve())

    def _write(self, request: _Request, answer: Answer) -> bool:
        """Write ``answer`` to ``request``; False when the connection is now closing."""
        if self.transport is None:
            return False
        # after a 413 the rest of the stream cannot be trusted to be framed as the client
        # meant: close, as production front ends do
        keep_alive = request.keep_alive and answer.status != 413
        head_only = request.method == b"HEAD"
        self.transport.write(encode_answer(answer, keep_alive=keep_alive, head_only=head_only))
        if not keep_alive:
            self.failed = True
            self.queue.clear()
            self._disarm()
            self.transport.close()
            return False
        return True

    def hot_done(self, request: object, answer: Answer) -> None:
        """The hot lane's answer to ``request``."""
        self.busy = False
        assert isinstance(request, _Request)
        if self._write(request, answer):
            self._kick()
            self._idle()

    def hot_fallback(self, request: object) -> None:
        """The hot lane gave ``request`` back: serve it first, on the coroutine path."""
        self.busy = False
        if self.transport is None:
            return
        assert isinstance(request, _Request)
        self.queue.appendleft(request)
        self.queued_bytes += sum(len(part) for part in request.body)
        self._kick()

    def _take(self) -> _Request:
        request = self.queue.popleft()
        self.queued_bytes -= sum(len(part) for part in request.body)
        if self.paused and self.transport is not None and len(self.queue) <= MAX_QUEUED // 2:
            self.paused = False
            self.transport.resume_reading()
        return request

    async def _serve(self) -> None:
        while self.queue:
            request = self._take()
            if request.error is not None:
                request.keep_alive = False
                self._write(request, request.error)
                return
            try:
                answer = await self.server.answer(request)
            except Exception as exc:
                logger.exception("request %r failed", request.url)
                answer = v2_error(500, f"emulator error: {exc}")
            if not self._write(request, answer):
                return
        self._idle()


class FastFrontServer:
    """The emulator's HTTP server: the hot lane for warm invocations, routes for the rest."""

    def __init__(
        self, emulator: Emulator, *, hot_lane: bool = True, timeouts: HttpTimeouts | None = None
    ) -> None:
        self.emulator = emulator
        self.timeouts = timeouts or HttpTimeouts()
        #: cache hits served with callbacks (:mod:`.hotlane`); None: every request takes
        #: the coroutine path
        self.lane = HotLane(emulator) if hot_lane else None
        self._server: asyncio.AbstractServer | None = None

    async def start(self, sock: socket.socket) -> None:
        """Serve on ``sock`` (bound and listening; see :func:`.server.bind_socket`)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Protocol(self), sock=sock, backlog=1024)

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def serve_hot(self, request: _Request, requester: _Protocol) -> bool:
        """Start ``request`` on the hot lane when it is a warm hot-route call."""
        url = request.url
        lane = self.lane
        if lane is None or request.method != b"POST" or b"?" in url or b"%" in url:
            return False
        parts = request.body
        if len(parts) != 1:  # joined once, kept for the coroutine path if the lane declines
            parts[:] = [b"".join(parts)]
        body = parts[0]
        hit = invoke_route("POST", url.decode("latin-1"))
        if hit is None:
            return False
        kind, name = hit
        if kind == "invocations":
            if endpoint_name_error(name) is not None:
                return False  # the coroutine path answers the service's 400
            return lane.invocation(name, request.headers, body, request, requester)
        return lane.v2_infer(name, request.headers, body, request, requester)

    async def answer(self, request: _Request) -> Answer:
        """Route one request."""
        path, _, _query = request.url.partition(b"?")
        return await route(
            self.emulator,
            request.method.decode("latin-1"),
            path.decode("latin-1"),
            _getter(request.headers),
            b"".join(request.body),
        )


def _getter(headers: dict[bytes, bytes]) -> Any:
    """Header values as text: UTF-8, as the service reads them (boto3 sends a non-ASCII
    TargetModel as UTF-8); bytes that are not UTF-8 survive as surrogates (refused by
    validation, or written back unchanged by :mod:`.upstream`)."""

    def get(name: str) -> str | None:
        value = headers.get(name.lower().encode("latin-1"))
        return None if value is None else value.decode("utf-8", "surrogateescape")

    return get


__all__ = ["FastFrontServer", "HttpTimeouts", "encode_answer"]
