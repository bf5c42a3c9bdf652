"""Making room: least-recently-used eviction and unloads that wait for the memory.

:class:`Evictor` frees memory on one instance: plan with
:func:`~mmelocal.emulator.lru.plan_eviction`, unload the victims through Triton's SageMaker
``DELETE``, and wait until the memory gauge shows the memory released before the caller
loads the next model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from mmelocal.emulator.cache import ArtifactCache
from mmelocal.emulator.events import EventLog
from mmelocal.emulator.footprints import released_bytes, remeasure, unload_own_bytes
from mmelocal.emulator.gauge import MemoryGauge
from mmelocal.emulator.lru import eviction_order, plan_eviction
from mmelocal.emulator.metrics import Metrics
from mmelocal.emulator.model_state import READY, UNLOADING, LoadedSet, ModelEntry, quiet_future
from mmelocal.emulator.probes import MemoryReading
from mmelocal.emulator.sagemaker_control import SageMakerControl
from mmelocal.errors import OutOfMemoryError

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, eq=False)
class Evictor:
    """Eviction and unloading on one instance."""

    state: LoadedSet
    control: SageMakerControl
    gauge: MemoryGauge
    cache: ArtifactCache
    metrics: Metrics
    events: EventLog

    async def make_room(
        self, need_bytes: int, *, exclude: str, why: str, strict: bool = True, evict: bool = True
    ) -> MemoryReading:
        """Evict least recently used models until ``need_bytes`` fits under the threshold
        (``evict=False``: evict none; raise OutOfMemoryError when it does not fit)."""
        busy_deadline = time.monotonic() + self.state.options.busy_wait_s
        reading = await self.read()
        #: the DELETEs this load has seen end before its latest reading
        settled: set[asyncio.Future[int]] = set()
        started: list[asyncio.Future[int]] = []
        while True:
            others = self.state.usages(exclude=exclude)
            plan = plan_eviction(
                others,
                used_bytes=reading.used_bytes,
                limit_bytes=self.gauge.limit_bytes,
                need_bytes=need_bytes,
            )
            if not plan.victims and plan.fits:
                return reading
            if not evict:
                raise OutOfMemoryError(
                    f"instance {self.state.index}: no room for {exclude!r} without evicting "
                    f"a model used more recently ({plan.reason})"
                )
            if plan.victims and await self._unloads_settled(started, settled):
                reading = await self.read()  # what they gave back, then plan again
                continue
            if plan.victims:
                for victim in plan.victims:
                    delete = await self.unload(
                        self.state.models[victim], kind="evict", reason=f"{why}: {plan.reason}"
                    )
                    if delete is not None:
                        started.append(delete)
                reading = await self.read()
                continue
            # only a loaded model can become idle while this holds the load lock (a load
            # queued behind it cannot end first)
            loaded_others = [
                e for e in self.state.models.values() if e.target != exclude and e.state == READY
            ]
            if not loaded_others or not strict:
                return reading  # alone: try; Triton's 507 (or the budget check after) decides
            await self._until_changed(exclude, busy_deadline, plan.reason)
            reading = await self.read()

    async def read(self) -> MemoryReading:
        """A fresh reading, with the footprints of the idle models read again from it
        (:meth:`remeasure`): what every plan starts from."""
        reading = await self.gauge.read()
        self.remeasure(reading)
        return reading

    def remeasure(self, reading: MemoryReading) -> None:
        """Read the idle models' footprints again from ``reading``
        (:func:`~mmelocal.emulator.footprints.remeasure`)."""
        remeasure(self.state, reading)

    async def _unloads_settled(
        self, started: list[asyncio.Future[int]], settled: set[asyncio.Future[int]]
    ) -> bool:
        """Wait for the DELETEs in progress and those this load ``started`` that had not
        ended before its latest reading (``settled``, updated), up to ``release_timeout_s``;
        False when there were none. An unload returns once half its footprint is back
        (:meth:`unload`): the rest comes back as its DELETE ends, and a plan made on a
        reading before that evicts one model more than the load needs. The platform's
        unload has ended before its next load (its DELETE is awaited)."""
        unsettled = [d for d in (*self.state.deletes.values(), *started) if d not in settled]
        if not unsettled:
            return False
        settled.update(unsettled)
        pending = [d for d in unsettled if not d.done()]
        if pending:
            await asyncio.wait(pending, timeout=self.state.options.release_timeout_s)
        return True

    def _room_mark(self, exclude: str) -> tuple[object, ...]:
        """What can make room while a load waits, read from the loaded set alone: each
        other model's state and whether it serves or awaits calls, and the unloads still
        finishing (their memory may come back after they were taken out)."""
        models = tuple(
            (e.target, e.state, e.in_flight == 0, e.waiters == 0)
            for e in self.state.models.values()
            if e.target != exclude
        )
        return models, len(self.state.finishing), len(self.state.deletes)

    async def _until_changed(self, exclude: str, deadline_s: float, reason: str) -> None:
        """Wait until the loaded set changed in a way that may make room (a model went
        idle, one left, an unload finished): the cheap state is looked at every 10 ms and
        the memory is read again only after a change, not on every look (a probe reading
        is an NVML call or a walk of Triton's process tree). Raises OutOfMemoryError past
        ``deadline_s`` (``busy_wait_s`` after the load began making room)."""
        mark = self._room_mark(exclude)
        while self._room_mark(exclude) == mark:
            if time.monotonic() > deadline_s:
                raise OutOfMemoryError(
                    f"instance {self.state.index}: no room for {exclude!r} ({reason}) and "
                    f"every loaded model stayed busy for {self.state.options.busy_wait_s:g}s"
                )
            await asyncio.sleep(0.01)

    def lru_victim(self, *, exclude: str) -> ModelEntry | None:
        """The least recently used idle model but ``exclude`` (None when every other one is
        busy): the one more to evict after Triton's 507."""
        order = eviction_order(self.state.usages(), exclude=[exclude])
        return self.state.models[order[0].name] if order else None

    async def idle_victim(self, *, exclude: str) -> ModelEntry | None:
        """:meth:`lru_victim`, waiting up to ``busy_wait_s`` while every other loaded model
        is busy (as :meth:`make_room` does); None when none went idle or none is loaded."""
        deadline = time.monotonic() + self.state.options.busy_wait_s
        while True:
            victim = self.lru_victim(exclude=exclude)
            if victim is not None or not self.busy_others(exclude=exclude):
                return victim
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.01)

    def busy_others(self, *, exclude: str) -> list[ModelEntry]:
        """The loaded models but ``exclude`` that serve calls (none is idle to evict)."""
        return [
            e
            for e in self.state.models.values()
            if e.target != exclude and e.state == READY and not e.usage().evictable
        ]

    async def unload(
        self, entry: ModelEntry, *, kind: str, reason: str
    ) -> asyncio.Future[int] | None:
        """Unload one idle model; return once the probe shows its memory released, with
        its DELETE (None: nothing was unloaded).

        Triton's SageMaker ``DELETE`` checks whether the model is gone every 500 ms and
        pauses once more after the check that finds it gone (``SageMakerMMEUnloadModel``
        in triton-inference-server/server ``src/sagemaker_server.cc``), so it answers 0.5
        to 1 s after the unload ended; the memory is back when the model's processes exit.
        So the next load starts as soon as the probe shows the release (with a known
        footprint), while the ``DELETE`` finishes in the background; a new load of the
        same target waits for it.
        """
        if entry.state != READY or not entry.usage().evictable:
            return None
        # read before the state changes: a cancel here leaves the model READY, not UNLOADING
        before = await self.gauge.read()
        if entry.state != READY or not entry.usage().evictable:
            return None  # it changed while the probe read
        entry.state = UNLOADING
        entry.future = quiet_future()
        t0 = time.perf_counter()
        overlapped = self._others_unloading()
        self.state.changes += 1
        delete = asyncio.ensure_future(self.control.delete(entry))
        self.state.deletes[entry.target] = delete
        after = before
        try:
            after = await self._wait_released(entry, before, delete)
        finally:
            overlapped = overlapped or self._others_unloading(besides=delete)
            if self.state.models.get(entry.target) is entry:
                del self.state.models[entry.target]
            if not entry.future.done():
                entry.future.set_result(None)
            done = asyncio.ensure_future(
                self._finish_unload(entry, delete, t0, (before, after, overlapped), kind, reason)
            )
            self.state.finishing.add(done)
            done.add_done_callback(self.state.finishing.discard)
        return delete

    def _others_unloading(self, besides: asyncio.Future[int] | None = None) -> bool:
        """Whether another unload may give memory back now: a DELETE still running (with
        an undo's) or one whose bookkeeping has not ended."""
        others = [d for d in self.state.deletes.values() if d is not besides and not d.done()]
        return bool(others or self.state.finishing)

    async def _finish_unload(
        self,
        entry: ModelEntry,
        delete: asyncio.Future[int],
        t0: float,
        readings: tuple[MemoryReading, MemoryReading, bool],
        kind: str,
        reason: str,
    ) -> None:
        try:
            status = await delete
        except Exception as exc:
            status = 0
            reason = f"{reason} (DELETE failed: {exc})"
        finally:
            if self.state.deletes.get(entry.target) is delete:
                del self.state.deletes[entry.target]
            self.cache.unpin(entry.target)
        seconds = time.perf_counter() - t0
        before, after, overlapped = readings
        freed = before.used_bytes - after.used_bytes
        own = unload_own_bytes(self.state, entry, before, after, overlapped=overlapped)
        if own is not None and (own > 0 or entry.pids):
            kept = self.state.footprints.get(entry.target)
            self.state.footprints[entry.target] = max(own, kept or 0, entry.footprint_bytes or 0)
            if entry.pids:  # what its processes held before the DELETE; a drop may be half
                self.state.held[entry.target] = own
        self.metrics.observe("ModelUnloadingTime", seconds * 1e6)
        self.metrics.inc("ModelUnloads")
        if kind == "evict":
            self.metrics.inc("ModelEvictions")
        self.events.add(
            kind,
            entry.target,
            instance=self.state.index,
            reason=reason if status in (0, 200) else f"{reason} (Triton answered {status})",
            bytes=own if own is not None else _first_known(entry.footprint_bytes, freed),
            duration_ms=seconds * 1e3,
            memory_used_bytes=after.used_bytes,
        )

    async def _wait_released(
        self, entry: ModelEntry, before: MemoryReading, delete: asyncio.Future[int]
    ) -> MemoryReading:
        """Poll the probe until half the model's own memory is back (its processes', where
        the readings say: another victim's late exit is not this one's release), all its
        processes are gone, or the DELETE is done and the reading stops moving (bounded by
        ``release_timeout_s`` after the DELETE)."""
        deadline: float | None = None
        previous = before.used_bytes
        while True:
            reading = await self.gauge.read()
            released, expected, gone = released_bytes(entry, before, reading)
            if gone or (expected and released >= expected // 2):
                return reading
            if delete.done():
                if delete.exception() is not None:
                    raise delete.exception()  # type: ignore[misc]
                if deadline is None:
                    deadline = time.monotonic() + self.state.options.release_timeout_s
                if not expected and reading.used_bytes == previous:
                    return reading
                if time.monotonic() > deadline:
                    logger.warning(
                        "instance %d: memory not released %.1fs after unload (released %d of "
                        "%s bytes); the framework may keep it",
                        self.state.index,
                        self.state.options.release_timeout_s,
                        released,
                        expected,
                    )
                    return reading
            previous = reading.used_bytes
            await asyncio.sleep(0.02)


def _first_known(*values: int | None) -> int:
    """The first of ``values`` that is not None (0 when none is known)."""
    return next((v for v in values if v is not None), 0)


__all__ = ["Evictor"]
