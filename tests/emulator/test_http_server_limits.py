"""What one connection to the fast front server may hold, driven through its parser.

The protocol object is fed bytes as the event loop would feed them; the transport records
what the server wrote and whether it stopped reading. The routes themselves are covered on
real Triton in test_invocation_path.py (including raw-socket versions of these cases).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from shared_helpers import wait_for_async

from mmelocal.emulator import answers, http_server
from mmelocal.emulator.answers import Answer


class Transport:
    """Records writes, close and flow control."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.paused = False
        self.pauses = 0
        self.resumes = 0

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.data += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False
        self.resumes += 1


class Front:
    """The part of FastFrontServer the protocol calls: no invocation, answers held at a gate."""

    def __init__(self) -> None:
        self.emulator = SimpleNamespace(config=SimpleNamespace(max_payload_bytes=6_291_456))
        self.timeouts = http_server.HttpTimeouts()
        self.step_s = 30.0
        self.gate = asyncio.Event()
        self.started: list[bytes] = []
        self.largest_queue = 0
        self.protocol: Any = None

    def start_invocation(self, request: Any, requester: Any) -> None:
        return None  # every request takes the route below

    async def answer(self, request: Any) -> Answer:
        self.started.append(request.url)
        self.largest_queue = max(self.largest_queue, len(self.protocol.queue))
        await self.gate.wait()
        return Answer(200, [], request.url)


def post(path: str, body: bytes) -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        path.encode(),
        len(body),
        body,
    )


def connect(max_payload_bytes: int | None = None) -> tuple[Front, Transport, Any]:
    """A connection to a Front (``max_payload_bytes``: its configuration's, which a
    connection reads when it opens, as the real one is frozen)."""
    front = Front()
    if max_payload_bytes is not None:
        front.emulator.config.max_payload_bytes = max_payload_bytes
    protocol = http_server._Protocol(front)  # type: ignore[arg-type]
    front.protocol = protocol
    transport = Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return front, transport, protocol


async def until(condition: Any) -> None:
    """Let the loop run until ``condition()`` holds (bounded: the fake transport needs a few
    loop turns, not seconds)."""
    await wait_for_async(condition, timeout_s=10.0, interval_s=0.0, what="the server's writes")


def test_a_body_over_the_limit_is_answered_413_and_nothing_after_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answers, "MAX_BODY_BYTES", 1000)
    emulator: Any = SimpleNamespace(config=SimpleNamespace(max_payload_bytes=10))
    limit = answers.body_limit_bytes(emulator)
    assert limit == 1000

    async def run() -> None:
        front, transport, protocol = connect(max_payload_bytes=10)
        front.gate.set()
        # the oversized request, complete, then a valid one in the same segment
        protocol.data_received(post("/big", b"x" * 5000) + post("/after", b"{}"))
        protocol.data_received(post("/later", b"{}"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert front.started == []
        assert transport.closed
        assert transport.data.startswith(b"HTTP/1.1 413 ")
        assert transport.data.count(b"HTTP/1.1") == 1
        assert b"request body over 1000 bytes" in transport.data

    asyncio.run(run())


def test_pipelined_requests_are_bounded_then_read_again_as_they_drain() -> None:
    async def run() -> None:
        front, transport, protocol = connect()
        count = 3 * http_server.MAX_QUEUED
        data = b"".join(post(f"/r{i}", b"{}") for i in range(count))
        protocol.data_received(data[: len(data) // 2])
        assert transport.paused and transport.pauses == 1
        assert protocol.queued_bytes > 0
        # a paused transport delivers nothing more until resumed
        front.gate.set()
        await until(lambda: not transport.paused)
        assert len(protocol.queue) <= http_server.MAX_QUEUED // 2
        protocol.data_received(data[len(data) // 2 :])
        await until(lambda: transport.data.count(b"HTTP/1.1 200") == count)
        answers = [line for line in bytes(transport.data).split(b"\r\n\r\n")[1:] if line]
        assert [a.split(b"HTTP/1.1")[0] for a in answers] == [
            f"/r{i}".encode() for i in range(count)
        ]
        assert protocol.queued_bytes == 0
        assert transport.resumes >= 1
        assert not transport.closed

    asyncio.run(run())


def test_bytes_of_queued_bodies_are_bounded_too() -> None:
    async def run() -> None:
        front, transport, protocol = connect()
        big = b"x" * (http_server.MAX_QUEUED_BYTES // 2 + 1)
        protocol.data_received(post("/a", big) + post("/b", big))
        assert transport.paused
        front.gate.set()
        await until(lambda: transport.data.count(b"HTTP/1.1 200") == 2)
        assert not transport.paused

    asyncio.run(run())


def test_the_server_port_is_bound_when_chosen_and_freed_if_never_served(tmp_path: Any) -> None:
    """port=0: the system's choice, read from the bound socket, which is held from then on
    (no other process can take it before the server serves it)."""
    import errno
    import socket

    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer

    server = EmulatorServer(EmulatorConfig(store=str(tmp_path), cache_dir=tmp_path / "cache"))
    port = server.port
    assert port > 0 and server.url.endswith(f":{port}")
    other = socket.socket()
    with pytest.raises(OSError) as taken:
        other.bind(("127.0.0.1", port))
    assert taken.value.errno == errno.EADDRINUSE
    other.close()
    server.stop()  # never started: the socket is closed
    again = socket.socket()
    again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    again.bind(("127.0.0.1", port))
    again.close()


def test_a_request_head_over_the_limit_is_answered_431_and_closed() -> None:
    """A request line and headers that keep coming are bounded (httptools buffers a field
    for as long as it lasts: 300 MiB of one header value held 611 MiB): the requests before
    it are answered, then 431, then the connection closes and nothing more is read."""

    async def run() -> None:
        front, transport, protocol = connect()
        front.gate.set()
        protocol.data_received(post("/before", b"{}") + b"GET /big HTTP/1.1\r\nX-Big: ")
        chunk = b"a" * 4096
        fed = 0
        while not protocol.failed and fed < 4 * http_server.MAX_HEAD_BYTES:
            protocol.data_received(chunk)
            fed += len(chunk)
        await until(lambda: transport.closed)
        # read no further than the limit and the two reads around it
        assert fed <= http_server.MAX_HEAD_BYTES + 2 * len(chunk)
        assert front.started == [b"/before"]
        assert transport.data.count(b"HTTP/1.1 ") == 2
        assert b"HTTP/1.1 431 " in transport.data
        assert b"request line and headers over" in transport.data

    asyncio.run(run())


def test_a_long_url_counts_in_the_head_and_a_head_under_the_limit_is_served() -> None:
    async def run() -> None:
        front, transport, protocol = connect()
        front.gate.set()
        under = b"h" * (http_server.MAX_HEAD_BYTES // 2)
        head = b"GET /ok HTTP/1.1\r\nX-Fine: %s\r\n\r\n" % under
        for start in range(0, len(head), 1000):
            protocol.data_received(head[start : start + 1000])
        await until(lambda: b"HTTP/1.1 200" in transport.data)
        assert not transport.closed
        protocol.data_received(b"GET /" + b"u" * 1000)
        fed = 0
        while not protocol.failed and fed < 4 * http_server.MAX_HEAD_BYTES:
            protocol.data_received(b"u" * 1000)
            fed += 1000
        await until(lambda: transport.closed)
        assert b"HTTP/1.1 431 " in transport.data

    asyncio.run(run())
