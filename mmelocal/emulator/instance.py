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
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from mmelocal.emulator.cache import ArtifactCache, Prepare, target_key
from mmelocal.emulator.events import EventLog
from mmelocal.emulator.lru import ModelUsage, estimate_footprint, plan_eviction
from mmelocal.emulator.metrics import Metrics
from mmelocal.emulator.probes import MemoryProbe, MemoryReading
from mmelocal.emulator.upstream import UpstreamError, UpstreamPool
from mmelocal.errors import (
    EmulatorError,
    ModelLoadError,
    OutOfMemoryError,
    UserInputError,
)
from mmelocal.runtime.launcher import TritonLauncher
from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER, load_body

logger = logging.getLogger(__name__)

LOADING, READY, UNLOADING = "loading", "ready", "unloading"


class ModelNotReadyError(EmulatorError):
    """The cold load takes longer than the caller may wait; it goes on in the background."""

    def __init__(self, message: str, *, target_model: str) -> None:
        super().__init__(message)
        self.target_model = target_model


class InstanceUnavailableError(EmulatorError):
    """The Triton process is down or restarting: retry shortly (answered as 503)."""


@dataclass(frozen=True, kw_only=True)
class InstanceOptions:
    """Tuning of one instance (times in seconds, memory threshold as a fraction)."""

    memory_threshold: float = 0.9
    load_timeout_s: float = 300.0
    unload_timeout_s: float = 360.0
    release_timeout_s: float = 5.0
    busy_wait_s: float = 30.0
    oom_retries: int = 8

    def __post_init__(self) -> None:
        if not 0.0 < self.memory_threshold <= 1.0:
            raise UserInputError(f"memory_threshold must be in (0, 1], got {self.memory_threshold}")
        for name in ("load_timeout_s", "unload_timeout_s", "release_timeout_s", "busy_wait_s"):
            if getattr(self, name) <= 0:
                raise UserInputError(f"{name} must be > 0, got {getattr(self, name)}")


@dataclass
class ModelEntry:
    """One model in this instance's loaded set."""

    target: str
    key: str
    state: str
    last_used_s: float
    future: asyncio.Future[None]
    in_flight: int = 0
    waiters: int = 0
    footprint_bytes: int | None = None
    loaded_at_s: float = 0.0
    task: asyncio.Future[None] | None = None

    def usage(self) -> ModelUsage:
        """The plain-data view the eviction policy works on."""
        return ModelUsage(
            name=self.target,
            last_used_s=self.last_used_s,
            footprint_bytes=self.footprint_bytes,
            in_flight=self.in_flight,
            pinned=self.waiters > 0 or self.state != READY,
        )


@dataclass(frozen=True, kw_only=True)
class Acquired:
    """What :meth:`TritonInstance.acquire` did: hit or cold load, and the time spent."""

    cache_hit: bool
    wait_s: float = 0.0


class TritonInstance:
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
        entry = self.models.get(target)
        if entry is not None and entry.state == READY and self.up:
            entry.in_flight += 1
            entry.last_used_s = time.monotonic()
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
        try:
            status, out_headers, data = await self._upstream.request(
                "POST", f"/models/{key}/invoke", headers, body
            )
        except UpstreamError as exc:
            raise self._connection_error(exc) from exc
        return status, data, out_headers

    def _connection_error(self, exc: BaseException) -> EmulatorError:
        if not self.launcher.is_alive():
            self.up = False
            return InstanceUnavailableError(
                f"instance {self.index}: Triton died ({exc}); it is being restarted, retry"
            )
        return InstanceUnavailableError(f"instance {self.index}: Triton did not answer ({exc})")

    # -- loading -----------------------------------------------------------------------
    def _new_entry(self, target: str) -> ModelEntry:
        entry = ModelEntry(
            target=target,
            key=target_key(target),
            state=LOADING,
            last_used_s=time.monotonic(),
            future=_quiet_future(),
            footprint_bytes=self.footprints.get(target),
        )
        self.models[target] = entry
        return entry

    async def _load(self, entry: ModelEntry) -> None:
        """Run one load; its outcome goes to ``entry.future`` (what every caller awaits)."""
        try:
            await self._load_inner(entry)
        except BaseException as exc:
            if self.models.get(entry.target) is entry:
                del self.models[entry.target]
            if not entry.future.done():
                if isinstance(exc, asyncio.CancelledError):
                    exc = InstanceUnavailableError(f"instance {self.index}: load interrupted")
                entry.future.set_exception(exc)
            return
        if not entry.future.done():
            entry.future.set_result(None)

    async def _load_inner(self, entry: ModelEntry) -> None:
        loop = asyncio.get_running_loop()
        fetch = await loop.run_in_executor(
            None, lambda: self.cache.ensure(entry.target, prepare=self.prepare)
        )
        if fetch.downloaded:
            seconds = fetch.download_s + fetch.extract_s + fetch.prepare_s
            self.metrics.observe("ModelDownloadingTime", seconds * 1e6)
            self.events.add(
                "download",
                entry.target,
                instance=self.index,
                reason=f"not on disk; from {self.cache.store.description}",
                bytes=fetch.artifact.size_bytes,
                duration_ms=seconds * 1e3,
                detail={
                    "download_s": fetch.download_s,
                    "extract_s": fetch.extract_s,
                    "prepare_s": fetch.prepare_s,
                    "compressed_bytes": float(fetch.compressed_bytes),
                },
            )
        async with self._load_lock:
            if not self.up:
                raise InstanceUnavailableError(f"instance {self.index} is restarting; retry")
            self.cache.pin(entry.target)
            try:
                await self._load_locked(entry, self.url_for(fetch.artifact.serve_dir))
            except BaseException:
                self.cache.unpin(entry.target)
                raise
        entry.state = READY
        entry.loaded_at_s = time.monotonic()

    def _need_bytes(self, entry: ModelEntry) -> int:
        if entry.footprint_bytes:
            return entry.footprint_bytes
        if self.footprints:
            return int(sum(self.footprints.values()) / len(self.footprints))
        return estimate_footprint(e.usage() for e in self.models.values())

    async def _make_room(
        self, need_bytes: int, *, exclude: str, why: str, strict: bool = True
    ) -> MemoryReading:
        """Evict least recently used models until ``need_bytes`` fits under the threshold."""
        busy_deadline = time.monotonic() + self.options.busy_wait_s
        while True:
            reading = await self.read_memory()
            others = [e.usage() for e in self.models.values() if e.target != exclude]
            plan = plan_eviction(
                others,
                used_bytes=reading.used_bytes,
                limit_bytes=self.limit_bytes,
                need_bytes=need_bytes,
            )
            if not plan.victims and plan.fits:
                return reading
            if plan.victims:
                for victim in plan.victims:
                    await self._unload(
                        self.models[victim], kind="evict", reason=f"{why}: {plan.reason}"
                    )
                continue
            loaded_others = [e for e in self.models.values() if e.target != exclude]
            if not loaded_others or not strict:
                return reading  # alone: try; Triton's 507 (or the budget check after) decides
            if time.monotonic() > busy_deadline:
                raise OutOfMemoryError(
                    f"instance {self.index}: no room for {exclude!r} ({plan.reason}) and every "
                    f"loaded model stayed busy for {self.options.busy_wait_s:g}s"
                )
            await asyncio.sleep(0.01)

    async def _load_locked(self, entry: ModelEntry, url_dir: str) -> None:
        pending = self._deletes.get(entry.target)
        if pending is not None:
            await asyncio.wait([pending])  # Triton still holds this name until its DELETE ends
        need = self._need_bytes(entry)
        before = await self._make_room(need, exclude=entry.target, why=f"load {entry.target}")
        attempts = 0
        while True:
            t0 = time.perf_counter()
            status, text = await self._post_load(entry, url_dir)
            seconds = time.perf_counter() - t0
            if status == 200 or status == 409:
                break
            if status == 507 and attempts < self.options.oom_retries:
                attempts += 1
                victims = [e for e in self.loaded() if self.models[e].usage().evictable]
                victims = [v for v in victims if v != entry.target]
                if victims:
                    await self._unload(
                        self.models[victims[0]],
                        kind="evict",
                        reason=f"Triton answered 507 loading {entry.target}: {text[:200]}",
                    )
                    before = await self.read_memory()
                    continue
            self.events.add("error", entry.target, instance=self.index, reason=text[:300])
            if status == 507:
                raise OutOfMemoryError(
                    f"TargetModel {entry.target!r} does not fit in memory even with nothing "
                    f"else loaded: {text}"
                )
            raise ModelLoadError(
                f"Triton could not load {entry.target!r} (HTTP {status}): {text}",
                model_name=entry.target,
                triton_message=text,
                status_code=status,
            )
        after = await self.read_memory()
        grown = after.used_bytes - before.used_bytes
        if grown > 0:
            entry.footprint_bytes = max(grown, entry.footprint_bytes or 0)
            self.footprints[entry.target] = entry.footprint_bytes
        self.metrics.observe("ModelLoadingTime", seconds * 1e6)
        self.metrics.inc("ModelLoads")
        self.events.add(
            "load",
            entry.target,
            instance=self.index,
            reason=f"cold call ({len(self.models)} model(s) here)",
            bytes=entry.footprint_bytes,
            duration_ms=seconds * 1e3,
            memory_used_bytes=after.used_bytes,
        )
        if after.used_bytes > self.limit_bytes:
            await self._make_room(
                0, exclude=entry.target, why=f"over the limit after {entry.target}", strict=False
            )

    async def _post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        assert self.session is not None
        try:
            async with self.session.post(
                f"{self._sm_url}/models",
                data=load_body(entry.key, url_dir),
                headers={TARGET_MODEL_HEADER: entry.target, "Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self.options.load_timeout_s),
            ) as resp:
                return resp.status, await resp.text()
        except asyncio.TimeoutError as exc:
            await self._delete(entry)
            raise ModelLoadError(
                f"Triton did not finish loading {entry.target!r} within "
                f"{self.options.load_timeout_s:g}s (a stub that cannot start hangs the load; "
                f"see {self.launcher.log_path})",
                model_name=entry.target,
            ) from exc
        except aiohttp.ClientError as exc:
            raise self._connection_error(exc) from exc

    async def _delete(self, entry: ModelEntry) -> int:
        assert self.session is not None
        try:
            async with self.session.delete(
                f"{self._sm_url}/models/{entry.key}",
                headers={TARGET_MODEL_HEADER: entry.target},
                timeout=aiohttp.ClientTimeout(total=self.options.unload_timeout_s),
            ) as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise self._connection_error(exc) from exc

    async def _unload(self, entry: ModelEntry, *, kind: str, reason: str) -> None:
        """Unload one idle model; return once the probe shows its memory released.

        Triton's SageMaker ``DELETE`` answers only after a fixed poll pause (about 2 s)
        even when the model went away at once; the memory is usually back long before.
        So the next load starts as soon as the probe shows the release (with a known
        footprint), while the ``DELETE`` finishes in the background; a new load of the
        same target waits for it.
        """
        if entry.state != READY or not entry.usage().evictable:
            return
        entry.state = UNLOADING
        entry.future = _quiet_future()
        before = await self.read_memory()
        t0 = time.perf_counter()
        delete = asyncio.ensure_future(self._delete(entry))
        self._deletes[entry.target] = delete
        after = before
        try:
            after = await self._wait_released(before, entry.footprint_bytes, delete)
        finally:
            if self.models.get(entry.target) is entry:
                del self.models[entry.target]
            if not entry.future.done():
                entry.future.set_result(None)
            done = asyncio.ensure_future(
                self._finish_unload(entry, delete, t0, before, after, kind, reason)
            )
            self._finishing.add(done)
            done.add_done_callback(self._finishing.discard)

    async def _finish_unload(
        self,
        entry: ModelEntry,
        delete: asyncio.Future[int],
        t0: float,
        before: MemoryReading,
        after: MemoryReading,
        kind: str,
        reason: str,
    ) -> None:
        try:
            status = await delete
        except Exception as exc:
            status = 0
            reason = f"{reason} (DELETE failed: {exc})"
        finally:
            if self._deletes.get(entry.target) is delete:
                del self._deletes[entry.target]
            self.cache.unpin(entry.target)
        seconds = time.perf_counter() - t0
        freed = before.used_bytes - after.used_bytes
        if freed > 0:
            self.footprints[entry.target] = max(freed, entry.footprint_bytes or 0)
        self.metrics.observe("ModelUnloadingTime", seconds * 1e6)
        self.metrics.inc("ModelUnloads")
        if kind == "evict":
            self.metrics.inc("ModelEvictions")
        self.events.add(
            kind,
            entry.target,
            instance=self.index,
            reason=reason if status in (0, 200) else f"{reason} (Triton answered {status})",
            bytes=freed,
            duration_ms=seconds * 1e3,
            memory_used_bytes=after.used_bytes,
        )

    async def _wait_released(
        self, before: MemoryReading, expected: int | None, delete: asyncio.Future[int]
    ) -> MemoryReading:
        """Poll the probe until half the footprint is back, or the DELETE is done and the
        reading stops moving (bounded by ``release_timeout_s`` after the DELETE)."""
        deadline: float | None = None
        previous = before.used_bytes
        while True:
            reading = await self.read_memory()
            dropped = before.used_bytes - reading.used_bytes
            if expected and dropped >= expected // 2:
                return reading
            if delete.done():
                if delete.exception() is not None:
                    raise delete.exception()  # type: ignore[misc]
                if deadline is None:
                    deadline = time.monotonic() + self.options.release_timeout_s
                if not expected and reading.used_bytes == previous:
                    return reading
                if time.monotonic() > deadline:
                    logger.warning(
                        "instance %d: memory not released %.1fs after unload (dropped %d of %s "
                        "bytes); the framework may keep it",
                        self.index,
                        self.options.release_timeout_s,
                        dropped,
                        expected,
                    )
                    return reading
            previous = reading.used_bytes
            await asyncio.sleep(0.02)

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


def _quiet_future() -> asyncio.Future[None]:
    """A future whose exception counts as retrieved even when no caller is left waiting."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future


__all__ = [
    "Acquired",
    "InstanceOptions",
    "InstanceUnavailableError",
    "ModelEntry",
    "ModelNotReadyError",
    "TritonInstance",
]
