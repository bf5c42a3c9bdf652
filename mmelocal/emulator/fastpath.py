"""The emulator's one HTTP/1.1 server (``httptools``, the parser uvicorn uses).

Every invocation pays the HTTP server's cost, and a framework's request/response objects
cost more than Triton's own handling of a small model (``benchmarks/overhead.py``'s
aiohttp arm: 35-55 % more CPU per request). Warm invocations take the hot lane
(:mod:`.hotlane`); everything else is answered by :func:`.routes.route`. Requests on one
connection are answered in order (HTTP/1.1 keep-alive, no pipelining reordering).

What one connection may hold is bounded: a body over the limit is answered 413 and the
connection is closed with nothing after it parsed or served; pipelined requests queue up
to :data:`MAX_QUEUED` requests or :data:`MAX_QUEUED_BYTES` of bodies, then the connection
stops being read until the queue is half drained (TCP pushes back on the client).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from http import HTTPStatus
from typing import Any

from mmelocal.emulator.handlers import Answer, body_limit_bytes, v2_error
from mmelocal.emulator.hotlane import HotLane
from mmelocal.emulator.platform import Emulator
from mmelocal.emulator.routes import invoke_route, route

logger = logging.getLogger(__name__)

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
#: pipelined requests one connection may have waiting before it is no longer read
MAX_QUEUED = 32
#: bytes of bodies one connection may have waiting before it is no longer read
MAX_QUEUED_BYTES = 16 * 1024 * 1024


def encode_answer(answer: Answer, *, keep_alive: bool) -> bytes:
    """Status line, headers and body as one buffer."""
    status, headers, body = answer
    head = "".join([f"{name}: {value}\r\n" for name, value in headers]).encode("latin-1")
    close = b"" if keep_alive else b"Connection: close\r\n"
    return b"HTTP/1.1 %d %s\r\n%sContent-Length: %d\r\n%s\r\n%s" % (
        status,
        _REASONS.get(status, b"Unknown"),
        head,
        len(body),
        close,
        body,
    )


class _Request:
    __slots__ = ("body", "headers", "keep_alive", "method", "url")

    def __init__(self) -> None:
        self.url = b""
        self.method = b""
        self.headers: dict[bytes, bytes] = {}
        self.body: list[bytes] = []
        self.keep_alive = True


class _Protocol(asyncio.Protocol):
    def __init__(self, server: FastFrontServer) -> None:
        import httptools

        self.server = server
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
        #: an error was answered and the connection is closing: nothing more is parsed
        self.failed = False

    # -- transport callbacks -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()

    def data_received(self, data: bytes) -> None:
        import httptools

        if self.failed:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(400, f"bad HTTP request: {exc}")
        if not self.paused and self.transport is not None and self._queue_full():
            self.paused = True
            self.transport.pause_reading()

    def _queue_full(self) -> bool:
        return len(self.queue) >= MAX_QUEUED or self.queued_bytes >= MAX_QUEUED_BYTES

    def _fail(self, status: int, message: str) -> None:
        """Answer an error and close: requests queued before it are dropped unanswered."""
        if self.failed:
            return
        self.failed = True
        self.queue.clear()
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()
        if self.transport is not None:
            self.transport.write(encode_answer(v2_error(status, message), keep_alive=False))
            self.transport.close()

    # -- parser callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.request = _Request()
        self.size = 0

    def on_url(self, url: bytes) -> None:
        self.request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.request.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        expect = self.request.headers.get(b"expect")
        if expect is not None and expect.lower() == b"100-continue" and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self.failed:
            return
        self.size += len(body)
        limit = body_limit_bytes(self.server.emulator)
        if self.size > limit:
            self._fail(413, f"request body over {limit} bytes")
            return
        self.request.body.append(body)

    def on_message_complete(self) -> None:
        if self.failed:
            return
        request = self.request
        request.method = self.parser.get_method()
        request.keep_alive = self.parser.should_keep_alive()
        idle = not self.busy and not self.queue and (self.worker is None or self.worker.done())
        if idle and self.server.serve_hot(request, self):
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

    def hot_done(self, request: object, answer: Answer) -> None:
        """The hot lane's answer to ``request``."""
        self.busy = False
        if self.transport is None or self.failed:
            return
        keep_alive = getattr(request, "keep_alive", False)
        self.transport.write(encode_answer(answer, keep_alive=keep_alive))
        if not keep_alive:
            self.transport.close()
            return
        self._kick()

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
            try:
                answer = await self.server.answer(request)
            except Exception as exc:
                logger.exception("request %r failed", request.url)
                answer = v2_error(500, f"emulator error: {exc}")
            if self.transport is None:
                return
            self.transport.write(encode_answer(answer, keep_alive=request.keep_alive))
            if not request.keep_alive:
                self.transport.close()
                return


class FastFrontServer:
    """The emulator's HTTP server: the hot lane for warm invocations, routes for the rest."""

    def __init__(self, emulator: Emulator, *, hot_lane: bool = True) -> None:
        self.emulator = emulator
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
    def get(name: str) -> str | None:
        value = headers.get(name.lower().encode("latin-1"))
        return None if value is None else value.decode("latin-1")

    return get


__all__ = ["FastFrontServer", "encode_answer"]
