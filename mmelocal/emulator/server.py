"""Run the emulator's HTTP server: in the foreground (``mmelocal serve``) or on a thread.

:class:`EmulatorServer` runs its own event loop on a background thread so synchronous
code (the pytest fixture, the demo, benchmarks, boto3 callers) can start an endpoint,
use it over HTTP and stop it; ``start()`` returns once Triton is up and the port answers.
Its port is bound when it is first needed (``port=0``: the system's choice, read back
from the bound socket), and that socket is the one served: no other process can take the
port in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import signal
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from mmelocal.emulator import http_server
from mmelocal.emulator.emulator import Emulator, EmulatorConfig
from mmelocal.errors import EmulatorError, UserInputError
from mmelocal.runtime.lifecycle import StartStopContext

logger = logging.getLogger(__name__)
T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop when installed (about twice as fast for a proxy), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on :func:`new_event_loop`."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, bound before Triton starts so a port in
    use fails at once (UserInputError naming the address) instead of after the start-up."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise UserInputError(f"cannot listen on {host}:{port}: unknown host ({exc})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        in_use = exc.errno == errno.EADDRINUSE
        hint = " (another server uses it: choose another --port)" if in_use else ""
        raise UserInputError(f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from None
    sock.setblocking(False)
    return sock


def bound_port(sock: socket.socket) -> int:
    """The port ``sock`` is bound to."""
    return int(sock.getsockname()[1])


class Listener:
    """The emulator's HTTP listener: :class:`~.http_server.FastFrontServer` on one socket;
    ``timeouts`` bound slow clients (default :class:`~.http_server.HttpTimeouts`)."""

    def __init__(
        self, emulator: Emulator, *, timeouts: http_server.HttpTimeouts | None = None
    ) -> None:
        self.emulator = emulator
        self.timeouts = timeouts
        self._front: http_server.FastFrontServer | None = None
        self._started = False
        #: the port served (known once :meth:`start` bound it)
        self.port = 0

    async def start(self, host: str, port: int, *, sock: socket.socket | None = None) -> None:
        """Take ``host:port`` (or serve ``sock``, already bound and listening), start the
        emulator (its Triton instances), then serve."""
        if sock is None:
            sock = bind_socket(host, port)
        self.port = bound_port(sock)
        try:
            await self.emulator.start()
        except BaseException:
            sock.close()
            raise
        self._started = True
        try:
            self._front = http_server.FastFrontServer(self.emulator, timeouts=self.timeouts)
            await self._front.start(sock)
        except BaseException:
            sock.close()
            await self.stop()
            raise
        logger.info("MME emulator listening on http://%s:%d", host, self.port)

    async def stop(self) -> None:
        """Stop listening, then stop the emulator (Triton)."""
        if self._front is not None:
            await self._front.stop()
            self._front = None
        if self._started:
            self._started = False
            await self.emulator.stop()


async def serve_forever(
    emulator: Emulator,
    *,
    host: str,
    port: int,
    timeouts: http_server.HttpTimeouts | None = None,
    freeze_gc: bool = False,
    sock: socket.socket | None = None,
) -> None:
    """Serve until SIGTERM or cancellation (the CLI runs this with :func:`run`).
    ``sock``: already bound to ``host:port`` (:func:`bind_socket`), served as it is.
    ``freeze_gc``: once started, move every object so far out of the collector's view
    (``gc.freeze``: shorter collection pauses while serving); only for a process that
    does nothing else, as ``mmelocal serve``'s, never inside a user's process."""
    listener = Listener(emulator, timeouts=timeouts)
    try:
        await listener.start(host, port, sock=sock)
        if freeze_gc:
            gc.collect()
            gc.freeze()
        stop = asyncio.Event()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
    finally:
        await listener.stop()


#: how long a stopping server waits for the tasks it cancels (calls from other threads,
#: connections) to end
END_TASKS_TIMEOUT_S = 5.0


def _end_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending on ``loop`` (what :meth:`EmulatorServer.call` runs
    for other threads among them, so that they get an answer, CancelledError, and do not
    wait out their timeout) and give them a while to end."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=END_TASKS_TIMEOUT_S))


class EmulatorServer(StartStopContext):
    """An emulator on a background thread (see the module docstring)."""

    def __init__(
        self,
        config: EmulatorConfig | Emulator,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        start_timeout_s: float = 180.0,
        timeouts: http_server.HttpTimeouts | None = None,
    ) -> None:
        self.emulator = config if isinstance(config, Emulator) else Emulator(config)
        self.host = host
        self._port = port
        #: the listening socket, bound at the first need of the port (see the module)
        self._sock: socket.socket | None = None
        self._bound = False
        self.start_timeout_s = start_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._listener: Listener | None = None
        self.timeouts = timeouts
        self._ready = threading.Event()
        self._error: BaseException | None = None
        #: guards :attr:`_halted` and the serving task against a stop from another thread
        self._state_lock = threading.Lock()
        #: a stop() came: a start under way ends (its Triton stopped), none begins
        self._halted = False
        #: the loop's one task: the start-up, then serving until it is cancelled
        self._serving: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The port served (binds it on first use: ``port=0`` picks a free one)."""
        if not self._bound:
            self._bound = True
            self._sock = bind_socket(self.host, self._port)
            self._port = bound_port(self._sock)
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (give it to boto3 as ``endpoint_url``)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmulatorServer:
        """Start Triton and the HTTP server; return once both answer. A :meth:`stop` from
        another thread meanwhile ends the start (the Triton instances started so far are
        stopped) and it raises EmulatorError."""
        with self._state_lock:
            if self._halted:
                raise EmulatorError("the emulator was stopped before it started")
            if self._thread is not None:
                return self
            _ = self.port  # bound here, in the caller's thread: a port in use fails at once
            self._thread = threading.Thread(target=self._run, name="mme-emulator", daemon=True)
            self._thread.start()
        if not self._ready.wait(self.start_timeout_s):
            self.stop()
            raise EmulatorError(f"the emulator did not start within {self.start_timeout_s:g}s")
        if self._error is not None:
            error = self._error
            self.stop()
            if isinstance(error, asyncio.CancelledError):
                raise EmulatorError("the emulator was stopped while it was starting") from None
            raise error
        return self

    def _run(self) -> None:
        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        with self._state_lock:
            self._loop = loop
            self._serving = loop.create_task(self._serve())
            if self._halted:  # stopped before the loop existed: the start ends at once
                self._serving.cancel()
        try:
            loop.run_until_complete(self._serving)
        except BaseException as exc:
            if not self._ready.is_set():
                self._error = exc
        finally:
            try:
                loop.run_until_complete(self._cleanup())
                _end_tasks(loop)
            finally:
                loop.close()
                # only now: the caller's stop() must find the loop gone, not closing
                self._ready.set()

    async def _serve(self) -> None:
        """Start up, say so, then serve until cancelled (:meth:`stop`)."""
        await self._setup()
        self._ready.set()
        await asyncio.Event().wait()

    async def _setup(self) -> None:
        self._listener = Listener(self.emulator, timeouts=self.timeouts)
        sock, self._sock = self._sock, None
        await self._listener.start(self.host, self._port, sock=sock)

    async def _cleanup(self) -> None:
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        """Run a coroutine on the server's loop from another thread; its result."""
        if self._loop is None:
            raise EmulatorError("the emulator is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout_s)

    def stop(self) -> None:
        """Stop the HTTP server and every Triton instance (idempotent); a start under way
        (on another thread) ends, stopping what it started, and the :meth:`call` s under
        way end with CancelledError."""
        with self._state_lock:
            self._halted = True
            loop, thread, serving = self._loop, self._thread, self._serving
        if loop is not None and serving is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: it is ending
                loop.call_soon_threadsafe(serving.cancel)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=120)
        self._thread = None
        self._loop = None
        if self._sock is not None:  # bound, never served
            self._sock.close()
            self._sock = None


__all__ = ["EmulatorServer", "Listener", "new_event_loop", "run", "serve_forever"]
