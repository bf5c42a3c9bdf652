"""A lean HTTP/1.1 keep-alive client for the hot path to Triton.

The invoke path forwards every request to Triton, so its client cost is paid on every
call. aiohttp's client builds several objects per request; this one writes the request
in one ``write`` on a pooled connection and parses the answer in ``data_received``
(status line, headers, ``Content-Length`` or chunked body) with no copies beyond one
join. Everything that is not the hot path (loads, unloads, v2 metadata) still uses the
shared aiohttp session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from mmelocal.errors import UpstreamError, UpstreamTimeoutError, UserInputError

#: (status, lower-cased headers, body)
Reply = tuple[int, dict[str, str], bytes]
#: called once per request with the reply, or with None and the error
ReplyCallback = Callable[["Reply | None", "UpstreamError | None"], None]


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive connection to Triton; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.callback: ReplyCallback | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self.closed = False
        self.keep_alive = True
        self._head: tuple[int, dict[str, str]] | None = None
        self._body_start = 0
        self._length: int | None = None
        self._chunked = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._reply(None, UpstreamError(f"Triton closed the connection ({exc})"))

    def send(self, data: bytes, callback: ReplyCallback, *, timeout_s: float | None = None) -> None:
        """Write one request; ``callback`` gets the reply (or the error) exactly once.
        After ``timeout_s`` without a full answer, UpstreamTimeoutError (see :meth:`expire`)."""
        assert self.transport is not None
        self.buffer.clear()
        self._head = None
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
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self._reply(None, UpstreamTimeoutError(f"no answer within {timeout_s:g}s"))

    def _reply(self, reply: Reply | None, error: UpstreamError | None) -> None:
        callback, self.callback = self.callback, None
        deadline, self._deadline = self._deadline, None
        if deadline is not None:
            deadline.cancel()
        if callback is not None:
            callback(reply, error)

    def data_received(self, data: bytes) -> None:
        if self._head is None and not self.buffer:
            # the common case: the whole answer in one segment, parsed without copies
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                self._parse_head(data[:end])
                start = end + 4
                length = self._length
                if length is not None and len(data) - start >= length:
                    self._finish(data[start : start + length])
                    return
                self.buffer += data
                self._body_start = start
                self._continue()
                return
        self.buffer += data
        if self._head is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self._parse_head(bytes(self.buffer[:end]))
            self._body_start = end + 4
        self._continue()

    def _continue(self) -> None:
        if self._chunked:
            self._try_chunked()
        elif self._length is not None and len(self.buffer) - self._body_start >= self._length:
            body = bytes(self.buffer[self._body_start : self._body_start + self._length])
            self._finish(body)

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self._head = (status, headers)
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._length = int(headers.get("content-length", "0")) if not self._chunked else None
        if headers.get("connection", "").lower() == "close":
            self.keep_alive = False

    def _try_chunked(self) -> None:
        pos = self._body_start
        body = bytearray()
        buf = self.buffer
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return
            size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            if size == 0:
                if buf.find(b"\r\n", eol + 2) < 0:
                    return
                self._finish(bytes(body))
                return
            start = eol + 2
            if len(buf) < start + size + 2:
                return
            body += buf[start : start + size]
            pos = start + size + 2

    def _finish(self, body: bytes) -> None:
        assert self._head is not None
        status, headers = self._head
        self._reply((status, headers, body), None)


class UpstreamPool:
    """Keep-alive connections to one ``host:port``; one request per connection at a time."""

    def __init__(self, url: str, *, max_idle: int = 256) -> None:
        if not url.startswith("http://"):
            raise UserInputError(f"upstream url must start with http://, got {url!r}")
        hostport = url[len("http://") :].rstrip("/")
        host, _, port = hostport.rpartition(":")
        self.host = host
        self.port = int(port)
        self._hostport = hostport.encode()
        self.max_idle = max_idle
        self._idle: list[UpstreamConnection] = []

    @property
    def hostport(self) -> bytes:
        """``host:port`` as the ``Host`` header carries it."""
        return self._hostport

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

    async def _connection(self) -> UpstreamConnection:
        conn = self.take_idle()
        if conn is not None:
            return conn
        loop = asyncio.get_running_loop()
        try:
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
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one request; (status, lower-cased headers, body). After ``timeout_s``
        without a full answer, UpstreamTimeoutError."""
        head = [f"{method} {path} HTTP/1.1\r\nHost: ".encode(), self._hostport]
        for name, value in headers:
            head.append(f"\r\n{name}: {value}".encode("latin-1"))
        head.append(f"\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        head.append(body)
        conn = await self._connection()
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
