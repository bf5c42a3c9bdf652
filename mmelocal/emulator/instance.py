"""One Triton instance as the MME platform drives it.

Loads and unloads go through Triton's SageMaker front end exactly as SageMaker does:
``POST /models`` ``{"model_name": KEY, "url": DIR}``, ``DELETE /models/KEY`` and
``POST /models/KEY/invoke``, each with ``X-Amzn-SageMaker-Target-Model: TARGET`` (Triton
names the model after that header; KEY is a URL-safe digest of it, like SageMaker's hash).

The instance keeps the loaded set: per model its state, last use, requests in flight,
callers waiting for its load, and its measured footprint. Concurrent first calls to one
cold model share one load. Loads (and the unloads they cause) run one at a time per
instance, so memory readings before and after a load measure that load alone.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mmelocal.emulator.cache import ArtifactCache, Prepare, target_key
from mmelocal.emulator.events import EventLog
from mmelocal.emulator.eviction import Evictor
from mmelocal.emulator.gauge import MemoryGauge
from mmelocal.emulator.loading import Loader
from mmelocal.emulator.metrics import Metrics
from mmelocal.emulator.model_state import (
    LOADING,
    READY,
    UNLOADING,
    Acquired,
    InstanceOptions,
    InstanceUnavailableError,
    LoadedSet,
    ModelEntry,
    ModelNotReadyError,
    quiet_future,
)
from mmelocal.emulator.own_thread import OwnThread
from mmelocal.emulator.probes import MemoryProbe, MemoryReading
from mmelocal.emulator.sagemaker_control import SageMakerControl
from mmelocal.emulator.trim import Trimmer
from mmelocal.emulator.upstream import Reply, UpstreamPool
from mmelocal.errors import EmulatorError, ServerStartError
from mmelocal.runtime.launcher import TritonLauncher

logger = logging.getLogger(__name__)


class TritonInstance:
    """The loaded set and the load/unload/invoke calls of one Triton server.

    Composed of a :class:`~mmelocal.emulator.model_state.LoadedSet` (its models), a
    :class:`~mmelocal.emulator.gauge.MemoryGauge`, the front end's control calls
    (:class:`~mmelocal.emulator.sagemaker_control.SageMakerControl`), an
    :class:`~mmelocal.emulator.eviction.Evictor`, a
    :class:`~mmelocal.emulator.loading.Loader` and the watchdog's
    :class:`~mmelocal.emulator.trim.Trimmer`.
    """

    def __init__(
        self,
        *,
        index: int,
        launcher: TritonLauncher,
        probe: MemoryProbe,
        cache: ArtifactCache,
        metrics: Metrics,
        events: EventLog,
        options: InstanceOptions | None = None,
        prepare: Prepare | None = None,
        url_for: Callable[[Path], str] = str,
    ) -> None:
        self.index = index
        #: taken out by a scale-in: a restart in progress stops what it started, and no
        #: new restart begins (a retired instance's process must not outlive it)
        self.retired = False
        #: what the last restart has still to load again (a failed restart's all of it),
        #: for the next restart when Triton dies before it is done
        self._to_reload: dict[str, float] = {}
        #: counts the server processes started here: a liveness check's answer applies
        #: only to the process it checked (a restart may replace it while the check runs)
        self.generation = 0
        #: the liveness check a failed connection started (one at a time per process)
        self._liveness: asyncio.Future[bool] | None = None
        self._liveness_generation = 0
        #: what a server that came up (a start, a restart) gets before it takes calls:
        #: the emulator's shared-memory regions, registered again
        self.on_up: Callable[[TritonInstance], Awaitable[None]] | None = None
        self.launcher = launcher
        self.cache = cache
        self.metrics = metrics
        self.events = events
        self.options = options or InstanceOptions()
        self.state = LoadedSet(index=index, options=self.options)
        self.gauge = MemoryGauge(probe, threshold=self.options.memory_threshold)
        self.control = SageMakerControl(
            options=self.options,
            connection_error=self.connection_error,
            log_path=lambda: self.launcher.log_path,
        )
        self.evictor = Evictor(
            state=self.state,
            control=self.control,
            gauge=self.gauge,
            cache=cache,
            metrics=metrics,
            events=events,
        )
        self.loader = Loader(evictor=self.evictor, prepare=prepare, url_for=url_for)
        self.trimmer = Trimmer(state=self.state, gauge=self.gauge, evictor=self.evictor)
        # start/stop from one long-lived thread (the launcher ties the server's life to it)
        self._process_thread = OwnThread(f"triton-{index}")
        # liveness checks: not behind a start (seconds to minutes) nor the downloads
        self._checks = OwnThread(f"triton-{index}-check")
        #: set from the submission of the launcher's start until it returned (:meth:`stop`)
        self._launching = threading.Event()
        #: a stop before a launch queued on the process thread has begun ends it there
        #: (the launcher, not yet starting, would not see that stop); guards the two below
        self._launch_lock = threading.Lock()
        self._stop_asked = False
        self._launch_began = False

    # -- the parts, as the platform and the router see them ------------------------------
    @property
    def probe(self) -> MemoryProbe:
        """The memory probe behind :attr:`gauge`."""
        return self.gauge.probe

    @property
    def models(self) -> dict[str, ModelEntry]:
        """The loaded set: target -> entry."""
        return self.state.models

    @property
    def footprints(self) -> dict[str, int]:
        """Measured footprint per target (kept for its next load)."""
        return self.state.footprints

    @property
    def held_footprints(self) -> dict[str, int]:
        """What each target held the last time it was measured loaded."""
        return self.state.held

    @property
    def up(self) -> bool:
        """False while the server is down or restarting."""
        return self.state.up

    @up.setter
    def up(self, value: bool) -> None:
        self.state.up = value

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start (or adopt) the server and take a first memory reading."""
        with self._launch_lock:
            self._stop_asked = False  # a start after a stop: a restart keeps the stop
        await self._start_launcher()
        self.generation += 1
        url = self.launcher.endpoints.sagemaker_url
        if url is None:
            raise EmulatorError(
                f"instance {self.index}: the Triton server has no SageMaker front end; start "
                "it with --allow-sagemaker=true and SAGEMAKER_MULTI_MODEL=true"
            )
        endpoints = self.launcher.endpoints
        self.control.connect(url, endpoints.http_url, bridge=endpoints.bridge)
        await self._came_up()
        self.up = True
        self.trimmer.note_idle_memory(await self.read_memory())

    async def _came_up(self) -> None:
        """Run :attr:`on_up` for the server that just started, before calls reach it."""
        if self.on_up is not None:
            await self.on_up(self)

    def _start_launcher(self) -> asyncio.Future[None]:
        """The launcher's start on the process thread, :attr:`_launching` until it returned
        (even when the awaiting task was cancelled meanwhile: :meth:`stop`)."""

        def launch() -> None:
            try:
                with self._launch_lock:
                    if self._stop_asked:  # a stop came before the launch left the queue
                        raise ServerStartError(
                            f"instance {self.index}: stopped before its server started"
                        )
                    self._launch_began = True
                self.launcher.start()
            finally:
                self._launching.clear()

        with self._launch_lock:
            self._launch_began = False
        self._launching.set()
        return self._process_thread.run(launch)

    async def stop(self) -> None:
        """Stop the server and forget its loaded set (idempotent). A start under way waits
        for its server to answer (up to the launcher's start timeout) before the process
        thread is free: its process is stopped from another thread at once, which ends
        that wait, and the stop on the process thread after it finishes the job. A start
        still queued on the process thread behind other work never begins."""
        self.up = False
        with self._launch_lock:
            self._stop_asked = True  # a launch still queued on the process thread: not begun
            began = self._launch_began
        if self._launching.is_set() and began:
            await asyncio.to_thread(self.launcher.stop)
        self.control.close()
        pending: list[asyncio.Future[Any]] = [*self.state.deletes.values(), *self.state.finishing]
        pending += [e.task for e in self.models.values() if e.task is not None]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for entry in list(self.models.values()):
            if entry.state == READY:
                self.cache.unpin(entry.target)  # its models go with the server
        self.models.clear()
        await self._process_thread.run(self.launcher.stop)

    def close(self) -> None:
        """Release the process and check threads (after :meth:`stop`)."""
        self._process_thread.close()
        self._checks.close()

    def check_alive(self) -> asyncio.Future[bool]:
        """Whether the server's process runs: the launcher's ``is_alive`` (it may be an
        HTTP or Docker API call) on the instance's own check thread, never behind the
        downloads on the default executor."""
        return self._checks.run(self.launcher.is_alive)

    async def read_memory(self) -> MemoryReading:
        """A fresh probe reading (in an executor)."""
        return await self.gauge.read()

    @property
    def limit_bytes(self) -> int:
        """Memory the loaded set may use: threshold x total (or the override when set)."""
        return self.gauge.limit_bytes

    @property
    def free_bytes(self) -> int:
        """Room left under the limit at the last reading."""
        return self.gauge.free_bytes

    def is_ready(self, target: str) -> bool:
        """True when ``target`` is loaded and servable here."""
        entry = self.models.get(target)
        return entry is not None and entry.state == READY

    def loaded(self) -> list[str]:
        """Targets loaded here, least recently used first."""
        return self.state.loaded()

    # -- serving -----------------------------------------------------------------------
    async def acquire(self, target: str, *, wait_timeout_s: float | None = None) -> Acquired:
        """Make ``target`` ready here and count one request in flight (pair with release).

        Raises ModelNotReadyError after ``wait_timeout_s`` while the load goes on.
        """
        if self.hold_ready(target):
            return Acquired(cache_hit=True)
        if not self.up:
            raise InstanceUnavailableError(f"instance {self.index} is restarting; retry")
        start = time.monotonic()
        deadline = None if wait_timeout_s is None else start + wait_timeout_s
        while True:
            entry = self.models.get(target)
            if entry is not None and entry.state == READY:
                entry.in_flight += 1
                entry.last_used_s = time.monotonic()
                return Acquired(cache_hit=False, wait_s=time.monotonic() - start)
            if entry is None:
                if not self.up:  # stopped or restarting since the call began waiting
                    raise InstanceUnavailableError(f"instance {self.index} is restarting; retry")
                entry = self._start_load(target)
            entry.evicts = True  # a call wants it: it may make room as any cold load does
            entry.waiters += 1
            try:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                await asyncio.wait_for(asyncio.shield(entry.future), timeout=remaining)
            except TimeoutError:
                raise ModelNotReadyError(
                    f"TargetModel {target!r} is still loading after {wait_timeout_s:g}s; "
                    "the load goes on: retry shortly",
                    target_model=target,
                ) from None
            finally:
                entry.waiters -= 1

    def _start_load(self, target: str) -> ModelEntry:
        entry = self.loader.new_entry(target)
        self.loader.start(entry)
        return entry

    def load_again(self, target: str) -> bool:
        """Triton lost ``target`` (it answered an invoke 404): load it again in the same entry,
        so the calls still in flight on it release their own holds. False when it is not
        loaded here (another call's recovery or an eviction is under way: it waits for that
        like any call)."""
        entry = self.models.get(target)
        if entry is None or entry.state != READY:
            return False
        self.cache.unpin(target)  # the load pins it again
        entry.state = LOADING
        entry.future = quiet_future()
        self.loader.start(entry)
        return True

    async def reload(self, target: str, *, last_used_s: float) -> None:
        """Load ``target`` again after a restart, as last used at ``last_used_s``: a reload
        is no use, so the loaded set keeps the recency order it had, and it evicts nothing
        (raises OutOfMemoryError when it does not fit beside what is loaded; nothing to do
        when a call already loads it, or it is here)."""
        entry = self.models.get(target)
        if entry is None:
            if not self.up:
                raise InstanceUnavailableError(f"instance {self.index} is restarting; retry")
            entry = self._start_load(target)
            entry.last_used_s = last_used_s
            entry.evicts = False  # what is loaded was used more recently: only if it fits
        try:
            await asyncio.shield(entry.future)
        except InstanceUnavailableError:
            raise  # the server went away: still to load again after the next restart
        except BaseException:
            self._to_reload.pop(target, None)
            raise
        self._to_reload.pop(target, None)

    def hold_ready(self, target: str) -> bool:
        """Count one request in flight when ``target`` is loaded here and the server is up
        (pair with :meth:`release`); False, holding nothing, otherwise."""
        state = self.state
        entry = state.models.get(target)
        if entry is None or entry.state != READY or not state.up:
            return False
        entry.in_flight += 1
        entry.last_used_s = time.monotonic()
        return True

    def release(self, target: str) -> None:
        """One request for ``target`` finished."""
        entry = self.state.models.get(target)
        if entry is not None and entry.in_flight > 0:
            entry.in_flight -= 1
            entry.last_used_s = time.monotonic()

    async def invoke(self, target: str, body: bytes, headers: list[tuple[str, str]]) -> Reply:
        """``POST /models/KEY/invoke``: Triton's :class:`~mmelocal.emulator.upstream.Reply`."""
        entry = self.models.get(target)
        key = entry.key if entry is not None else target_key(target)
        return await self.control.invoke(key, target, body, headers)

    @property
    def upstream(self) -> UpstreamPool:
        """The keep-alive connections to this server's SageMaker front end."""
        return self.control.pool

    def connection_error(self, exc: BaseException) -> EmulatorError:
        """The error for a failed connection to Triton. Whether the process died is checked
        by :meth:`check_alive` (off the event loop), which marks
        the instance down when it did (unless a restart replaced that process meanwhile)."""
        running = self._liveness is not None and not self._liveness.done()
        if not running or self._liveness_generation != self.generation:
            check = self.check_alive()
            check.add_done_callback(functools.partial(self._liveness_checked, self.generation))
            self._liveness, self._liveness_generation = check, self.generation
        return InstanceUnavailableError(
            f"instance {self.index}: Triton did not answer ({exc}); if its process died it is "
            "being restarted: retry"
        )

    def _liveness_checked(self, generation: int, check: asyncio.Future[bool]) -> None:
        if generation != self.generation or check.cancelled() or check.exception() is not None:
            return  # the process it checked was replaced: its answer is no news of this one
        if not check.result():
            self.up = False

    async def trim(self) -> None:
        """The watchdog's memory trim (:meth:`~mmelocal.emulator.trim.Trimmer.trim`): evict
        idle models when the loaded set grew over the limit since its loads (frameworks
        allocate more at their first inferences). A retired instance is left alone."""
        await self.trimmer.trim(
            generation=self.generation, taken_out=lambda: self.retired or not self.up
        )

    @property
    def idle_memory_bytes(self) -> int | None:
        """What the server holds beside its models (None before a first reading)."""
        return self.trimmer.idle_memory_bytes

    async def evict_idle(self, *, exclude: str, reason: str) -> bool:
        """Evict the least recently used idle model but ``exclude``, waiting up to
        ``busy_wait_s`` while every other loaded model is busy, as a load's 507 does (a
        busy model is never evicted). False when none went idle."""
        async with self.state.load_lock:
            victim = await self.evictor.idle_victim(exclude=exclude)
            if victim is None:
                return False
            await self.evictor.unload(victim, kind="evict", reason=reason)
            return True

    async def unload(self, target: str, *, reason: str) -> None:
        """Unload ``target`` here when it is idle (used by the router and shutdown)."""
        async with self.state.load_lock:
            entry = self.models.get(target)
            if entry is not None:
                await self.evictor.unload(entry, kind="unload", reason=reason)

    # -- recovery ----------------------------------------------------------------------
    async def restart(self) -> dict[str, float]:
        """Restart a dead server; return the targets that were loaded, and those an
        earlier restart had still to load again (to load again with :meth:`reload`), most
        recently used first, each with its last use. Raises
        InstanceUnavailableError for a retired instance (scale-in took it out)."""
        if self.retired:
            raise InstanceUnavailableError(f"instance {self.index}: retired; not restarted")
        self.up = False
        # not one an eviction was taking out (it made room for another); with what a failed
        # restart before this one had to load again
        lost = {e.target: e.last_used_s for e in self.models.values() if e.state != UNLOADING}
        lost = {**self._to_reload, **lost}
        previous = dict(sorted(lost.items(), key=lambda item: -item[1]))
        self._to_reload = dict(previous)
        died = InstanceUnavailableError(f"instance {self.index}: Triton died; restarting, retry")
        pending: list[asyncio.Future[Any]] = [*self.state.deletes.values(), *self.state.finishing]
        for task in pending:
            task.cancel()
        self.state.deletes.clear()
        for entry in list(self.models.values()):
            if entry.state == READY:
                self.cache.unpin(entry.target)
            if entry.task is not None and not entry.task.done():
                entry.task.cancel()
            if not entry.future.done():
                entry.future.set_exception(died)
        self.models.clear()
        t0 = time.perf_counter()
        await self._process_thread.run(self.launcher.stop)
        await self._start_launcher()
        self.generation += 1
        if self.retired:  # a scale-in stopped it meanwhile: stop what we just started
            await self._process_thread.run(self.launcher.stop)
            raise InstanceUnavailableError(f"instance {self.index}: retired; not restarted")
        endpoints = self.launcher.endpoints
        url = endpoints.sagemaker_url or self.control.url
        self.control.connect(url, endpoints.http_url, bridge=endpoints.bridge)
        self.state.load_lock = asyncio.Lock()
        await self._came_up()
        self.up = True
        self.trimmer.note_idle_memory(await self.read_memory())
        self.events.add(
            "restart",
            "-",
            instance=self.index,
            reason=f"Triton process died; restarted, {len(previous)} model(s) to load again",
            duration_ms=(time.perf_counter() - t0) * 1e3,
        )
        return previous

    def usage_snapshot(self) -> list[dict[str, object]]:
        """The loaded set as plain data (for the JSON state view)."""
        now = time.monotonic()
        return [
            {
                "target": e.target,
                "state": e.state,
                "in_flight": e.in_flight,
                "idle_s": round(now - e.last_used_s, 3),
                "footprint_bytes": e.footprint_bytes,
                "instance": self.index,
            }
            for e in sorted(self.models.values(), key=lambda e: e.last_used_s)
        ]


__all__ = [
    "Acquired",
    "InstanceOptions",
    "InstanceUnavailableError",
    "ModelEntry",
    "ModelNotReadyError",
    "TritonInstance",
]
