"""The emulator's one HTTP/1.1 server (``httptools``, the parser uvicorn uses).

Every invocation pays the HTTP server's cost, and a framework's request/response objects
cost more than Triton's own handling of a small model (``benchmarks/overhead.py``'s
aiohttp arm: 35-55 % more CPU per request). Invocations, warm or cold, take one path
(:mod:`.invocation`), started from the parser's callback; everything else is answered by
:func:`.routes.route`. Requests on one connection are answered in order (HTTP/1.1
keep-alive, no pipelining reordering).

What one connection may hold is bounded: a request line and headers over
:data:`MAX_HEAD_BYTES` are answered 431 and the connection closes; a body over the limit
is answered 413 and the connection is closed with nothing after it parsed or served (an
``Expect: 100-continue`` request whose ``Content-Length`` is over the limit gets its 413
before sending the body); any 413 closes the connection. Requests that arrived complete
before a malformed one are answered first, then the error, then the connection closes
(RFC 9112 section 9.3). Pipelined requests queue up to :data:`MAX_QUEUED` requests or
:data:`MAX_QUEUED_BYTES` of bodies, then the connection stops being read until the queue
is half drained (TCP pushes back on the client). :class:`HttpTimeouts` bounds how long a
connection may take to send its headers, to send its body, and to sit idle between
requests, with one deadline check per connection (no timer per request). ``HEAD``
answers carry the headers of the answer and no body. A request line without an HTTP
version is answered 400 and ``CONNECT`` 405, then the connection closes."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import httptools

from mmelocal.emulator.answers import (
    Answer,
    body_limit_bytes,
    encode_answer,
    payload_too_large,
    v2_error,
)
from mmelocal.emulator.emulator import Emulator
from mmelocal.emulator.invocation import Invocation, InvocationPath
from mmelocal.emulator.routes import invoke_route, route
from mmelocal.errors import UserInputError

logger = logging.getLogger(__name__)
#: pipelined requests one connection may have waiting before it is no longer read
MAX_QUEUED = 32
#: bytes of bodies one connection may have waiting before it is no longer read
MAX_QUEUED_BYTES = 16 * 1024 * 1024
#: bytes a request's line and headers may take (``httptools`` buffers a field for as long
#: as it lasts); past it (give or take the read it began in and the read that passed it)
#: the client gets ``431 Request Header Fields Too Large`` and the connection closes
MAX_HEAD_BYTES = 64 * 1024


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


class _Request:
    # what every request sets is set in __init__ or as it is parsed; the rest starts as
    # these class attributes (no __slots__: a slot cannot have a class default)
    url = b""
    method = b""
    #: bytes of the body (counted in the connection's queued bytes until answered)
    size = 0
    keep_alive = True
    #: not a request: the error answer that ends the connection, after those before it
    error: Answer | None = None
    #: the connection ends here: after ``error`` (when set), or silently
    last = False

    def __init__(self) -> None:
        self.headers: dict[bytes, bytes] = {}
        self.body: list[bytes] = []


@functools.lru_cache(maxsize=1024)  # the same few urls, call after call
def _post_route(url: bytes) -> tuple[str, str] | None:
    """:func:`.routes.invoke_route` of a POST to ``url`` (query and all)."""
    return invoke_route("POST", url.partition(b"?")[0].decode("latin-1"))


# what the connection's one deadline is for (see _Protocol._check)
_NONE, _HEADER, _BODY, _IDLE = 0, 1, 2, 3
#: a deadline this close is due (the loop's clock is coarser than perf_counter's)
_SLACK_S = 0.001


class _Protocol(asyncio.Protocol):
    """One client connection: parse, answer in order, bound what it may hold.

    One deadline check per connection replaces per-request timers: reading a request
    (headers, body), idling between requests and the invocation in flight each set a
    number, and one timer, re-armed at most every ``step_s`` seconds (the shortest
    timeout), compares them with the clock. Since every deadline is at least ``step_s``
    ahead when set, the timer never fires after one is due.
    """

    def __init__(self, server: FastFrontServer) -> None:
        self.server = server
        t = server.timeouts
        self.header_s, self.body_s, self.idle_s = t.header_s, t.body_s, t.idle_s
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.request = _Request()
        #: the headers of the request being read (``request.headers``)
        self.headers = self.request.headers
        #: perf_counter when the data being parsed arrived (one reading per read)
        self.now = 0.0
        #: what one request body may be (read per connection, not per request)
        self.body_limit = body_limit_bytes(server.emulator)
        self.queue: deque[_Request] = deque()
        self.queued_bytes = 0
        self.paused = False
        #: the request being answered, its invocation in flight, or its route's task
        self.current: _Request | None = None
        self.call: Invocation | None = None
        self.task: asyncio.Future[None] | None = None
        self.kicking = False
        self.size = 0
        #: bytes of the request head read after the read it began in (-1: none yet)
        self.head_bytes = -1
        #: the parser is inside a request (its headers or body are still arriving)
        self.reading = False
        #: an error was found and the connection will close: nothing more is parsed
        self.failed = False
        #: what ``deadline`` (perf_counter seconds) is for: _HEADER, _BODY, _IDLE or _NONE
        self.phase = _NONE
        self.deadline = math.inf
        self.timer: asyncio.TimerHandle | None = None

    # -- transport callbacks -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.phase, self.deadline = _HEADER, time.perf_counter() + self.header_s
        self.timer = asyncio.get_running_loop().call_later(self.server.step_s, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.phase = _NONE
        self.queue.clear()
        if self.task is not None:
            self.task.cancel()
            self.task = None
        call = self.call
        if call is not None:
            call.cancel()  # a load goes on without it; a request sent to Triton is awaited
            if call.conn is None:
                self.call = None
        if self.call is None and self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def data_received(self, data: bytes) -> None:
        if self.failed:
            return
        self.now = time.perf_counter()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # CONNECT was refused in on_headers_complete; an Upgrade request was
            # served as plain HTTP: what follows it is not HTTP, so the connection ends
            self._fail(None)
        except httptools.HttpParserError as exc:
            self._fail(v2_error(400, f"bad HTTP request: {exc}"))
        if self.reading and self.phase == _HEADER:  # a head still arriving
            self._count_head(len(data))
        if (
            not self.paused
            and (len(self.queue) >= MAX_QUEUED or self.queued_bytes >= MAX_QUEUED_BYTES)
            and self.transport is not None
        ):
            self.paused = True
            self.transport.pause_reading()

    def _count_head(self, size: int) -> None:
        """Bound a request head that spans reads (:data:`MAX_HEAD_BYTES`): the read it
        began in is not counted (where in it the request began is not known), every later
        one is."""
        if self.head_bytes < 0:
            self.head_bytes = 0
            return
        self.head_bytes += size
        if self.head_bytes > MAX_HEAD_BYTES:
            over = f"request line and headers over {MAX_HEAD_BYTES} bytes"
            self._fail(v2_error(431, over))

    def _fail(self, answer: Answer | None) -> None:
        """Stop reading; answer the complete requests before this point, then ``answer``
        (when given), then close (RFC 9112: a server answers the requests it received in
        order)."""
        if self.failed:
            return
        self.failed = True
        self.reading = False
        self.phase = _NONE
        end = _Request()
        end.error = answer
        end.last = True
        self.queue.append(end)
        self._kick()

    # -- the deadline ------------------------------------------------------------------
    def _check(self) -> None:
        """The connection's one timer: act on what is due, then re-arm."""
        self.timer = None
        now = time.perf_counter()
        call = self.call
        if call is not None and now >= call.deadline - _SLACK_S:
            call.expire()  # Triton is late: the caller gets the 504 ModelError
        phase = self.phase
        if phase and self.transport is not None and now >= self.deadline - _SLACK_S:
            if self.reading and phase == _HEADER:
                late = f"the request's headers did not arrive within {self.header_s:g}s"
                self._fail(v2_error(408, late))
            elif self.reading:
                self._fail(v2_error(408, f"the request body paused for over {self.body_s:g}s"))
            elif self.current is None and not self.queue:
                self.phase = _NONE
                self.transport.close()  # silent or idle: dropped with nothing said
        call = self.call
        if self.transport is None and call is None:
            return
        due = now + self.server.step_s
        if call is not None and call.deadline < due:
            due = call.deadline
        if self.phase and self.deadline < due:
            due = self.deadline
        self.timer = asyncio.get_running_loop().call_later(max(0.0, due - now), self._check)

    # -- parser callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.failed:
            return
        self.request = request = _Request()
        self.headers = request.headers
        self.size = 0
        self.head_bytes = -1  # see _count_head
        self.reading = True
        self.phase, self.deadline = _HEADER, self.now + self.header_s

    def on_url(self, url: bytes) -> None:
        self.request.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        if self.failed:
            return
        parser = self.parser
        if parser.get_http_version() not in ("1.1", "1.0"):
            self._fail(v2_error(400, "bad HTTP request: the request line has no HTTP version"))
            return
        self.request.method = method = parser.get_method()
        if method == b"CONNECT":
            self._fail(v2_error(405, "CONNECT is not supported: this server is not a proxy"))
            return
        self.phase, self.deadline = _BODY, self.now + self.body_s
        headers = self.headers
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
        hit = _post_route(self.request.url) if self.request.method == b"POST" else None
        if hit is not None and hit[0] == "invocations":
            limit = emulator.config.max_payload_bytes
            return payload_too_large(limit) if length > limit else None
        limit = self.body_limit
        return v2_error(413, f"request body over {limit} bytes") if length > limit else None

    def on_body(self, body: bytes) -> None:
        if self.failed:
            return
        self.size += len(body)
        if self.size > self.body_limit:
            self._fail(v2_error(413, f"request body over {self.body_limit} bytes"))
            return
        self.request.body.append(body)
        self.deadline = self.now + self.body_s

    def on_message_complete(self) -> None:
        if self.failed:
            return
        self.reading = False
        self.phase = _NONE
        request = self.request
        request.keep_alive = self.parser.should_keep_alive()
        request.size = size = self.size
        self.queued_bytes += size
        if self.current is None and not self.queue and not self.kicking:
            self._start(request)  # the usual case: nothing before it
            return
        self.queue.append(request)
        self._kick()

    # -- serving -----------------------------------------------------------------------
    def _kick(self) -> None:
        """Start the next request when none is being answered (in order, one at a time)."""
        if self.kicking:
            return  # the loop below goes on once the answer in progress returns
        self.kicking = True
        try:
            while self.current is None and self.queue and self.transport is not None:
                self._start(self._take())
        finally:
            self.kicking = False

    def _take(self) -> _Request:
        request = self.queue.popleft()
        self._resume()
        return request

    def _resume(self) -> None:
        """Read again once the queue drained to half its bound (requests and bytes)."""
        if (
            self.paused
            and self.transport is not None
            and len(self.queue) <= MAX_QUEUED // 2
            and self.queued_bytes < MAX_QUEUED_BYTES
        ):
            self.paused = False
            self.transport.resume_reading()

    def _start(self, request: _Request) -> None:
        self.current = request
        if request.last:
            self.current = None
            if request.error is not None:
                request.keep_alive = False
                self._write(request, request.error)
            elif self.transport is not None:
                self.transport.close()
            return
        call = self.server.start_invocation(request, self)
        if call is not None:
            if not call.done:
                self.call = call
            return
        self.task = asyncio.ensure_future(self._route(request))

    async def _route(self, request: _Request) -> None:
        try:
            answer = await self.server.answer(request)
        except Exception as exc:
            logger.exception("request %r failed", request.url)
            answer = v2_error(500, f"emulator error: {exc}")
        self.task = None
        self.answered(request, answer, answer.status)

    def answered(self, request: object, answer: Answer | bytes, status: int) -> None:
        """The answer to ``request`` (an Answer, or bytes encoded for its keep-alive)."""
        call = self.call
        if call is not None and call.request is request:
            self.call = None
        current = self.current
        if current is None or request is not current:
            return  # the connection was lost meanwhile
        self.current = None
        self.queued_bytes -= current.size
        if self.paused:
            self._resume()
        transport = self.transport
        if type(answer) is bytes and current.keep_alive and transport is not None:
            transport.write(answer)  # the usual case: _write's, in short
        elif not self._write(current, answer):
            return
        if self.queue:
            self._kick()
        # with nothing else under way, the connection is idle
        if not self.reading and not self.failed and not self.queue and self.current is None:
            self.phase, self.deadline = _IDLE, time.perf_counter() + self.idle_s

    def _write(self, request: _Request, answer: Answer | bytes) -> bool:
        """Write ``answer`` to ``request``; False when the connection is now closing."""
        transport = self.transport
        if transport is None:
            return False
        if isinstance(answer, bytes):
            keep_alive = request.keep_alive
            transport.write(answer)
        else:
            # after a 413 the rest of the stream cannot be trusted to be framed as the
            # client meant: close, as production front ends do
            keep_alive = request.keep_alive and answer.status != 413
            head_only = request.method == b"HEAD"
            transport.write(encode_answer(answer, keep_alive=keep_alive, head_only=head_only))
        if not keep_alive:
            self.failed = True
            self.phase = _NONE
            self.queue.clear()
            transport.close()
            return False
        return True


class FastFrontServer:
    """The emulator's HTTP server: invocations on :mod:`.invocation`'s path, routes for
    the rest."""

    def __init__(self, emulator: Emulator, *, timeouts: HttpTimeouts | None = None) -> None:
        self.emulator = emulator
        self.timeouts = timeouts or HttpTimeouts()
        self.path = InvocationPath(emulator)
        t = self.timeouts
        #: how often, at most, a connection's deadline check runs (the shortest timeout)
        self.step_s = min(t.header_s, t.body_s, t.idle_s, emulator.config.invoke_timeout_s)
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

    def start_invocation(self, request: _Request, requester: _Protocol) -> Invocation | None:
        """Start ``request`` on the invocation path when it is an invocation (None: it is
        another route's)."""
        if request.method != b"POST":
            return None
        hit = _post_route(request.url)
        if hit is None:
            return None
        parts = request.body
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        call = Invocation(self.path, request, requester, request.keep_alive)
        if hit[0] == "invocations":
            call.invoke_endpoint(hit[1], request.headers, body)
        else:
            call.v2_infer(hit[1], request.headers, body)
        return call

    async def answer(self, request: _Request) -> Answer:
        """Route one request that is not an invocation."""
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
    TargetModel as UTF-8); bytes that are not UTF-8 survive as surrogates."""

    def get(name: str) -> str | None:
        value = headers.get(name.lower().encode("latin-1"))
        return None if value is None else value.decode("utf-8", "surrogateescape")

    return get


__all__ = ["FastFrontServer", "HttpTimeouts", "encode_answer"]
