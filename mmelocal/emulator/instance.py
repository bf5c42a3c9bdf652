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
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp

from mmelocal.emulator.cache import ArtifactCache, Prepare, target_key
from mmelocal.emulator.entries import (
    READY,
    Acquired,
    InstanceOptions,
    InstanceUnavailableError,
    ModelEntry,
    ModelNotReadyError,
)
from mmelocal.emulator.events import EventLog
from mmelocal.emulator.loading import LoadingMixin
from mmelocal.emulator.metrics import Metrics
from mmelocal.emulator.probes import MemoryProbe, MemoryReading
from mmelocal.emulator.upstream import UpstreamError, UpstreamPool, UpstreamTimeoutError
from mmelocal.errors import EmulatorError
from mmelocal.runtime.launcher import TritonLauncher
from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER

logger = logging.getLogger(__name__)


def late_reply(timeout_s: float) -> tuple[int, bytes, dict[str, str]]:
    """Triton's answer came later than the limit: as SageMaker, a 504 the caller gets as a
    ModelError."""
    message = f"the model did not answer within {timeout_s:g}s (SageMaker's limit is 60 s)"
    return 504, json.dumps({"error": message}).encode(), {"content-type": "application/json"}


class TritonInstance(LoadingMixin):
    """The loaded set and the load/unload/invoke calls of one Triton server."""

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
    ) -> None:
        self.index = index
        self.launcher = launcher
        self.probe = probe
        self.cache = cache
        self.metrics = metrics
        self.events = events
        self.options = options or InstanceOptions()
        self.prepare = prepare
        #: the artifact folder as the server sees it (a container mounts the cache elsewhere)
        self.url_for: Callable[[Path], str] = str
        self.models: dict[str, ModelEntry] = {}
        self.footprints: dict[str, int] = {}
        self.last_reading: MemoryReading | None = None
        #: an absolute memory limit in bytes instead of threshold x total (demos, tests)
        self.limit_override_bytes: int | None = None
        self.up = False
        self.session: aiohttp.ClientSession | None = None
        self._sm_url = ""
        self._upstream = UpstreamPool("http://127.0.0.1:0")
        self._load_lock = asyncio.Lock()
        self._deletes: dict[str, asyncio.Future[int]] = {}
        self._finishing: set[asyncio.Future[None]] = set()
        # start/stop from one long-lived thread (the launcher ties the server's life to it)
        self._process_thread = ThreadPoolExecutor(1, thread_name_prefix=f"triton-{index}")

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, session: aiohttp.ClientSession) -> None:
        """Start (or adopt) the server and take a first memory reading."""
        self.session = session
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._process_thread, self.launcher.start)
        url = self.launcher.endpoints.sagemaker_url
        if url is None:
            raise EmulatorError(
                f"instance {self.index}: the Triton server has no SageMaker front end; start "
                "it with --allow-sagemaker=true and SAGEMAKER_MULTI_MODEL=true"
            )
        self._sm_url = url
        self._upstream = UpstreamPool(url)
        self.up = True
        await self.read_memory()

    async def stop(self) -> None:
        """Stop the server (idempotent)."""
        self.up = False
        self._upstream.close()
        pending: list[asyncio.Future[Any]] = [*self._deletes.values(), *self._finishing]
        pending += [e.task for e in self.models.values() if e.task is not None]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._process_thread, self.launcher.stop)

    def close(self) -> None:
        """Release the process thread (after :meth:`stop`)."""
        self._process_thread.shutdown(wait=False)

    async def read_memory(self) -> MemoryReading:
        """A fresh probe reading (in an executor)."""
        reading = await asyncio.get_running_loop().run_in_executor(None, self.probe.read)
        self.last_reading = reading
        return reading

    @property
    def limit_bytes(self) -> int:
        """Memory the loaded set may use: threshold x total (or the override when set)."""
        if self.limit_override_bytes is not None:
            return self.limit_override_bytes
        total = self.last_reading.total_bytes if self.last_reading else 0
        return max(1, int(self.options.memory_threshold * total))

    @property
    def free_bytes(self) -> int:
        """Room left under the threshold at the last reading."""
        used = self.last_reading.used_bytes if self.last_reading else 0
        return self.limit_bytes - used

    def is_ready(self, target: str) -> bool:
        """True when ``target`` is loaded and servable here."""
        entry = self.models.get(target)
        return entry is not None and entry.state == READY

    def loaded(self) -> list[str]:
        """Targets loaded here, least recently used first."""
        ready = [e for e in self.models.values() if e.state == READY]
        return [e.target for e in sorted(ready, key=lambda e: e.last_used_s)]

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
                entry = self._new_entry(target)
                entry.task = asyncio.ensure_future(self._load(entry))
            entry.waiters += 1
            try:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                await asyncio.wait_for(asyncio.shield(entry.future), timeout=remaining)
            except asyncio.TimeoutError:
                raise ModelNotReadyError(
                    f"TargetModel {target!r} is still loading after {wait_timeout_s:g}s; "
                    "the load goes on: retry shortly",
                    target_model=target,
                ) from None
            finally:
                entry.waiters -= 1

    def hold_ready(self, target: str) -> bool:
        """Count one request in flight when ``target`` is loaded here and the server is up
        (pair with :meth:`release`); False, holding nothing, otherwise."""
        entry = self.models.get(target)
        if entry is None or entry.state != READY or not self.up:
            return False
        entry.in_flight += 1
        entry.last_used_s = time.monotonic()
        return True

    def release(self, target: str) -> None:
        """One request for ``target`` finished."""
        entry = self.models.get(target)
        if entry is not None and entry.in_flight > 0:
            entry.in_flight -= 1
            entry.last_used_s = time.monotonic()

    async def invoke(
        self, target: str, body: bytes, headers: list[tuple[str, str]]
    ) -> tuple[int, bytes, dict[str, str]]:
        """``POST /models/KEY/invoke``: Triton's status, body and (lower-cased) headers."""
        entry = self.models.get(target)
        key = entry.key if entry is not None else target_key(target)
        headers.append((TARGET_MODEL_HEADER, target))
        timeout_s = self.options.invoke_timeout_s
        try:
            status, out_headers, data = await self._upstream.request(
                "POST", f"/models/{key}/invoke", headers, body, timeout_s=timeout_s
            )
        except UpstreamTimeoutError:
            return late_reply(timeout_s)
        except UpstreamError as exc:
            raise self.connection_error(exc) from exc
        return status, data, out_headers

    @property
    def upstream(self) -> UpstreamPool:
        """The keep-alive connections to this server's SageMaker front end."""
        return self._upstream

    def connection_error(self, exc: BaseException) -> EmulatorError:
        """The error for a failed connection to Triton (marks the instance down when the
        process died)."""
        if not self.launcher.is_alive():
            self.up = False
            return InstanceUnavailableError(
                f"instance {self.index}: Triton died ({exc}); it is being restarted, retry"
            )
        return InstanceUnavailableError(f"instance {self.index}: Triton did not answer ({exc})")

    async def trim(self) -> None:
        """Evict idle models when the loaded set grew over the limit since its loads
        (frameworks allocate more at their first inferences)."""
        if not self.up or self._load_lock.locked():
            return
        reading = await self.read_memory()
        if reading.used_bytes <= self.limit_bytes:
            return
        async with self._load_lock:
            await self._make_room(0, exclude="", why="memory grew over the limit", strict=False)

    async def unload(self, target: str, *, reason: str) -> None:
        """Unload ``target`` here when it is idle (used by the router and shutdown)."""
        async with self._load_lock:
            entry = self.models.get(target)
            if entry is not None:
                await self._unload(entry, kind="unload", reason=reason)

    # -- recovery ----------------------------------------------------------------------
    async def restart(self) -> list[str]:
        """Restart a dead server; return the targets that were loaded (to load again)."""
        self.up = False
        previous = [e.target for e in sorted(self.models.values(), key=lambda e: -e.last_used_s)]
        died = InstanceUnavailableError(f"instance {self.index}: Triton died; restarting, retry")
        pending: list[asyncio.Future[Any]] = [*self._deletes.values(), *self._finishing]
        for task in pending:
            task.cancel()
        self._deletes.clear()
        for entry in list(self.models.values()):
            if entry.state == READY:
                self.cache.unpin(entry.target)
            if entry.task is not None and not entry.task.done():
                entry.task.cancel()
            if not entry.future.done():
                entry.future.set_exception(died)
        self.models.clear()
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        await loop.run_in_executor(self._process_thread, self.launcher.stop)
        await loop.run_in_executor(self._process_thread, self.launcher.start)
        url = self.launcher.endpoints.sagemaker_url
        self._sm_url = url or self._sm_url
        self._upstream.close()
        self._upstream = UpstreamPool(self._sm_url)
        self._load_lock = asyncio.Lock()
        self.up = True
        await self.read_memory()
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
    "late_reply",
]
