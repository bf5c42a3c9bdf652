"""Start tritonserver in its own network namespace, reachable only where the user chose.

tritonserver's SageMaker front end listens on ``0.0.0.0`` whatever ``--http-address``
says (``sagemaker_address_`` is fixed in its command-line parser): on a laptop or a shared
box anyone on the network could load, unload and invoke models. Where the kernel lets an
unprivileged user create user and network namespaces, the server runs in a namespace of
its own (``unshare(CLONE_NEWUSER | CLONE_NEWNET)``, uid mapped to root inside, loopback
up), so its ``0.0.0.0`` is that namespace's alone.

A small bridge process, started by :class:`~mmelocal.runtime.local.LocalLauncher` as the
server's parent, makes the ports reachable again, and only there:

1. before leaving the host's network namespace it binds one listening TCP socket per
   Triton port on the address the user chose (``127.0.0.1`` by default): every client
   (readiness checks, tritonclient, ``perf_analyzer``) keeps using ``http://host:port``,
   and each connection is copied byte for byte to the same port inside;
2. a Unix socket (a file, which a network namespace does not separate) hands out TCP
   sockets *connected inside the namespace* (``SCM_RIGHTS``): the emulator's keep-alive
   pools take their connections there (:func:`connect_through`) and then talk to Triton
   directly, with nothing copied on the way;
3. it spawns tritonserver, forwards SIGTERM/SIGINT to it and exits with its status.

The Python-backend stubs talk to the server through shared memory in ``/dev/shm``, which a
network namespace does not touch. Process ids are the host's (no pid namespace), so
memory readings (PSS of the server's tree) and the stop sequence (SIGTERM, then SIGKILL of
the process group) work as before. Where namespaces are refused,
:func:`isolation_refused` says why and the launcher starts tritonserver as before, with a
warning naming the exposed port and how to firewall it.

Run as ``python -m mmelocal.runtime.netns --probe`` to check the kernel allows it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import fcntl
import functools
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_PR_SET_PDEATHSIG = 1
#: exit status of the bridge when the kernel refuses the namespaces
REFUSED_EXIT = 97
#: environment variable: "0" starts tritonserver without a namespace of its own
NETNS_ENV = "MMELOCAL_NETNS"


# -- used by the launcher (host side) ----------------------------------------------------
@functools.cache
def isolation_refused() -> str | None:
    """None when this machine lets an unprivileged user start the server in a network
    namespace of its own; else why not (checked once per process, in a child)."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux-only (this is {sys.platform})"
    try:
        probe = subprocess.run(
            [sys.executable, "-m", "mmelocal.runtime.netns", "--probe"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the namespace probe could not run ({exc})"
    if probe.returncode == 0:
        return None
    lines = probe.stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"the namespace probe exited {probe.returncode}"


def bridge_argv(
    *,
    host: str,
    ports: Sequence[int],
    control: Path,
    command: Sequence[str],
    fds: Sequence[int] = (),
) -> list[str]:
    """The argv that runs ``command`` in a new namespace behind the bridge. ``fds``: the
    listening sockets of ``ports``, bound by the launcher (see :func:`listen_socket`) and
    inherited by the bridge (``pass_fds``), so no other process can take a port between
    its choice and its use; without them the bridge binds ``ports`` itself."""
    argv = [
        sys.executable,
        "-m",
        "mmelocal.runtime.netns",
        "--host",
        host,
        "--ports",
        ",".join(str(p) for p in ports),
        "--control",
        str(control),
    ]
    if fds:
        argv += ["--fds", ",".join(str(fd) for fd in fds)]
    return [*argv, "--", *command]


def connect_through(control: str | Path, port: int, *, timeout_s: float = 10.0) -> socket.socket:
    """A TCP socket connected to ``127.0.0.1:port`` inside the namespace, handed out by the
    bridge listening on the Unix socket ``control`` (blocking; the socket is non-blocking)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        unix.settimeout(timeout_s)
        try:
            unix.connect(str(control))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise ConnectionRefusedError(
                exc.errno, f"Triton's network-namespace bridge {control} is gone"
            ) from None
        unix.sendall(b"%d\n" % port)
        message, fds, _flags, _addr = socket.recv_fds(unix, 1024, 1)
    if not fds:
        raise ConnectionRefusedError(
            f"the namespace bridge could not connect to port {port}: "
            f"{message.decode(errors='replace').strip() or 'no answer'}"
        )
    sock = socket.socket(fileno=fds[0])
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


# -- the bridge (runs as the server's parent) --------------------------------------------
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _enter_namespace() -> None:
    """Leave the host's user and network namespaces (root inside, mapped to our ids)."""
    uid, gid = os.geteuid(), os.getegid()
    if _libc().unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_NEWUSER|CLONE_NEWNET) refused: {os.strerror(errno)}")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux
    ``PR_SET_PDEATHSIG``); meant as ``preexec_fn``, between fork and exec."""
    _libc().prctl(_PR_SET_PDEATHSIG, sig)


class _Pipe(asyncio.Protocol):
    """One side of a bridged connection: what arrives is written to ``peer``'s transport."""

    def __init__(self, *, start_paused: bool = False) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.start_paused = start_paused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.start_paused:  # nothing is read until the other side is connected
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)

    def pause_writing(self) -> None:
        """Our transport's buffer is full: stop reading the side that fills it."""
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        """Drained: read the other side again."""
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def eof_received(self) -> bool:
        if self.peer is not None and self.peer.transport is not None:
            with contextlib.suppress(OSError, RuntimeError):
                self.peer.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def _bridge_tcp(listener: socket.socket, port: int) -> None:
    loop = asyncio.get_running_loop()

    async def accepted(client: socket.socket) -> None:
        outside = _Pipe(start_paused=True)
        await loop.connect_accepted_socket(lambda: outside, client)
        inside = _Pipe()
        inside.peer = outside
        try:
            await loop.create_connection(lambda: inside, "127.0.0.1", port)
        except OSError:
            if outside.transport is not None:  # Triton not listening (yet): refused
                outside.transport.abort()
            return
        outside.peer = inside
        if outside.transport is not None:
            outside.transport.resume_reading()
        else:
            inside.transport.close()  # type: ignore[union-attr]

    pending: set[asyncio.Task[None]] = set()
    while True:
        client, _ = await loop.sock_accept(listener)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = loop.create_task(accepted(client))
        pending.add(task)
        task.add_done_callback(pending.discard)


async def _hand_out(control: socket.socket, ports: set[int]) -> None:
    loop = asyncio.get_running_loop()

    async def serve(unix: socket.socket) -> None:
        with unix:
            try:
                line = await asyncio.wait_for(loop.sock_recv(unix, 64), 10)
                port = int(line.strip())
                if port not in ports:
                    raise ValueError(f"port {port} is not bridged")
                inside = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                inside.setblocking(False)
                try:
                    await loop.sock_connect(inside, ("127.0.0.1", port))
                    unix.setblocking(True)
                    socket.send_fds(unix, [b"ok\n"], [inside.fileno()])
                finally:
                    inside.close()
            except (TimeoutError, OSError, ValueError) as exc:
                with contextlib.suppress(OSError):
                    unix.setblocking(True)
                    unix.sendall(f"{exc}\n".encode())

    pending: set[asyncio.Task[None]] = set()
    while True:
        unix, _ = await loop.sock_accept(control)
        task = loop.create_task(serve(unix))
        pending.add(task)
        task.add_done_callback(pending.discard)


async def _run(
    listeners: dict[int, socket.socket], control: socket.socket, server: subprocess.Popen[bytes]
) -> int:
    loop = asyncio.get_running_loop()
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        sig = getattr(signal, name)
        loop.add_signal_handler(sig, functools.partial(_forward, server, sig))
    tasks = [loop.create_task(_bridge_tcp(sock, port)) for port, sock in listeners.items()]
    tasks.append(loop.create_task(_hand_out(control, set(listeners))))
    code = await loop.run_in_executor(None, server.wait)
    for task in tasks:
        task.cancel()
    return code


def _forward(server: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        server.send_signal(sig)


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: the system's choice, read it with
    ``getsockname``), non-blocking."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _inherited(fd: int) -> socket.socket:
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    """The bridge's entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m mmelocal.runtime.netns")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ports", default="")
    parser.add_argument("--control")
    parser.add_argument("--fds", default="")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args(argv)
    if args.probe:
        try:
            _enter_namespace()
        except OSError as exc:
            print(exc, file=sys.stderr)
            return REFUSED_EXIT
        return 0
    ports = [int(p) for p in args.ports.split(",") if p]
    fds = [int(fd) for fd in args.fds.split(",") if fd]
    try:  # host side first: these sockets stay in the host's namespace
        if fds:  # bound by the launcher, inherited
            listeners = {port: _inherited(fd) for port, fd in zip(ports, fds, strict=True)}
        else:
            listeners = {port: listen_socket(args.host, port) for port in ports}
    except OSError as exc:
        print(f"mmelocal bridge: cannot listen on {args.host}: {exc}", file=sys.stderr)
        return 1
    try:
        _enter_namespace()
    except OSError as exc:
        print(f"mmelocal bridge: {exc}", file=sys.stderr)
        return REFUSED_EXIT
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.bind(args.control)
    control.listen(128)
    control.setblocking(False)
    server = subprocess.Popen(args.command, preexec_fn=die_with_parent)
    try:
        code = asyncio.run(_run(listeners, control, server))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(args.control)
            os.rmdir(os.path.dirname(args.control))  # the launcher made it for this socket
    if code < 0:  # died of a signal: so does the bridge, for the launcher to see the same
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the server's core, not ours
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main())
