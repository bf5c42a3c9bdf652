"""The watchdog's memory trim of one instance, and what its idle server holds.

Frameworks allocate more at their first inferences than at their loads, so a loaded set
that fitted can grow over the limit with no load to notice. Every few seconds the watchdog
(:mod:`~mmelocal.emulator.recovery`) has each instance's :class:`Trimmer` read the memory
again (unless nothing happened there since its last reading), read the idle models'
footprints again from that reading (:func:`~mmelocal.emulator.footprints.remeasure`), keep
what the server holds beside its models, and evict least recently used idle models while
the loaded set is over the limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mmelocal.emulator.eviction import Evictor
from mmelocal.emulator.footprints import idle_memory_bytes
from mmelocal.emulator.gauge import MemoryGauge
from mmelocal.emulator.model_state import READY, LoadedSet
from mmelocal.emulator.probes import MemoryReading


@dataclass(kw_only=True, eq=False)
class Trimmer:
    """The trim of one instance, sharing its loaded set, gauge and evictor."""

    state: LoadedSet
    gauge: MemoryGauge
    evictor: Evictor
    #: what the server holds beside its models (see :meth:`note_idle_memory`)
    idle_memory_bytes: int | None = None
    #: what the loaded set looked like at the last reading (None: read again)
    _mark: tuple[int, int, float] | None = field(default=None, init=False)

    async def trim(self, *, generation: int, taken_out: Callable[[], bool]) -> None:
        """Evict idle models when the loaded set grew over the limit since its loads. The
        memory is read again unless the instance stayed idle since the last reading (see
        :meth:`_idle_since_trim`; ``generation`` counts the server processes started):
        then that reading is judged against the limit. Nothing is done for an instance
        ``taken_out`` (down, or retired: a scale-in drains it for its stop), also when it
        was taken out while the memory was read."""
        if taken_out() or self.state.load_lock.locked():
            return
        reading = self.gauge.last_reading
        if reading is None or not self._idle_since_trim(generation):
            reading = await self.gauge.read()
            self.evictor.remeasure(reading)  # what the models grew to at their calls
        self.note_idle_memory(reading)
        if reading.used_bytes <= self.gauge.limit_bytes or self.state.load_lock.locked():
            return  # a load that took the lock meanwhile trims after itself
        if taken_out():
            return
        async with self.state.load_lock:
            await self.evictor.make_room(
                0, exclude="", why="memory grew over the limit", strict=False
            )

    def note_idle_memory(self, reading: MemoryReading) -> None:
        """Keep :attr:`idle_memory_bytes`, what the server holds beside its models, from
        ``reading`` (:func:`~mmelocal.emulator.footprints.idle_memory_bytes`; kept while
        something loads or unloads). The idle server's PSS drifts (the tiny-model
        emulator's read 25.2 MiB at its start, 29.1 MiB with its three models gone), so a
        figure read once at the start overstates a replay's room for models; this follows
        every trim's reading (no work on the invocation path)."""
        idle = idle_memory_bytes(self.state, reading)
        if idle is not None:
            self.idle_memory_bytes = idle

    def _idle_since_trim(self, generation: int) -> bool:
        """True when nothing was loaded, unloaded or served here since the trim's last
        reading and no call is in flight, and the probe reads only this instance's
        processes (a host tree's PSS, which does not grow on an idle server; a GPU's
        memory is the whole device's, which other processes change)."""
        models = self.state.models.values()
        mark = None
        if not any(e.in_flight or e.state != READY for e in models):
            last_use = max((e.last_used_s for e in models), default=0.0)
            mark = (generation, len(self.state.models), last_use)
        idle = mark is not None and mark == self._mark and self.gauge.probe.kind == "host"
        self._mark = mark
        return idle


__all__ = ["Trimmer"]
