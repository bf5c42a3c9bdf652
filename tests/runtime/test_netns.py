"""The namespace bridge on its own, around a plain HTTP server that binds 0.0.0.0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from shared_helpers import wait_for

from mmelocal.runtime.netns import bridge_argv, connect_through, isolation_refused, listen_socket

pytestmark = pytest.mark.skipif(
    isolation_refused() is not None,
    reason=f"this kernel refuses unprivileged network namespaces: {isolation_refused()}",
)


class Bridged:
    def __init__(self, process: subprocess.Popen[bytes], port: int, control: Path) -> None:
        self.process, self.port, self.control = process, port, control


def get(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
            return int(answer.status)
    except OSError:
        return None


@pytest.fixture
def bridged(tmp_path: Path) -> Iterator[Bridged]:
    (tmp_path / "hello.txt").write_text("hello")
    control = tmp_path / "bridge.sock"
    # bound here (port 0) and inherited by the bridge, as the launcher does it
    with listen_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        server = [sys.executable, "-m", "http.server", str(port), "--bind", "0.0.0.0"]
        argv = bridge_argv(
            host="127.0.0.1", ports=[port], control=control, command=server, fds=[sock.fileno()]
        )
        process = subprocess.Popen(
            argv,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=[sock.fileno()],
        )

    def answered() -> bool:  # the server inside starts after the bridge listens
        assert process.poll() is None, "the bridge exited"
        return get(port) == 200

    wait_for(answered, timeout_s=60, what="the server behind the bridge")
    yield Bridged(process, port, control)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def test_the_server_is_reached_only_through_the_bridge(bridged: Bridged) -> None:
    bridge = psutil.Process(bridged.process.pid)
    [server] = bridge.children()
    ours = os.readlink("/proc/self/ns/net")
    assert os.readlink(f"/proc/{server.pid}/ns/net") != ours
    listening = [c.laddr for c in bridge.net_connections() if c.status == psutil.CONN_LISTEN]
    assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", bridged.port)]
    # the server's own 0.0.0.0 socket is not in this network at all
    assert not [c for c in server.net_connections() if c.status == psutil.CONN_LISTEN]
    # a socket connected inside, handed over the Unix socket, talks to it directly
    sock = connect_through(bridged.control, bridged.port)
    sock.setblocking(True)
    with sock:
        sock.sendall(b"GET /hello.txt HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"hello")
    with pytest.raises(ConnectionRefusedError, match="not bridged"):
        connect_through(bridged.control, bridged.port + 1)


def test_sigterm_reaches_the_server_and_its_status_comes_back(bridged: Bridged) -> None:
    [server] = psutil.Process(bridged.process.pid).children()
    bridged.process.send_signal(signal.SIGTERM)
    assert bridged.process.wait(30) == -signal.SIGTERM  # as if the server were our child
    assert not psutil.pid_exists(server.pid) or server.status() == psutil.STATUS_ZOMBIE
    assert not bridged.control.exists()
