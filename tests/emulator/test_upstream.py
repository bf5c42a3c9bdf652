"""The lean HTTP pieces: the upstream keep-alive client and the fast server's encoder."""

from __future__ import annotations

import asyncio

import pytest

from mmelocal.emulator.answers import Answer, parse_v2_path
from mmelocal.emulator.http_server import encode_answer
from mmelocal.emulator.upstream import UpstreamError, UpstreamPool, UpstreamTimeoutError

RESPONSES = [
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}',
    b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
]


async def _serve(
    responses: list[bytes], piece: int = 5
) -> tuple[asyncio.AbstractServer, int, list[bytes]]:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while responses:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            seen.append(head + await reader.readexactly(length))
            reply = responses.pop(0)
            for i in range(0, len(reply), piece):  # dribble it out in pieces
                writer.write(reply[i : i + piece])
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


@pytest.mark.parametrize("piece", [5, 72, 1 << 16], ids=["dribbled", "head-then-body", "whole"])
def test_upstream_pool_parses_length_chunked_and_close(piece: int) -> None:
    async def run() -> None:
        server, port, seen = await _serve(list(RESPONSES), piece)
        pool = UpstreamPool(f"http://127.0.0.1:{port}")
        status, headers, body = await pool.request("POST", "/x", [("A", "b")], b"hello")
        assert (status, body, headers["content-type"]) == (200, b'{"a":1}', "application/json")
        status, _, body = await pool.request("GET", "/y", [])
        assert (status, body) == (400, b"abcde")
        status, _, body = await pool.request("GET", "/z", [])
        assert (status, body) == (200, b"")
        assert b"POST /x HTTP/1.1" in seen[0] and seen[0].endswith(b"hello")
        assert len(pool._idle) == 0  # the last answer said Connection: close
        server.close()
        pool.close()
        with pytest.raises(UpstreamError):
            await pool.request("GET", "/", [])

    asyncio.run(run())


def test_encode_answer_and_v2_paths() -> None:
    raw = encode_answer(Answer(424, [("X-A", "1")], b"body"), keep_alive=False)
    assert raw.startswith(b"HTTP/1.1 424 Failed Dependency\r\n")
    assert b"Content-Length: 4\r\n" in raw and b"Connection: close\r\n" in raw
    assert raw.endswith(b"\r\n\r\nbody")
    assert parse_v2_path("m.tar.gz/versions/2/infer") == ("m.tar.gz", "2", "infer")
    assert parse_v2_path("team/m.tar.gz") == ("team/m.tar.gz", None, "")
    assert parse_v2_path("m/ready") == ("m", None, "ready")


def test_a_request_past_its_deadline_fails_and_drops_the_connection() -> None:
    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # never answers

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = UpstreamPool(f"http://127.0.0.1:{port}")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(UpstreamTimeoutError, match=r"no answer within 0\.2s"):
            await pool.request("POST", "/x", [], b"{}", timeout_s=0.2)
        assert loop.time() - t0 < 10
        assert pool._idle == []  # the late connection is not reused
        server.close()
        pool.close()

    asyncio.run(main())
