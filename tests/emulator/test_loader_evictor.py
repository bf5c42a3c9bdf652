"""The loader and the evictor alone: each built from the parts its constructor names.

No Triton here: the front end's control calls are a small recorder (the HTTP calls
themselves are covered against real Triton in test_endpoint.py and test_trim.py). These
tests pin the sequencing the platform relies on: least recently used goes first, a busy
model is never unloaded, the next load waits until the memory is back, a 507 evicts one
more model and retries.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mmelocal.emulator.events import EventLog
from mmelocal.emulator.eviction import Evictor
from mmelocal.emulator.gauge import MemoryGauge
from mmelocal.emulator.loading import Loader
from mmelocal.emulator.metrics import Metrics
from mmelocal.emulator.model_state import READY, InstanceOptions, LoadedSet, ModelEntry
from mmelocal.emulator.probes import MemoryReading
from mmelocal.errors import OutOfMemoryError

MIB = 2**20


class Machine:
    """Memory that follows the loads and unloads the control calls make."""

    def __init__(self, *, total_bytes: int, base_bytes: int = 0) -> None:
        self.total_bytes = total_bytes
        self.resident: dict[str, int] = {}
        self.base_bytes = base_bytes
        self.name = "test"
        self.kind = "host"

    def read(self) -> MemoryReading:
        used = self.base_bytes + sum(self.resident.values())
        return MemoryReading(used_bytes=used, total_bytes=self.total_bytes)


class Control:
    """Records the control calls; a load adds ``size`` bytes, a DELETE frees them."""

    def __init__(self, machine: Machine, *, size: int, answers: list[int] | None = None) -> None:
        self.machine = machine
        self.size = size
        self.answers = answers or []
        self.calls: list[tuple[str, str]] = []

    async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        self.calls.append(("load", entry.target))
        status = self.answers.pop(0) if self.answers else 200
        if status == 200:
            self.machine.resident[entry.target] = self.size
        return status, "" if status == 200 else "CUDA out of memory"

    async def delete(self, entry: ModelEntry) -> int:
        self.calls.append(("delete", entry.target))
        self.machine.resident.pop(entry.target, None)
        return 200


class Cache:
    """The artifact cache's part the loader uses: ensure, pin, unpin."""

    def __init__(self) -> None:
        self.pinned: set[str] = set()
        self.store = SimpleNamespace(description="test store")

    def ensure(self, target: str, prepare: Any = None) -> Any:
        artifact = SimpleNamespace(serve_dir=Path("/models") / target, size_bytes=1)
        return SimpleNamespace(downloaded=False, artifact=artifact)

    def pin(self, target: str) -> None:
        self.pinned.add(target)

    def unpin(self, target: str) -> None:
        self.pinned.discard(target)


def parts(machine: Machine, control: Control, *, limit_bytes: int) -> tuple[Loader, LoadedSet]:
    state = LoadedSet(index=0, options=InstanceOptions(busy_wait_s=0.2, release_timeout_s=1.0))
    state.up = True
    gauge = MemoryGauge(machine, threshold=0.9)
    gauge.limit_override_bytes = limit_bytes
    evictor = Evictor(
        state=state,
        control=control,
        gauge=gauge,
        cache=Cache(),
        metrics=Metrics(),
        events=EventLog(),
    )
    return Loader(evictor=evictor), state


async def load(loader: Loader, target: str) -> ModelEntry:
    entry = loader.new_entry(target)
    await loader.load(entry)
    await entry.future
    return entry


def test_loads_until_the_limit_then_evicts_the_least_recently_used() -> None:
    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        control = Control(machine, size=100 * MIB)
        loader, state = parts(machine, control, limit_bytes=400 * MIB)
        for name in ("a", "b", "c"):
            entry = await load(loader, name)
            assert entry.state == READY
            assert entry.footprint_bytes == 100 * MIB
        state.models["a"].last_used_s = time.monotonic()  # "b" is now the least recent
        await load(loader, "d")
        assert control.calls[-2:] == [("delete", "b"), ("load", "d")]
        assert sorted(state.models) == ["a", "c", "d"]
        assert state.footprints["b"] == 100 * MIB
        evictions = loader.events.recent("evict")
        assert [(e.target, e.bytes) for e in evictions] == [("b", 100 * MIB)]
        assert machine.read().used_bytes <= 400 * MIB

    asyncio.run(run())


def test_a_busy_model_is_never_evicted() -> None:
    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        loader, state = parts(machine, control, limit_bytes=250 * MIB)
        await load(loader, "busy")
        await load(loader, "idle")
        state.models["busy"].in_flight = 1
        state.models["busy"].last_used_s = 0.0  # least recent, but serving a request
        await load(loader, "new")
        assert ("delete", "busy") not in control.calls
        assert ("delete", "idle") in control.calls

    asyncio.run(run())


def test_507_evicts_one_more_and_retries_then_gives_up_alone() -> None:
    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        loader, state = parts(machine, control, limit_bytes=900 * MIB)
        await load(loader, "old")
        control.answers = [507, 200]
        await load(loader, "new")
        assert control.calls[-3:] == [("load", "new"), ("delete", "old"), ("load", "new")]
        assert list(state.models) == ["new"]

        control.answers = [507]
        entry = loader.new_entry("huge")
        state.models["new"].in_flight = 1  # nothing evictable is left
        await loader.load(entry)
        with pytest.raises(OutOfMemoryError, match="--memory-budget"):
            await entry.future
        assert "huge" not in state.models

    asyncio.run(run())
