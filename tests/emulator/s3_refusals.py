"""An HTTP server that answers as S3 does when it refuses: each key gets one status and
S3's error document (``<Error><Code>..</Code></Error>``; none for ``HEAD``, as S3 sends
none), so the emulator's S3 store meets 403, throttling and 5xx answers through real
botocore. moto's S3 grants everything and never throttles, so it cannot give these."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

#: S3's error code for each status the tests use (S3 API reference, "Error responses")
CODES = {403: "AccessDenied", 404: "NoSuchKey", 500: "InternalError", 503: "SlowDown"}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self, *, body: bool) -> None:
        key = urlsplit(self.path).path.split("/", 2)[-1]
        status = self.server.statuses.get(key, 403)  # a listing or any other key: refused
        status = self.server.statuses.get(f"{self.command} {key}", status)
        self.server.requests.append((self.command, key))
        if status == 200:  # a HEAD that finds the object (a GET of it is refused apart)
            self.send_response(200)
            self.send_header("Content-Length", "10")
            self.send_header("ETag", '"0123"')
            self.end_headers()
            return
        data = (
            f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{CODES[status]}</Code>"
            f"<Message>refused by the test server</Message></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(data) if body else 0))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    statuses: dict[str, int]
    requests: list[tuple[str, str]]


@contextmanager
def refusing_s3(statuses: dict[str, int]) -> Iterator[_Server]:
    """A server on loopback answering each key (``bucket/KEY``) with its status in
    ``statuses`` (403 for anything else; ``"HEAD KEY"`` or ``"GET KEY"`` for one method
    alone, 200 only for a HEAD); ``server.requests`` lists what was asked."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.statuses, server.requests = dict(statuses), []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def url_of(server: _Server) -> str:
    port = server.server_address[1]
    return f"http://127.0.0.1:{port}"
