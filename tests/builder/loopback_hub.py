"""A small Hugging Face hub on 127.0.0.1 for download tests, reached through HF_ENDPOINT.

It serves the routes ``huggingface_hub`` uses to download a model, with the headers it
checks: ``/api/models/{repo}[/revision/{rev}]`` (id, sha, siblings),
``/api/models/{repo}/tree/{rev}`` (the file list) and ``/{repo}/resolve/{rev}/{file}``
(HEAD and GET with ``ETag``, ``X-Repo-Commit``, ``Content-Length`` and ``Range``).
Errors carry the hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``,
``GatedRepo``, ``EntryNotFound``). Every request is logged in ``requests`` so a test
can tell what the client asked for. ``die_on`` makes the server send half of that file,
drop the connection and stop listening, as a server that dies mid-download.
Plain files (``/files/{name}``, no hub headers) serve torch hub checkpoints.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_INFO = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$")
_TREE = re.compile(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_FILE = re.compile(r"^/files/([^/]+)$")


@dataclass
class HubRepo:
    """One model repository: its files (path -> bytes), commit, and a token if gated."""

    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    token: str | None = None
    info_lists_files: bool = True  # False: /api/models/... has no "siblings", as some mirrors


@dataclass
class LoopbackHub:
    """The server's state: repositories, plain files, the request log and the die switch."""

    repos: dict[str, HubRepo] = field(default_factory=dict)
    plain: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    die_on: str | None = None
    url: str = ""
    _server: ThreadingHTTPServer | None = None
    _connections: set[socket.socket] = field(default_factory=set)

    def add_folder(
        self, repo_id: str, folder: Path, extra: dict[str, bytes] | None = None
    ) -> HubRepo:
        """Serve every file of ``folder`` (plus ``extra``: path -> bytes) as ``repo_id``."""
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")}
        files = {k: v for k, v in files.items() if (folder / k).is_file()}
        files.update(extra or {})
        self.repos[repo_id] = HubRepo(files=files)
        return self.repos[repo_id]

    def asked(self, method: str = "GET") -> list[str]:
        """Paths requested with ``method``, in order."""
        return [path for m, path in self.requests if m == method]

    def start(self) -> LoopbackHub:
        """Listen on a free port of 127.0.0.1 in a daemon thread."""
        handler = type("Handler", (_Handler,), {"hub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        """Stop serving, close the listening socket and drop open connections (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        for conn in list(self._connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    hub: LoopbackHub
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.hub._connections.add(self.connection)

    def finish(self) -> None:
        self.hub._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the hub's log is ``hub.requests``."""

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        self.hub.requests.append((self.command, path))
        if match := _FILE.match(path):
            data = self.hub.plain.get(match.group(1))
            if data is None:
                return self._error(404, "EntryNotFound")
            return self._send(200, data, {}, body)
        for pattern, route in ((_INFO, self._info), (_TREE, self._tree), (_RESOLVE, self._file)):
            if match := pattern.match(path):
                repo = self.hub.repos.get(match.group(1))
                if repo is None:
                    return self._error(404, "RepoNotFound")
                rev = match.group(2) or "main"
                if rev not in ("main", repo.commit):
                    return self._error(404, "RevisionNotFound", repo)
                return route(match, repo, body)
        return self._error(404, "RepoNotFound")

    def _info(self, match: re.Match[str], repo: HubRepo, body: bool) -> None:
        info = {
            "id": match.group(1),
            "sha": repo.commit,
            "private": False,
            "gated": "manual" if repo.token else False,
        }
        if repo.info_lists_files:
            info["siblings"] = [{"rfilename": name} for name in sorted(repo.files)]
        self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)

    def _tree(self, match: re.Match[str], repo: HubRepo, body: bool) -> None:
        tree = [
            {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
            for name, data in sorted(repo.files.items())
        ]
        self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, body)

    def _file(self, match: re.Match[str], repo: HubRepo, body: bool) -> None:
        if repo.token is not None:
            sent = self.headers.get("Authorization", "")
            if not sent:
                return self._error(401, "GatedRepo", repo)
            if sent != f"Bearer {repo.token}":
                return self._error(403, "GatedRepo", repo)
        data = repo.files.get(match.group(3))
        if data is None:
            return self._error(404, "EntryNotFound", repo)
        headers = {
            "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
            "X-Repo-Commit": repo.commit,
            "Accept-Ranges": "bytes",
        }
        if body and self.hub.die_on == match.group(3):
            return self._die(data, headers)
        status, part = 200, data
        if body and (rng := re.match(r"bytes=(\d+)-$", self.headers.get("Range", ""))):
            start = int(rng.group(1))
            status, part = 206, data[start:]
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        self._send(status, part, headers, body)

    def _die(self, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(200)
        for key, value in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)
        threading.Thread(target=self.hub.stop, daemon=True).start()

    def _error(self, status: int, code: str, repo: HubRepo | None = None) -> None:
        headers = {"X-Error-Code": code, "X-Error-Message": code}
        if repo is not None:
            headers["X-Repo-Commit"] = repo.commit
        self._send(status, json.dumps({"error": code}).encode(), headers, True)

    def _send(self, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(data)
