"""Run the ``tritonserver`` binary as a child process: the embedded default launcher.

The binary comes from the ``nvidia-pytriton`` wheel (``site-packages/pytriton/tritonserver``)
or from a path the user gives (an ``/opt/tritonserver`` install). The wheel's binary has
only the Python backend, and its stub must match the running Python; the launcher builds
a backend folder once per (wheel, Python) pair in a cache directory, atomically.

The child's environment adds ``LD_LIBRARY_PATH`` (the wheel's ``nvidia_pytriton.libs``,
without which the stub cannot start and a load hangs silently) and ``PYTHONPATH`` (this
environment's site-packages, so Python models can import torch or onnxruntime).

The server lives in its own process group (stub children included), receives SIGTERM
when the thread that started it dies (``PR_SET_PDEATHSIG``: start it from a thread that
lives as long as the server, e.g. the main thread), and :meth:`LocalLauncher.stop`
escalates SIGTERM -> SIGKILL of the whole group after a bounded wait.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from mmelocal.errors import MissingDependencyError, ServerStartError, UserInputError
from mmelocal.runtime.config import ServerConfig
from mmelocal.runtime.launcher import Endpoints
from mmelocal.runtime.readiness import wait_until_ready

logger = logging.getLogger(__name__)

TRITONSERVER_ENV = "MMELOCAL_TRITONSERVER"
CACHE_ENV = "MMELOCAL_CACHE_DIR"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, kw_only=True)
class TritonInstall:
    """Where a tritonserver binary and its pieces are.

    ``backends_dir`` is a ready backend folder (an ``/opt/tritonserver`` install) or
    ``None`` when one must be assembled from ``python_backend_src`` + ``stub`` (the wheel).
    """

    binary: Path
    backends_dir: Path | None = None
    python_backend_src: Path | None = None
    stub: Path | None = None
    libs_dir: Path | None = None

    @property
    def from_wheel(self) -> bool:
        """True when this is the nvidia-pytriton wheel's binary."""
        return self.python_backend_src is not None


def find_tritonserver(path: Path | str | None = None) -> TritonInstall:
    """Locate tritonserver: ``path``, ``$MMELOCAL_TRITONSERVER``, the wheel, then PATH/opt."""
    given = path or os.environ.get(TRITONSERVER_ENV)
    if given:
        binary = Path(given)
        if binary.is_dir():
            binary = binary / "bin" / "tritonserver"
        if not binary.is_file():
            raise UserInputError(f"tritonserver not found at {binary}: give the binary's path")
        return _install_from_binary(binary)
    wheel = _wheel_install()
    if wheel is not None:
        return wheel
    for candidate in (shutil.which("tritonserver"), "/opt/tritonserver/bin/tritonserver"):
        if candidate and Path(candidate).is_file():
            return _install_from_binary(Path(candidate))
    raise MissingDependencyError(
        "nvidia-pytriton", extra="triton", feature="The local Triton launcher"
    )


def _wheel_install() -> TritonInstall | None:
    import importlib.util

    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    server = root / "tritonserver"
    binary = server / "bin" / "tritonserver"
    if not binary.is_file():
        return None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = server / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise UserInputError(
            f"nvidia-pytriton has no Python backend stub for Python {version} ({stub}); "
            "use a Python version the wheel supports"
        )
    return TritonInstall(
        binary=binary,
        python_backend_src=server / "backends" / "python",
        stub=stub,
        libs_dir=root.parent / "nvidia_pytriton.libs",
    )


def _install_from_binary(binary: Path) -> TritonInstall:
    wheel = _wheel_install()
    if wheel is not None and wheel.binary.resolve() == binary.resolve():
        return wheel
    root = binary.parent.parent
    backends, libs = root / "backends", root / "lib"
    return TritonInstall(
        binary=binary,
        backends_dir=backends if backends.is_dir() else None,
        libs_dir=libs if libs.is_dir() else None,
    )


def cache_dir() -> Path:
    """mmelocal's cache folder (``$MMELOCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/mmelocal``)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mmelocal"


def prepare_backend_directory(install: TritonInstall, *, cache: Path | None = None) -> Path | None:
    """A backend folder: ``python/`` plus the stub for this Python (built once, atomically)."""
    if not install.from_wheel:
        return install.backends_dir
    assert install.python_backend_src is not None and install.stub is not None
    stat = install.stub.stat()
    key = hashlib.sha256(
        f"{install.python_backend_src.resolve()}|{install.stub.resolve()}|{stat.st_size}|"
        f"{stat.st_mtime_ns}".encode()
    ).hexdigest()[:16]
    root = (cache or cache_dir()) / "triton-backends"
    target = root / f"py{sys.version_info.major}{sys.version_info.minor}-{key}"
    if (target / "python" / "triton_python_backend_stub").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        shutil.copytree(install.python_backend_src, staging / "python")
        shutil.copy2(install.stub, staging / "python" / "triton_python_backend_stub")
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "python" / "triton_python_backend_stub").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("assembled Triton backend folder %s", target)
    return target


def server_environment(install: TritonInstall, config: ServerConfig) -> dict[str, str]:
    """The child environment: ours + library path + this Python's site-packages + config env."""
    env = dict(os.environ)
    lib_dirs: list[str] = []
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlibrary = sysconfig.get_config_var("INSTSONAME")
    if libdir and ldlibrary and (Path(libdir) / ldlibrary).exists():
        lib_dirs.append(libdir)
    if install.libs_dir is not None and install.libs_dir.is_dir():
        lib_dirs.append(str(install.libs_dir))
    env["LD_LIBRARY_PATH"] = _join_paths(lib_dirs, env.get("LD_LIBRARY_PATH"))
    env["PYTHONPATH"] = _join_paths(_site_packages(), env.get("PYTHONPATH"))
    # The stub's embedded interpreter starts isolated (PYTHONPATH is not read) and finds its
    # prefix from the first ``python3`` on PATH: this environment's bin makes it load the
    # same site-packages (a venv's pyvenv.cfg included).
    env["PATH"] = _join_paths([str(Path(sys.executable).parent)], env.get("PATH"))
    env.update(config.to_env())
    return env


def _site_packages() -> list[str]:
    import site

    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    with contextlib.suppress(AttributeError):
        paths += site.getsitepackages()
    paths += [p for p in sys.path if p.endswith("site-packages")]
    seen: list[str] = []
    for p in paths:
        if p not in seen and Path(p).is_dir():
            seen.append(p)
    return seen


def _join_paths(first: list[str], existing: str | None) -> str:
    items = list(first) + [p for p in (existing or "").split(os.pathsep) if p and p not in first]
    return os.pathsep.join(items)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _http_ok(url: str, timeout_s: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except OSError:
        return False


class LocalLauncher:
    """Start the tritonserver binary as a child process (see the module docstring).

    ``tritonserver`` is a binary path or an install folder (default: the wheel). The log
    goes to ``log_path`` (default ``<temp>/tritonserver.log``, kept after stop).
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
    ) -> None:
        if start_timeout_s <= 0 or stop_timeout_s <= 0:
            raise UserInputError("start_timeout_s and stop_timeout_s must be > 0")
        self._requested = config
        self._tritonserver = tritonserver
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._log_path = Path(log_path) if log_path is not None else None
        self._die_with_parent = die_with_parent
        self._config: ServerConfig | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._endpoints: Endpoints | None = None
        self._shm_prefix = f"mmelocal_{os.getpid()}_{uuid.uuid4().hex[:8]}_"
        #: seconds from spawn until the server answered ready (tritonserver's own start)
        self.ready_after_s: float | None = None
        #: seconds start() took in all, and the part that was the launcher's own work
        self.start_total_s: float | None = None
        self.start_overhead_s: float | None = None

    @property
    def config(self) -> ServerConfig:
        """The config in use (ports resolved once started)."""
        return self._config or self._requested

    @property
    def endpoints(self) -> Endpoints:
        """The server's URLs (after ``start()``)."""
        if self._endpoints is None:
            raise ServerStartError("the server has not been started: call start() first")
        return self._endpoints

    @property
    def log_path(self) -> Path | None:
        """The server's log file."""
        return self._log_path

    @property
    def model_repository(self) -> Path | None:
        """The repository passed to tritonserver."""
        return self.config.model_repository

    def pid(self) -> int | None:
        """tritonserver's pid (None before start)."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Assemble the backend folder, spawn tritonserver and wait until it is ready."""
        if self._process is not None and self._process.poll() is None:
            return
        t0 = time.monotonic()
        install = find_tritonserver(self._tritonserver)
        _warn_if_small_shm(self._requested.python_shm_default_bytes)
        backends = self._requested.backend_directory or prepare_backend_directory(install)
        config = dataclasses.replace(
            self._requested.resolved(),
            backend_directory=backends,
            extra_args=(
                f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
                *self._requested.extra_args,
            ),
        )
        self._config = config
        if self._log_path is None:
            self._log_path = Path(tempfile.mkdtemp(prefix="mmelocal-triton-")) / "tritonserver.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        host = "127.0.0.1" if config.host in ("0.0.0.0", "") else config.host
        self._endpoints = Endpoints(
            http_url=f"http://{host}:{config.http_port}",
            grpc_url=f"{host}:{config.grpc_port}",
            metrics_url=f"http://{host}:{config.metrics_port}",
            sagemaker_url=f"http://127.0.0.1:{config.sagemaker_port}" if config.sagemaker else None,
        )
        argv = [str(install.binary), *config.to_args()]
        logger.debug("starting %s", " ".join(argv))
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_environment(install, config),
                start_new_session=True,
                preexec_fn=_die_with_parent if self._die_with_parent else None,
            )
        try:
            self.ready_after_s = wait_until_ready(
                self._ready_check,
                timeout_s=self.start_timeout_s,
                url=self._endpoints.http_url,
                log_path=self._log_path,
                process=self._process,
            )
        except BaseException:
            self.stop()
            raise
        self.start_total_s = time.monotonic() - t0
        self.start_overhead_s = self.start_total_s - self.ready_after_s
        logger.info(
            "tritonserver pid %s ready in %.2fs at %s (log %s)",
            self._process.pid,
            self.ready_after_s,
            self._endpoints.http_url,
            self._log_path,
        )

    def _ready_check(self) -> bool:
        assert self._endpoints is not None
        if not _http_ok(f"{self._endpoints.http_url}/v2/health/ready"):
            return False
        if self._endpoints.sagemaker_url is not None:
            return _http_ok(f"{self._endpoints.sagemaker_url}/ping")
        return True

    def is_alive(self) -> bool:
        """True while tritonserver runs."""
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """SIGTERM, wait up to ``stop_timeout_s``, then SIGKILL the process group. Idempotent."""
        process = self._process
        if process is None:
            return
        pgid = process.pid
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "tritonserver pid %s ignored SIGTERM for %.0fs; killing it",
                    pgid,
                    self.stop_timeout_s,
                )
        _kill_group(pgid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        self._cleanup_shm()
        if self._process is process:
            logger.info("tritonserver pid %s stopped (code %s)", pgid, process.returncode)
        self._process = None

    def _cleanup_shm(self) -> None:
        shm = Path("/dev/shm")
        if shm.is_dir():
            for leftover in shm.glob(f"{self._shm_prefix}*"):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    def __enter__(self) -> LocalLauncher:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "alive" if self.is_alive() else "stopped"
        url = self._endpoints.http_url if self._endpoints else "-"
        return f"LocalLauncher({state}, {url}, pid={self.pid()})"


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


def _kill_group(pgid: int) -> None:
    """SIGKILL whatever is left in the server's process group (stub processes)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


__all__ = [
    "LocalLauncher",
    "TritonInstall",
    "cache_dir",
    "find_tritonserver",
    "prepare_backend_directory",
    "server_environment",
]
