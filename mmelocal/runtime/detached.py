"""Triton servers that outlive the command that started them (``mmelocal triton start``).

A detached server is a :class:`~mmelocal.runtime.local.LocalLauncher` started without the
die-with-parent link; its pid, endpoints, repository and log are written to a JSON state
file (``<state dir>/triton-<name>.json``) so that ``status`` and ``stop`` find it later and
:class:`~mmelocal.runtime.external.ExternalLauncher` can attach to it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mmelocal.errors import RuntimeLayerError, UserInputError
from mmelocal.runtime.external import ExternalLauncher
from mmelocal.runtime.server_config import ServerConfig
from mmelocal.runtime.shutdown import unload_before_stop

logger = logging.getLogger(__name__)

STATE_ENV = "MMELOCAL_STATE_DIR"


def state_dir() -> Path:
    """Folder of the state files ($MMELOCAL_STATE_DIR, default ~/.local/state/mmelocal)."""
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mmelocal"


@dataclass(frozen=True, kw_only=True)
class DetachedServer:
    """What the state file records about one detached server."""

    name: str
    pid: int
    http_url: str
    grpc_url: str | None
    metrics_url: str | None
    sagemaker_url: str | None
    model_repository: str
    log_path: str
    started_at: float
    #: the server's process group (behind the namespace bridge, the bridge's pid); None in
    #: a state file written before it was recorded
    process_group: int | None = None
    #: the prefix of the server's Python-backend regions in /dev/shm
    shm_prefix: str | None = None
    #: the folder of the namespace bridge's control socket (None without the bridge)
    bridge_dir: str | None = None

    def is_alive(self) -> bool:
        """True while the recorded pid is a running tritonserver."""
        import psutil

        try:
            process = psutil.Process(self.pid)
            return process.status() != psutil.STATUS_ZOMBIE and "tritonserver" in " ".join(
                process.cmdline()[:1]
            )
        except psutil.Error:
            return False

    def launcher(self) -> ExternalLauncher:
        """An :class:`ExternalLauncher` attached to this server."""
        return ExternalLauncher(
            self.http_url,
            grpc_url=self.grpc_url,
            metrics_url=self.metrics_url,
            sagemaker_url=self.sagemaker_url,
            model_repository=self.model_repository,
            log_path=self.log_path,
            pid=self.pid,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def _state_file(name: str, root: Path | None) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise UserInputError(f"server name must be a simple word, got {name!r}")
    return (root or state_dir()) / f"triton-{name}.json"


def read_detached(name: str = "default", *, root: Path | None = None) -> DetachedServer | None:
    """The detached server called ``name``, or None when there is no state file."""
    path = _state_file(name, root)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return DetachedServer(**data)


def refuse_native_loads(config: ServerConfig) -> None:
    """Refuse, before anything starts, a model of ``config.load_models`` that needs a backend
    the pip tritonserver lacks (it has the Python backend only, so Triton would fail the
    load with "unable to find backend library"). A kept server serves the repository as it
    is; ``mmelocal check`` and ``mmelocal serve`` run such models through mmelocal's
    Python-backend copies (:mod:`mmelocal.runtime.python_copies`)."""
    from mmelocal.builder.backends import CLI_FLAGS, PIP_SERVER_BACKENDS, backend_of
    from mmelocal.builder.model_config import read_config
    from mmelocal.errors import MmeLocalError

    for name in config.load_models:
        folder = Path(config.model_repository) / name
        try:
            model = read_config(folder / "config.pbtxt")
        except (OSError, MmeLocalError):
            continue  # Triton's own load says what is wrong with it
        needed = backend_of(model)
        if not needed or needed in PIP_SERVER_BACKENDS:
            continue
        kind = model.platform or f"backend {needed!r}"
        raise UserInputError(
            f"model {name!r} is a {kind} model: the pip tritonserver has the Python backend "
            f"only, so it cannot load it; `mmelocal check {folder}` and `mmelocal serve` run "
            "it through mmelocal's Python-backend copy, and Triton's Docker image runs it as "
            f"it is (`mmelocal check|serve {CLI_FLAGS.docker}`)"
        )


def start_detached(
    config: ServerConfig,
    *,
    name: str = "default",
    tritonserver: Path | str | None = None,
    start_timeout_s: float = 120.0,
    root: Path | None = None,
) -> DetachedServer:
    """Start tritonserver detached from this process and record it; fails if one runs, and
    before starting when a model to load at start needs a backend the pip tritonserver
    lacks (see :func:`refuse_native_loads`)."""
    from mmelocal.runtime.local import LocalLauncher

    if tritonserver is None:
        refuse_native_loads(config)

    existing = read_detached(name, root=root)
    if existing is not None and existing.is_alive():
        raise UserInputError(
            f"a detached Triton called {name!r} already runs (pid {existing.pid}, "
            f"{existing.http_url}): stop it first or choose another --name"
        )
    path = _state_file(name, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    log_path = path.with_suffix(".log")
    launcher = LocalLauncher(
        config,
        tritonserver=tritonserver,
        start_timeout_s=start_timeout_s,
        log_path=log_path,
        die_with_parent=False,
    )
    launcher.start()
    endpoints = launcher.endpoints
    pid = launcher.pid()
    assert pid is not None
    kept = DetachedServer(
        name=name,
        pid=pid,
        http_url=endpoints.http_url,
        grpc_url=endpoints.grpc_url,
        metrics_url=endpoints.metrics_url,
        sagemaker_url=endpoints.sagemaker_url,
        model_repository=str(Path(config.model_repository).resolve()),
        log_path=str(log_path),
        started_at=time.time(),
        process_group=launcher.process_group,
        shm_prefix=launcher.shm_prefix,
        bridge_dir=str(launcher.bridge_dir) if launcher.bridge_dir is not None else None,
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(kept.to_dict(), indent=2), encoding="utf-8")
    tmp.replace(path)
    logger.info("detached Triton %r started: pid %s at %s", name, pid, kept.http_url)
    return kept


def stop_detached(
    name: str = "default", *, timeout_s: float = 15.0, root: Path | None = None
) -> DetachedServer | None:
    """Stop the detached server and remove its state file.

    The ready models are unloaded first
    (:func:`~mmelocal.runtime.shutdown.unload_before_stop`, up to half of ``timeout_s``);
    then SIGTERM to tritonserver and a wait, until ``timeout_s`` has passed in all, for its
    whole process group to end (the namespace bridge exits after the server, removing its
    control socket; the Python-backend stubs exit with their models); only what is still
    running then is SIGKILLed. The server's ``/dev/shm`` regions (left by a killed stub)
    and the bridge's folder are removed in any case."""
    from mmelocal.runtime.local import group_members, remove_shm_regions, still_running

    kept = read_detached(name, root=root)
    if kept is None:
        return None
    shm_prefix = kept.shm_prefix
    if kept.is_alive():
        group = kept.process_group or _group_of(kept.pid)
        shm_prefix = shm_prefix or _shm_prefix_of(kept.pid)  # a state file written before
        members = group_members(group)
        deadline = time.monotonic() + timeout_s
        unload_before_stop(kept.http_url, timeout_s=timeout_s / 2)
        with contextlib.suppress(ProcessLookupError):
            os.kill(kept.pid, signal.SIGTERM)
        if still_running(members, timeout_s=max(0.0, deadline - time.monotonic())):
            logger.warning(
                "detached Triton %r (pid %s) ignored SIGTERM for %.0fs; killing it",
                name,
                kept.pid,
                timeout_s,
            )
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
            left = still_running(members, timeout_s=10.0)
            if left:
                raise RuntimeLayerError(
                    f"detached Triton pid {kept.pid} did not stop: {[p.pid for p in left]} "
                    "still run after SIGKILL"
                )
        for pid in {group, kept.pid}:  # reap them when this process started them
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
    if shm_prefix:
        remove_shm_regions(shm_prefix)
    if kept.bridge_dir:
        shutil.rmtree(kept.bridge_dir, ignore_errors=True)
    _state_file(name, root).unlink(missing_ok=True)
    logger.info("detached Triton %r stopped (pid %s)", name, kept.pid)
    return kept


def _group_of(pid: int) -> int:
    try:  # the server's group: under the namespace bridge, the bridge's pid
        return os.getpgid(pid)
    except ProcessLookupError:
        return pid


def _shm_prefix_of(pid: int) -> str | None:
    """The ``shm-region-prefix-name`` on the server's command line (None when absent)."""
    import psutil

    marker = "shm-region-prefix-name="
    with contextlib.suppress(psutil.Error):
        for arg in psutil.Process(pid).cmdline():
            if marker in arg:
                return arg.split(marker, 1)[1] or None
    return None


__all__ = ["DetachedServer", "read_detached", "start_detached", "state_dir", "stop_detached"]
