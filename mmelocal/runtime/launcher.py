"""The seam between "a Triton is running" and how it got there.

A launcher only starts, stops, reports :meth:`TritonLauncher.is_alive`, its
:class:`Endpoints` and its log. Local binary (:mod:`mmelocal.runtime.local`), Docker
(:mod:`mmelocal.runtime.docker`) and an already running server
(:mod:`mmelocal.runtime.external`) implement the same protocol, so the client, ``check``,
the emulator and the pytest fixtures never care which one they got.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from mmelocal.errors import ServerStartError, UserInputError
from mmelocal.runtime.lifecycle import StartStopContext
from mmelocal.runtime.readiness import triton_ready, wait_until_ready
from mmelocal.runtime.server_config import ServerConfig
from mmelocal.runtime.shutdown import unload_before_stop
from mmelocal.runtime.visible_gpus import VISIBLE, hides_every_gpu


@dataclass(frozen=True, kw_only=True)
class Endpoints:
    """Where a running Triton answers.

    ``http_url`` (KServe v2 over HTTP, e.g. ``http://127.0.0.1:8000``), ``grpc_url``
    (``host:port``, tritonclient's gRPC form, no scheme), ``metrics_url`` (the
    Prometheus text at ``<metrics_url>/metrics``) and ``sagemaker_url`` (Triton's
    SageMaker front end, ``None`` when not enabled); ``grpc_url`` and ``metrics_url`` are
    ``None`` when the server does not open those ports (MME mode with SageMaker's
    defaults). ``bridge`` is the Unix socket that hands out connections made inside the
    server's own network namespace
    (:func:`mmelocal.runtime.netns.connect_through`), when it runs in one.
    """

    http_url: str
    grpc_url: str | None = None
    metrics_url: str | None = None
    sagemaker_url: str | None = None
    bridge: str | None = None

    def __post_init__(self) -> None:
        if not self.http_url.startswith(("http://", "https://")):
            raise UserInputError(
                f"http_url must start with http:// or https://, got {self.http_url!r}"
            )
        object.__setattr__(self, "http_url", self.http_url.rstrip("/"))
        if self.metrics_url is not None:
            object.__setattr__(self, "metrics_url", self.metrics_url.rstrip("/"))
        if self.sagemaker_url is not None:
            object.__setattr__(self, "sagemaker_url", self.sagemaker_url.rstrip("/"))

    @property
    def http_host_port(self) -> str:
        """``host:port`` of the HTTP endpoint (the form tritonclient's HTTP client takes)."""
        return self.http_url.split("://", 1)[1]


@runtime_checkable
class TritonLauncher(Protocol):
    """A Triton server process owner (or a handle on one that someone else owns).

    ``start()`` returns once the server answers ready (or raises ServerStartError naming
    the URL, the seconds waited and the log tail); ``stop()`` is idempotent; the context
    manager starts on enter and stops on exit, also when start fails half-way.
    """

    @property
    def endpoints(self) -> Endpoints:
        """The server's URLs (valid after ``start()``)."""
        ...

    @property
    def log_path(self) -> Path | None:
        """The server's log file, when this launcher keeps one."""
        ...

    @property
    def model_repository(self) -> Path | None:
        """The repository the server was started on, when known locally."""
        ...

    def start(self) -> None:
        """Start the server and wait until it is ready."""
        ...

    def stop(self) -> None:
        """Stop the server (no-op when already stopped)."""
        ...

    def is_alive(self) -> bool:
        """True while the server process (or container, or remote server) is up."""
        ...

    def pid(self) -> int | None:
        """The server's process id on this host, when there is one."""
        ...

    def __enter__(self) -> TritonLauncher: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class LauncherContext(StartStopContext):
    """The context manager every launcher shares: ``start()`` on enter, ``stop()`` on exit.

    ``start()`` cleans up after itself when it fails, and ``stop()`` is a no-op then, so a
    failed enter leaks nothing.
    """


class _HasConfig(Protocol):
    @property
    def config(self) -> ServerConfig: ...


class OwnedServerLauncher(LauncherContext):
    """What the launchers that start their own Triton (local binary, Docker) share.

    The :attr:`endpoints` / :attr:`log_path` / :attr:`model_repository` properties and the
    start timings: ``ready_after_s`` (seconds from spawn until the server answered ready),
    ``start_total_s`` (seconds ``start()`` took in all) and ``start_overhead_s`` (the part
    that was the launcher's own work). Subclasses call :meth:`_init_server_state` and
    provide ``config`` (a :class:`ServerConfig`) and ``start_timeout_s``, and wait with
    :meth:`_await_ready`.

    A ``stop()`` from another thread ends a start under way (a shutdown does not wait for
    a server nobody wants): during the wait, the server it stops fails the wait; before
    the server exists (an image pulled, a process or container being created), that stop
    finds nothing to stop, so the start notes it (:meth:`_start_under_way`,
    :meth:`_note_stop`) and stops what it made as soon as it has it
    (:meth:`_raise_if_stop_asked`). Either way the start raises ServerStartError saying it
    was stopped (:meth:`_stopped_during_start`).
    """

    #: the error ``endpoints`` raises before ``start()``
    _not_started_message = "the server has not been started: call start() first"
    #: seconds a start may wait for the server to answer ready
    start_timeout_s: float
    #: seconds a stop may take before the server is killed
    stop_timeout_s: float

    def _init_server_state(self, log_path: Path | str | None) -> None:
        self._log_path = Path(log_path) if log_path is not None else None
        self._endpoints: Endpoints | None = None
        #: the running server answered ready (so it has models to unload before its stop)
        self._answered_ready = False
        #: seconds from spawn until the server answered ready
        self.ready_after_s: float | None = None
        #: seconds start() took in all, and the part that was the launcher's own work
        self.start_total_s: float | None = None
        self.start_overhead_s: float | None = None
        #: guards the three below, which a stop() from another thread reads and sets
        self._start_lock = threading.Lock()
        #: the thread running start() now (None: no start under way)
        self._start_thread: int | None = None
        #: another thread called stop() during this start
        self._stop_asked = False
        #: the error this start raises for it (one, whichever step sees the stop first)
        self._stop_error: ServerStartError | None = None

    @contextlib.contextmanager
    def _start_under_way(self) -> Iterator[None]:
        """Around the body of ``start()``: a :meth:`_note_stop` from another thread
        meanwhile is kept for :meth:`_raise_if_stop_asked`, and whatever the start raises
        once stopped so (the wait's "exited during start-up", a container gone under the
        start's feet) becomes :meth:`_stopped_during_start`'s error."""
        with self._start_lock:
            self._start_thread, self._stop_asked = threading.get_ident(), False
            self._stop_error = None
        try:
            yield
        except Exception as exc:
            stopped = self._stopped_during_start()
            if stopped is None or exc is stopped:
                raise
            raise stopped from exc
        finally:
            with self._start_lock:
                self._start_thread = None

    def _note_stop(self) -> None:
        """Called first by ``stop()``: a stop from a thread other than the start's (the
        start's own clean-ups call ``stop()`` too) asks the start under way to end."""
        with self._start_lock:
            if self._start_thread not in (None, threading.get_ident()):
                self._stop_asked = True

    def _stopped_during_start(self) -> ServerStartError | None:
        """The error a start raises once another thread has stopped it (None: not
        stopped)."""
        with self._start_lock:
            asked = self._stop_asked
        if not asked:
            return None
        if self._stop_error is None:
            self._stop_error = ServerStartError(
                f"{self._server_name()} was stopped while it was starting (stop() was "
                "called before it answered ready)",
                log_path=self._log_path,
            )
        return self._stop_error

    def _raise_if_stop_asked(self) -> None:
        """Stop what this start made so far and raise :meth:`_stopped_during_start`'s
        error, when another thread called ``stop()`` meanwhile."""
        stopped = self._stopped_during_start()
        if stopped is not None:
            self.stop()
            raise stopped

    def _await_ready(
        self,
        started_at: float,
        *,
        check: Callable[[], bool] | None = None,
        **wait: Any,
    ) -> None:
        """Wait until the server at :attr:`endpoints` answers ready (``check``, default
        :func:`~mmelocal.runtime.readiness.triton_ready`; ``wait``: more options of
        :func:`~mmelocal.runtime.readiness.wait_until_ready`), stop it when the wait fails,
        else record the start timings (``started_at``: when ``start()`` began) and log it."""
        endpoints = self.endpoints
        self._answered_ready = False
        try:
            self.ready_after_s = wait_until_ready(
                check or (lambda: triton_ready(endpoints)),
                timeout_s=self.start_timeout_s,
                url=endpoints.http_url,
                log_path=self._log_path,
                **wait,
            )
        except BaseException:
            self.stop()
            raise
        self._answered_ready = True
        self.start_total_s = time.monotonic() - started_at
        self.start_overhead_s = self.start_total_s - self.ready_after_s
        logging.getLogger(type(self).__module__).info(  # the launcher's own logger
            "%s ready in %.2fs at %s (log %s)",
            self._server_name(),
            self.ready_after_s,
            endpoints.http_url,
            self._log_path,
        )

    def _unload_before_stop(self, config: ServerConfig) -> None:
        """Before the stop signal: unload the ready models of a server that answered ready
        (:func:`~mmelocal.runtime.shutdown.unload_before_stop`, up to half of
        ``stop_timeout_s``). A server that never came up has none, and may not answer at all."""
        if not self._answered_ready or self._endpoints is None:
            return
        self._answered_ready = False
        if config.model_control_mode == "explicit":  # the only mode that allows unloads
            unload_before_stop(self._endpoints.http_url, timeout_s=self.stop_timeout_s / 2)

    def _server_name(self) -> str:
        """What the "ready" log line calls the server."""
        return "Triton"

    @property
    def endpoints(self) -> Endpoints:
        """The server's URLs (after ``start()``)."""
        if self._endpoints is None:
            raise ServerStartError(self._not_started_message)
        return self._endpoints

    @property
    def log_path(self) -> Path | None:
        """The server's log file."""
        return self._log_path

    @property
    def model_repository(self: _HasConfig) -> Path | None:
        """The model repository of ``config`` (the one the server serves)."""
        return self.config.model_repository

    @property
    def runs_on_cpu(self: _HasConfig) -> bool:
        """True when the server is given no GPU whatever the machine: its config's ``env``
        sets a ``CUDA_VISIBLE_DEVICES`` that hides every GPU from CUDA (empty, or ``-1``:
        :func:`~mmelocal.runtime.visible_gpus.hides_every_gpu`). Its memory is then the
        host's, not a card's, and its models run on the CPU (the emulator reads and
        prepares them so)."""
        return hides_every_gpu(self.config.env.get(VISIBLE))


__all__ = ["Endpoints", "LauncherContext", "OwnedServerLauncher", "TritonLauncher"]
