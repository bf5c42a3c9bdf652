"""The emulator's HTTP/1.1 keep-alive client to Triton.

The invoke path forwards every request to Triton, so its client cost is paid on every
call: a request is written in one ``write`` on a pooled connection and the answer is
parsed by ``httptools``' response parser as it arrives (``Content-Length`` or chunked,
in any number of segments), the body joined once. Every call is answered as one
:data:`Reply`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import NamedTuple

import httptools

from mmelocal.emulator.own_thread import OwnThread
from mmelocal.errors import UpstreamError, UpstreamTimeoutError, UserInputError


class Reply(NamedTuple):
    """One answer from Triton: status, lower-cased headers and body."""

    status: int
    headers: dict[str, str]
    body: bytes


#: called once per request with the reply, or with None and the error
ReplyCallback = Callable[["Reply | None", "UpstreamError | None"], None]


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive connection to Triton; one request at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.callback: ReplyCallback | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self.closed = False
        self.keep_alive = True
        #: the answer being read (emptied when it is complete: no on_message_begin, one
        #: parser callback less per answer)
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._reply(None, UpstreamError(f"Triton closed the connection ({exc})"))

    def send(self, data: bytes, callback: ReplyCallback, *, timeout_s: float | None = None) -> None:
        """Write one request; ``callback`` gets the reply (or the error) exactly once.
        After ``timeout_s`` without a full answer, UpstreamTimeoutError (see :meth:`expire`);
        ``None``: no timer, the caller calls :meth:`expire` when its own deadline passes
        (the invocation path checks one deadline per client connection)."""
        assert self.transport is not None
        self.callback = callback
        if timeout_s is not None:
            self._deadline = asyncio.get_running_loop().call_later(
                timeout_s, self.expire, timeout_s
            )
        self.transport.write(data)

    def start(self, data: bytes, *, timeout_s: float | None = None) -> asyncio.Future[Reply]:
        """:meth:`send` with a future for the reply."""
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()

        def settle(reply: Reply | None, error: UpstreamError | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(reply)  # type: ignore[arg-type]

        self.send(data, settle, timeout_s=timeout_s)
        return future

    def expire(self, timeout_s: float) -> None:
        """The deadline passed: fail the request in progress and drop the connection."""
        self._drop()
        self._reply(None, UpstreamTimeoutError(f"no answer within {timeout_s:g}s"))

    def _drop(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _reply(self, reply: Reply | None, error: UpstreamError | None) -> None:
        callback, self.callback = self.callback, None
        deadline, self._deadline = self._deadline, None
        if deadline is not None:
            deadline.cancel()
        if callback is not None:
            callback(reply, error)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._drop()
            self._reply(None, UpstreamError(f"Triton's answer is not HTTP/1.1 ({exc})"))

    # -- parser callbacks -----------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("utf-8", "surrogateescape")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        parser = self.parser
        self.keep_alive = parser.should_keep_alive()
        parts = self._body
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        # Reply(...) without the named tuple's Python-level __new__
        reply = tuple.__new__(Reply, (parser.get_status_code(), self._headers, body))
        self._headers = {}
        self._body = []
        self._reply(reply, None)


class UpstreamPool:
    """Keep-alive connections to one ``host:port``; one request per connection at a time.

    ``bridge``: the Unix socket of a server in its own network namespace
    (:mod:`mmelocal.runtime.netns`); new connections are made inside it and handed over,
    so requests reach Triton directly, not through the bridge's TCP copy.
    """

    def __init__(self, url: str, *, max_idle: int = 256, bridge: str | None = None) -> None:
        if not url.startswith("http://"):
            raise UserInputError(f"upstream url must start with http://, got {url!r}")
        hostport = url[len("http://") :].rstrip("/")
        host, _, port = hostport.rpartition(":")
        self.host = host
        self.port = int(port)
        #: ``host:port`` as the ``Host`` header carries it
        self.hostport = hostport.encode()
        self.max_idle = max_idle
        self.bridge = bridge
        self._idle: list[UpstreamConnection] = []
        #: where connections through ``bridge`` are made (a blocking call): a thread of
        #: the pool's own, never behind the downloads on the default executor; its idle
        #: thread ends with the pool
        self._connects = OwnThread("mmelocal-bridge") if bridge is not None else None

    def take_idle(self) -> UpstreamConnection | None:
        """An open idle connection, or None (then use :meth:`request`)."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    def give_back(self, conn: UpstreamConnection) -> None:
        """Return a connection after its reply (closed unless it can be kept alive)."""
        if conn.keep_alive and not conn.closed and len(self._idle) < self.max_idle:
            self._idle.append(conn)
        elif conn.transport is not None:
            conn.closed = True
            conn.transport.close()

    async def connection(self, *, fresh: bool = False) -> UpstreamConnection:
        """An idle connection, else a new one (``fresh``: always a new one); UpstreamError
        when Triton cannot be reached."""
        conn = None if fresh else self.take_idle()
        if conn is not None:
            return conn
        loop = asyncio.get_running_loop()
        try:
            if self.bridge is not None and self._connects is not None:
                from mmelocal.runtime.netns import connect_through

                bridge, port = self.bridge, self.port
                sock = await self._connects.run(lambda: connect_through(bridge, port))
                _, conn = await loop.create_connection(UpstreamConnection, sock=sock)
            else:
                _, conn = await loop.create_connection(UpstreamConnection, self.host, self.port)
        except OSError as exc:
            raise UpstreamError(
                f"cannot connect to Triton at {self.host}:{self.port}: {exc}"
            ) from exc
        return conn

    async def request(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]],
        body: bytes = b"",
        *,
        timeout_s: float | None = None,
    ) -> Reply:
        """Send one request; its :class:`Reply`. After ``timeout_s`` without a full
        answer, UpstreamTimeoutError."""
        head = [f"{method} {path} HTTP/1.1\r\nHost: ".encode(), self.hostport]
        for name, value in headers:
            head.append(f"\r\n{name}: {value}".encode("utf-8", "surrogateescape"))
        head.append(f"\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        head.append(body)
        conn = await self.connection()
        try:
            result = await conn.start(b"".join(head), timeout_s=timeout_s)
        except BaseException:
            conn.closed = True
            if conn.transport is not None:
                conn.transport.close()
            raise
        self.give_back(conn)
        return result

    def close(self) -> None:
        """Close idle connections."""
        for conn in self._idle:
            if conn.transport is not None:
                with contextlib.suppress(Exception):
                    conn.transport.close()
        self._idle.clear()


__all__ = [
    "Reply",
    "ReplyCallback",
    "UpstreamConnection",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamTimeoutError",
]
