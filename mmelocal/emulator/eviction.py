"""Making room: least-recently-used eviction and unloads that wait for the memory.

:class:`EvictionMixin` is the part of :class:`~mmelocal.emulator.instance.TritonInstance`
that frees memory: plan with :func:`~mmelocal.emulator.lru.plan_eviction`, unload the
victims through Triton's SageMaker ``DELETE``, and wait until the memory probe shows the
memory released before the caller loads the next model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import aiohttp

from mmelocal.emulator.entries import READY, UNLOADING, ModelEntry, quiet_future
from mmelocal.emulator.lru import plan_eviction
from mmelocal.emulator.probes import MemoryReading
from mmelocal.errors import OutOfMemoryError
from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER

if TYPE_CHECKING:
    from mmelocal.emulator.cache import ArtifactCache
    from mmelocal.emulator.entries import InstanceOptions
    from mmelocal.emulator.events import EventLog
    from mmelocal.emulator.metrics import Metrics
    from mmelocal.errors import EmulatorError

logger = logging.getLogger(__name__)


class EvictionMixin:
    """Eviction and unloading for :class:`~mmelocal.emulator.instance.TritonInstance`."""

    index: int
    options: InstanceOptions
    models: dict[str, ModelEntry]
    footprints: dict[str, int]
    cache: ArtifactCache
    metrics: Metrics
    events: EventLog
    session: aiohttp.ClientSession | None
    _sm_url: str
    _deletes: dict[str, asyncio.Future[int]]
    _finishing: set[asyncio.Future[None]]

    @property
    def limit_bytes(self) -> int:
        """Memory the loaded set may use (the instance defines it)."""
        raise NotImplementedError

    async def read_memory(self) -> MemoryReading:
        """A fresh probe reading (the instance defines it)."""
        raise NotImplementedError

    def connection_error(self, exc: BaseException) -> EmulatorError:
        """The error for a failed connection to Triton (the instance defines it)."""
        raise NotImplementedError

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
            raise self.connection_error(exc) from exc

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
        entry.future = quiet_future()
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


__all__ = ["EvictionMixin"]
