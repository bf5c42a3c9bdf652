"""Run the ``tritonserver`` binary as a child process: the embedded default launcher.

The binary comes from the ``nvidia-pytriton`` wheel (``site-packages/pytriton/tritonserver``)
or from a path the user gives (an ``/opt/tritonserver`` install); see
:mod:`mmelocal.runtime.install` for how it is found, the backend folder assembled for the
running Python, and the child's environment (``LD_LIBRARY_PATH`` with the wheel's
libraries, without which the stub cannot start and a load hangs silently; ``PATH`` with
this environment's ``python3`` first, so Python models can import torch or onnxruntime).

With the SageMaker front end on (it listens on ``0.0.0.0`` whatever the config says), the
server runs in a network namespace of its own behind a bridge that listens only on the
config's host (:mod:`mmelocal.runtime.netns`); where the kernel refuses that, it runs as
before and a warning names the exposed port and how to firewall it.

The server lives in its own process group (stub children included), receives SIGTERM
when the thread that started it dies (``PR_SET_PDEATHSIG``: start it from a thread that
lives as long as the server, e.g. the main thread), and :meth:`LocalLauncher.stop`
escalates SIGTERM -> SIGKILL of the whole group after a bounded wait.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import CLI_FLAGS, LauncherFlags
from mmelocal.errors import ServerStartError, UserInputError
from mmelocal.runtime import netns
from mmelocal.runtime.install import (
    CACHE_ENV,
    TRITONSERVER_ENV,
    TritonInstall,
    cache_dir,
    find_tritonserver,
    prepare_backend_directory,
    server_environment,
)
from mmelocal.runtime.launcher import Endpoints, OwnedServerLauncher
from mmelocal.runtime.readiness import LogWatch, triton_ready
from mmelocal.runtime.server_config import ServerConfig

logger = logging.getLogger(__name__)


def _endpoints_of(config: ServerConfig, bridge_dir: Path | None) -> Endpoints:
    """The URLs of a started server (a port tritonserver does not open, as in MME mode
    with SageMaker's defaults, has no URL)."""
    host = "127.0.0.1" if config.host in ("0.0.0.0", "") else config.host
    return Endpoints(
        http_url=f"http://{host}:{config.http_port}",
        grpc_url=f"{host}:{config.grpc_port}" if config.serves_grpc else None,
        metrics_url=f"http://{host}:{config.metrics_port}" if config.serves_metrics else None,
        sagemaker_url=f"http://{host}:{config.sagemaker_port}" if config.sagemaker else None,
        bridge=str(bridge_dir / BRIDGE_SOCKET) if bridge_dir else None,
    )


def _opened_port_names(config: ServerConfig) -> list[str]:
    """The config's fields naming the ports tritonserver opens (the bridge's ports)."""
    names = ["http_port", "sagemaker_port"] if config.sagemaker else ["http_port"]
    if config.serves_grpc:
        names.append("grpc_port")
    if config.serves_metrics:
        names.append("metrics_port")
    return names


def _opened_ports(config: ServerConfig) -> dict[str, int]:
    """The ports tritonserver opens, by config field."""
    return {name: getattr(config, name) for name in _opened_port_names(config)}


#: how many times :meth:`LocalLauncher.start` starts tritonserver when another process
#: takes one of its free ports between their choice and tritonserver's bind
PORT_TRIES = 4

#: tritonserver's line for a port it cannot bind (src/main.cc, Triton 2.x): HTTP, GRPC and
#: Sagemaker make it exit; Metrics only logs it, and the server runs on without metrics
_PORT_IN_USE = re.compile(
    r"failed to start (?P<service>\w+) service: .*?Socket '(?P<address>[^']*?):(?P<port>\d+)' "
    r"already in use"
)


class _PortWatch:
    """Reads the part of the log one tritonserver start writes (from ``offset``) for
    :data:`_PORT_IN_USE`: :meth:`taken` is ``(config field or None, "host:port")`` once
    tritonserver has said that a port of ``config`` is held by another process."""

    def __init__(self, log_path: Path, offset: int, config: ServerConfig) -> None:
        #: where this start's output begins in the log
        self.offset = offset
        self._watch = LogWatch(log_path, _PORT_IN_USE, offset=offset)
        #: the ports this start opens: config field -> port
        self.ports = _opened_ports(config)
        self._ports = {port: name for name, port in self.ports.items()}
        self._found: tuple[str | None, str] | None = None

    def none_taken(self) -> bool:
        """No port taken so far (the start goes on)."""
        return self.taken() is None

    def taken(self) -> tuple[str | None, str] | None:
        if self._found is None:
            match = self._watch.next_match()
            if match is not None:
                port = int(match["port"])
                self._found = (self._ports.get(port), f"{match['address']}:{port}")
        return self._found


def _listens_on(pid: int, ports: Mapping[str, int]) -> bool:
    """Whether process ``pid`` listens on every port of ``ports`` (True when the system
    does not say). tritonserver answers ready before it opens its metrics port, and goes
    on without it when another process holds that port: only the listening sockets tell."""
    import psutil

    try:
        proc = psutil.Process(pid)
        connections = proc.net_connections("tcp")
    except psutil.Error:
        return True
    listening = {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
    return set(ports.values()) <= listening


def _port_taken_message(address: str, port_name: str | None, *, fixed: bool, tries: int) -> str:
    what = f"its {port_name.removesuffix('_port')} port" if port_name else "a port of its"
    if fixed:
        return (
            f"tritonserver cannot listen on {address} ({what}, as the config asks): another "
            f"process uses it. Stop that process, or choose another {port_name} "
            "(0: a free one)"
        )
    return (
        f"tritonserver cannot listen on {address} ({what}): another process took a free "
        f"port tritonserver was given before it could bind it ({tries} tries, each on new "
        "ports). Something on this machine takes new ports as fast as they free up: start "
        "again, or give tritonserver ports you know are free (ServerConfig's http_port, "
        "grpc_port, metrics_port, sagemaker_port)"
    )


#: the file name of the network-namespace bridge's Unix socket, in its own folder
BRIDGE_SOCKET = "bridge.sock"
#: the most bytes a Unix socket's path may hold on Linux (``sockaddr_un.sun_path`` is 108
#: bytes with the terminating NUL: unix(7))
UNIX_PATH_MAX = 107


def _socket_folder(*, prefix: str, name: str) -> Path:
    """A new folder for the Unix socket ``name``: in the temporary folder (``TMPDIR``), or
    in ``/tmp`` when the socket's path there would be too long for its address (a deep
    ``TMPDIR``, as CI runners and pytest's temporary folders have)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if len(os.fsencode(folder / name)) <= UNIX_PATH_MAX:
        return folder
    folder.rmdir()
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


class LocalLauncher(OwnedServerLauncher):
    """Start the tritonserver binary as a child process (see the module docstring).

    ``tritonserver`` is a binary path or an install folder (default: the wheel). The log
    goes to ``log_path`` (default ``<temp>/tritonserver.log``, kept after stop);
    ``model_repository`` is the repository passed to tritonserver; ``ready_after_s`` is
    tritonserver's own start. ``isolate_network`` (default: on unless
    ``MMELOCAL_NETNS=0``) runs a SageMaker-enabled server in its own network namespace
    where the kernel allows it; :attr:`isolated` says whether it did.
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        tritonserver: Path | str | None = None,
        start_timeout_s: float = 120.0,
        stop_timeout_s: float = 15.0,
        log_path: Path | str | None = None,
        die_with_parent: bool = True,
        isolate_network: bool | None = None,
        flags: LauncherFlags = CLI_FLAGS,
    ) -> None:
        if start_timeout_s <= 0 or stop_timeout_s <= 0:
            raise UserInputError("start_timeout_s and stop_timeout_s must be > 0")
        self._requested = config
        self._tritonserver = tritonserver
        #: how the user reaches the Docker launcher where they are (named in refusals)
        self._flags = flags
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._init_server_state(log_path)
        self._die_with_parent = die_with_parent
        self._config: ServerConfig | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._shm_prefix = f"mmelocal_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        if isolate_network is None:
            isolate_network = os.environ.get(netns.NETNS_ENV, "1") != "0"
        self._isolate_network = isolate_network
        #: the server runs in its own network namespace behind the bridge (after start)
        self.isolated = False
        self._bridge_dir: Path | None = None
        self._server_pid: int | None = None
        #: listening sockets bound for the bridge, until it is started (see _argv)
        self._bridge_sockets: dict[str, socket.socket] = {}

    @property
    def config(self) -> ServerConfig:
        """The config in use (ports resolved once started)."""
        return self._config or self._requested

    def pid(self) -> int | None:
        """tritonserver's pid (None before start; behind the bridge, the bridge's child)."""
        if self._process is None:
            return None
        if not self.isolated:
            return self._process.pid
        if self._server_pid is None:
            self._server_pid = _only_child(self._process.pid)
        return self._server_pid

    def start(self) -> None:
        """Assemble the backend folder, spawn tritonserver and wait until it is ready.

        Without the namespace bridge tritonserver binds its ports itself, from numbers
        chosen free just before: another process can take one in between. Then
        tritonserver says so in its log and (except for metrics) exits; the start is tried
        again on other free ports, up to :data:`PORT_TRIES` times. A port the config
        fixed is not changed: its error says to choose another.

        A :meth:`stop` from another thread ends the start at once, wherever it is: during
        the wait the process it stops fails the wait; before a spawn has returned (when
        there is no process to stop yet) the start stops what it spawned as soon as the
        spawn returns. The start raises ServerStartError saying it was stopped."""
        if self._process is not None and self._process.poll() is None:
            return
        with self._start_under_way():
            self._start()

    def _start(self) -> None:
        t0 = time.monotonic()
        install = find_tritonserver(self._tritonserver, flags=self._flags)
        _warn_if_small_shm(self._requested.python_shm_default_bytes)
        backends = self._requested.backend_directory or prepare_backend_directory(install)
        for attempt in range(1, PORT_TRIES + 1):
            self._raise_if_stop_asked()
            watch = self._spawn(install, backends)
            self._raise_if_stop_asked()
            try:
                self._await_ready(
                    t0,
                    check=functools.partial(self._ready, watch.ports),
                    process=self._process,
                    is_alive=watch.none_taken,
                    log_offset=watch.offset,
                )
                return
            except ServerStartError as exc:
                taken = watch.taken()
                if taken is None:
                    raise
                port_name, address = taken
                fixed = port_name is not None and getattr(self._requested, port_name) != 0
                if fixed or attempt == PORT_TRIES:
                    raise ServerStartError(
                        _port_taken_message(address, port_name, fixed=fixed, tries=attempt),
                        url=exc.url,
                        log_path=self._log_path,
                    ) from None
                logger.info(
                    "another process took %s (tritonserver's %s) between its choice and "
                    "tritonserver's start; starting again on other free ports (try %d of %d)",
                    address,
                    port_name or "port",
                    attempt + 1,
                    PORT_TRIES,
                )

    def _server_name(self) -> str:
        pid = self.pid()
        return f"tritonserver pid {pid}" if pid is not None else "tritonserver"

    def _ready(self, ports: Mapping[str, int]) -> bool:
        """Triton answers ready, and (without the bridge, which holds the ports itself)
        listens on every port it was given."""
        if not triton_ready(self.endpoints):
            return False
        if self.isolated or self._process is None:
            return True
        return _listens_on(self._process.pid, ports)

    def _spawn(self, install: TritonInstall, backends: Path | None) -> _PortWatch:
        """Resolve the ports and start tritonserver (not waiting for it); a watch on the
        part of the log it writes, for a port another process holds."""
        requested = self._bind_bridge_ports(self._requested)
        try:  # from the bind to the spawn: the launcher's copies close whatever happens
            config = dataclasses.replace(
                requested.resolved(),
                backend_directory=backends,
                extra_args=(
                    f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
                    *self._requested.extra_args,
                ),
            )
            self._config = config
            if self._log_path is None:
                self._log_path = (
                    Path(tempfile.mkdtemp(prefix="mmelocal-triton-")) / "tritonserver.log"
                )
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            argv = self._argv(install, config)
            self._endpoints = _endpoints_of(config, self._bridge_dir)
            logger.debug("starting %s", " ".join(argv))
            try:
                with open(self._log_path, "ab") as log:
                    watch = _PortWatch(self._log_path, log.tell(), config)
                    self._process = subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=server_environment(install, config),
                        start_new_session=True,
                        preexec_fn=(
                            functools.partial(netns.die_with_parent, signal.SIGTERM)
                            if self._die_with_parent
                            else None
                        ),
                        pass_fds=[sock.fileno() for sock in self._bridge_sockets.values()],
                    )
            except OSError as exc:  # not an executable for this machine, no permission, ...
                raise ServerStartError(
                    f"could not run {install.binary}: {exc.strerror or exc}",
                    log_path=self._log_path,
                ) from exc
        finally:
            self._close_bridge_sockets()
        _reap_group_on_exit(self._process)
        return watch

    def _bind_bridge_ports(self, config: ServerConfig) -> ServerConfig:
        """Behind the bridge, bind the ports Triton opens here and now (port 0: the
        system's choice) and hand the sockets to the bridge: no other process can take
        a port between its choice and its use. The config with the bound ports. (Without
        the bridge tritonserver binds its ports itself, from the numbers it is given.)"""
        self._bridge_sockets = {}
        if not (config.sagemaker and self._isolate_network) or netns.isolation_refused():
            return config
        names = _opened_port_names(config)
        host = config.host or "0.0.0.0"
        try:
            for name in names:
                self._bridge_sockets[name] = netns.listen_socket(host, getattr(config, name))
        except OSError as exc:
            self._close_bridge_sockets()
            raise ServerStartError(
                f"cannot listen on {host}:{getattr(config, name)}: {exc.strerror or exc} "
                "(another server uses it: choose another port)",
                log_path=self._log_path,
            ) from None
        ports = {name: sock.getsockname()[1] for name, sock in self._bridge_sockets.items()}
        return dataclasses.replace(config, **ports)

    def _close_bridge_sockets(self) -> None:
        """The launcher's copies (the bridge holds its own once started)."""
        for sock in self._bridge_sockets.values():
            sock.close()
        self._bridge_sockets = {}

    def _argv(self, install: TritonInstall, config: ServerConfig) -> list[str]:
        """tritonserver's argv, behind the namespace bridge when the SageMaker port would
        otherwise be open to the network (see the module docstring)."""
        self.isolated = False
        self._server_pid = None
        if not config.sagemaker:  # every other port listens on config.host already
            return [str(install.binary), *config.to_args()]
        refused = netns.isolation_refused() if self._isolate_network else f"{netns.NETNS_ENV}=0"
        if refused is not None:
            logger.warning(
                "tritonserver's SageMaker port %d listens on 0.0.0.0, open to the network "
                "(Triton has no option for its address, and a network namespace of its own "
                "is not possible here: %s): anyone who reaches this machine can load, "
                "unload and invoke models on it. Firewall it, e.g. "
                "'sudo iptables -I INPUT -p tcp --dport %d ! -i lo -j DROP'",
                config.sagemaker_port,
                refused,
                config.sagemaker_port,
            )
            return [str(install.binary), *config.to_args()]
        self.isolated = True
        self._bridge_dir = _socket_folder(prefix="mmelocal-ns-", name=BRIDGE_SOCKET)
        inside = dataclasses.replace(config, host="127.0.0.1")
        names = _opened_port_names(config)
        bound = self._bridge_sockets
        return netns.bridge_argv(
            host=config.host or "0.0.0.0",
            ports=[getattr(config, name) for name in names],
            control=self._bridge_dir / BRIDGE_SOCKET,
            command=[str(install.binary), *inside.to_args()],
            fds=[bound[name].fileno() for name in names] if len(bound) == len(names) else (),
        )

    def is_alive(self) -> bool:
        """True while tritonserver runs."""
        return self._process is not None and self._process.poll() is None

    def exit_fd(self) -> int | None:
        """A descriptor that becomes readable once the process :meth:`is_alive` watches has
        exited (a Linux pidfd, ``os.pidfd_open``: Linux 5.3 and later), so a caller can
        wait for the exit instead of polling; the caller closes it. None when no process
        runs or the system has no pidfd (poll :meth:`is_alive` then)."""
        process = self._process
        pidfd_open = getattr(os, "pidfd_open", None)
        if process is None or process.returncode is not None or pidfd_open is None:
            return None
        try:
            fd: int = pidfd_open(process.pid)
        except OSError:  # gone and reaped already, or refused (old kernel, seccomp)
            return None
        if process.returncode is not None:  # reaped meanwhile: the pid may be another's now
            os.close(fd)
            return None
        return fd

    @property
    def process_group(self) -> int | None:
        """The process group of the server and its stubs (behind the namespace bridge, the
        bridge's pid); None before start."""
        return self._process.pid if self._process is not None else None

    @property
    def shm_prefix(self) -> str:
        """The prefix of this server's Python-backend regions in ``/dev/shm``."""
        return self._shm_prefix

    @property
    def bridge_dir(self) -> Path | None:
        """The folder of the namespace bridge's control socket (None without the bridge)."""
        return self._bridge_dir

    def stop(self) -> None:
        """Unload the ready models (:func:`~mmelocal.runtime.shutdown.unload_before_stop`, up
        to half of ``stop_timeout_s``), SIGTERM, and SIGKILL the process group once
        ``stop_timeout_s`` has passed in all. Idempotent. Called during :meth:`start`
        (from another thread), it ends that start (see there)."""
        self._note_stop()
        process = self._process
        if process is None:
            return
        pgid = process.pid
        # behind the bridge the process started is the bridge: name tritonserver's pid
        server_pid = self.pid() if process.poll() is None else self._server_pid
        named = f"tritonserver pid {server_pid or pgid}" + (
            f" (bridge pid {pgid})" if self.isolated else ""
        )
        members = group_members(pgid)  # stubs too, even after a crash reparented them
        if process.poll() is None:
            deadline = time.monotonic() + self.stop_timeout_s
            self._unload_before_stop(self.config)
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning(
                    "%s ignored SIGTERM for %.0fs; killing it", named, self.stop_timeout_s
                )
        _kill_group(pgid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        _wait_gone(members, timeout_s=10.0)
        self._cleanup_shm()
        if self._bridge_dir is not None:
            shutil.rmtree(self._bridge_dir, ignore_errors=True)
            self._bridge_dir = None
        if self._process is process:
            logger.info("%s stopped (code %s)", named, process.returncode)
        self._process = None

    def _cleanup_shm(self) -> None:
        remove_shm_regions(self._shm_prefix)

    def __repr__(self) -> str:
        state = "alive" if self.is_alive() else "stopped"
        url = self._endpoints.http_url if self._endpoints else "-"
        return f"LocalLauncher({state}, {url}, pid={self.pid()})"


def remove_shm_regions(prefix: str) -> None:
    """Remove the ``/dev/shm`` regions named ``prefix*`` (what a killed Python-backend stub
    leaves behind; a server that stopped cleanly removed its own)."""
    if not prefix:
        return
    shm = Path("/dev/shm")
    if shm.is_dir():
        for leftover in shm.glob(f"{prefix}*"):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _warn_if_small_shm(per_instance_bytes: int) -> None:
    """Each Python-backend instance maps a region of this size in /dev/shm: warn when few fit."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return
    free_bytes = stat.f_bavail * stat.f_frsize
    if free_bytes < 4 * per_instance_bytes:
        logger.warning(
            "/dev/shm has %.0f MB free; each Python-backend model instance needs %.0f MB there "
            "(python_shm_default_bytes): loads may fail with 'Failed to increase the shared "
            "memory pool size'. Enlarge /dev/shm (docker: --shm-size) or lower the setting",
            free_bytes / 1e6,
            per_instance_bytes / 1e6,
        )


def _reap_group_on_exit(process: subprocess.Popen[bytes]) -> None:
    """When tritonserver exits for any reason, SIGKILL the rest of its process group.

    Python-backend stubs inherit the server's sockets: a stub that outlives a crashed
    server keeps client connections open, and a call in flight then waits for its whole
    timeout instead of failing at once. Killing the group closes them.
    """

    def watch() -> None:
        process.wait()
        _kill_group(process.pid)

    threading.Thread(target=watch, name=f"tritonserver-{process.pid}-reaper", daemon=True).start()


def _only_child(pid: int) -> int | None:
    """The pid of ``pid``'s child (the server under the namespace bridge), or None."""
    import psutil

    with contextlib.suppress(psutil.Error):
        children = psutil.Process(pid).children()
        if children:
            return int(children[0].pid)
    return None


def group_members(pgid: int) -> list[Any]:
    """The processes of the server's process group: the server and its Python-backend
    stubs, found by group, since a stub whose server died is no longer its child."""
    import psutil

    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
    return members


def still_running(processes: list[Any], *, timeout_s: float) -> list[Any]:
    """Wait until each process has exited (a zombie counts as gone), up to ``timeout_s``;
    the ones still running then."""
    import psutil

    deadline = time.monotonic() + timeout_s
    pending = list(processes)
    while pending and time.monotonic() < deadline:
        still = []
        for proc in pending:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    still.append(proc)
            except psutil.Error:
                pass
        pending = still
        if pending:
            time.sleep(0.01)
    return pending


def _wait_gone(processes: list[Any], *, timeout_s: float) -> None:
    """Wait until each process has exited (a zombie counts as gone), up to ``timeout_s``.

    SIGKILL is asynchronous: a stub in the middle of a system call dies a moment later, and
    its memory is only free then. Returning before that would let the next reading or the
    next load see memory that is about to be released.
    """
    pending = still_running(processes, timeout_s=timeout_s)
    if pending:
        logger.warning(
            "stub processes %s still running %.0fs after SIGKILL",
            [p.pid for p in pending],
            timeout_s,
        )


def _kill_group(pgid: int) -> None:
    """SIGKILL whatever is left in the server's process group (stub processes)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


__all__ = [
    "CACHE_ENV",
    "TRITONSERVER_ENV",
    "LocalLauncher",
    "TritonInstall",
    "cache_dir",
    "find_tritonserver",
    "group_members",
    "prepare_backend_directory",
    "remove_shm_regions",
    "server_environment",
    "still_running",
]
