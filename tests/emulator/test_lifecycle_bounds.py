"""Bounds on what one instance does when it waits (with no server, see lifecycle_fakes):
a stopped instance starts nothing, the platform's load limit covers the whole load, a
busy wait reads memory only when something changed, a retired instance is not trimmed,
and a hot model's copy waits no longer than a load may take."""

from __future__ import annotations

import asyncio
import threading

import pytest
from lifecycle_fakes import MIB, Control, Machine, fake_instance
from shared_helpers import wait_for_async

from mmelocal.emulator.model_state import (
    UNLOADING,
    InstanceOptions,
    InstanceUnavailableError,
    ModelEntry,
)
from mmelocal.emulator.probes import MemoryReading
from mmelocal.emulator.recovery import Watchdog
from mmelocal.emulator.router import Router


class GatedDelete(Control):
    """A DELETE that waits for :attr:`gate`."""

    def __init__(self, machine: Machine) -> None:
        super().__init__(machine, size=100 * MIB)
        self.gate = asyncio.Event()

    async def delete(self, entry: ModelEntry) -> int:
        await self.gate.wait()
        return await super().delete(entry)


def test_a_caller_woken_by_a_stop_starts_no_load() -> None:
    """A call waiting for a model being unloaded when the instance stops is answered the
    retryable InstanceUnavailableError and starts nothing (it woke up, found the model
    gone and started a new load, downloading its artifact, on the stopped instance)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = GatedDelete(machine)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        await inst.start()
        await inst.acquire("m")
        inst.release("m")
        unload = asyncio.ensure_future(inst.unload("m", reason="test"))
        await wait_for_async(lambda: inst.models["m"].state == UNLOADING, timeout_s=30)
        call = asyncio.ensure_future(inst.acquire("m", wait_timeout_s=60.0))
        await wait_for_async(lambda: inst.models["m"].waiters == 1, timeout_s=30)
        ensured = list(inst.cache.ensured)  # type: ignore[attr-defined]

        await inst.stop()
        with pytest.raises(InstanceUnavailableError, match="retry"):
            await asyncio.wait_for(call, timeout=30.0)
        await asyncio.gather(unload, return_exceptions=True)
        assert inst.cache.ensured == ensured  # type: ignore[attr-defined]
        assert [c for c in control.calls if c[0] == "load"] == [("load", "m")]
        assert inst.models == {}
        inst.close()

    asyncio.run(run())


def test_a_trim_under_way_leaves_a_retired_instance_alone() -> None:
    """A scale-in retires the instance while the watchdog's trim reads its memory: the
    trim evicts nothing there (it went on to unload idle models of the instance draining
    for its stop, DELETEs racing the stop)."""

    class Held(Machine):
        def __init__(self) -> None:
            super().__init__(total_bytes=1000 * MIB, base_bytes=900 * MIB)  # over the limit
            self.hold = False
            self.entered = threading.Event()
            self.go_on = threading.Event()

        def read(self) -> MemoryReading:
            if self.hold:
                self.hold = False
                self.entered.set()
                self.go_on.wait(timeout=30)
            return super().read()

    async def run() -> None:
        machine = Held()
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=2000 * MIB)
        await inst.start()
        await inst.acquire("m")
        inst.release("m")
        inst.gauge.limit_override_bytes = 500 * MIB  # the model grew over the limit since
        machine.hold = True
        trim = asyncio.ensure_future(Watchdog([inst])._trim(inst))
        assert await asyncio.to_thread(machine.entered.wait, 30)  # the trim reads
        inst.retired = True  # a scale-in takes it out
        machine.go_on.set()
        await asyncio.wait_for(trim, timeout=30)
        assert ("delete", "m") not in control.calls and inst.loaded() == ["m"]
        await inst.stop()
        inst.close()

    asyncio.run(run())


class GatedLoad(Control):
    """A load that waits for :attr:`gate` (a stub that never starts hangs one so)."""

    def __init__(self, machine: Machine) -> None:
        super().__init__(machine, size=100 * MIB)
        self.gate = asyncio.Event()

    async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        await self.gate.wait()
        return await super().post_load(entry, url_dir)


def test_a_hot_models_copy_waits_no_longer_than_a_load_may_take() -> None:
    """The router's second copy of a hot model waits for its load as long as the platform
    lets a load take (``load_timeout_s``), then gives up and may be tried again (it waited
    with no bound: a load that never ended kept the model from ever being copied)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        options = InstanceOptions(busy_wait_s=0.2, release_timeout_s=1.0, load_timeout_s=0.5)
        first = fake_instance(machine, Control(machine, size=MIB), limit_bytes=500 * MIB)
        control = GatedLoad(Machine(total_bytes=1000 * MIB))
        second = fake_instance(
            control.machine, control, limit_bytes=500 * MIB, options=options, index=1
        )
        await first.start()
        await second.start()
        router = Router([first, second])
        router._replicating["m"] = task = asyncio.ensure_future(
            router._replicate("m", second, 100.0)
        )
        await asyncio.wait_for(asyncio.shield(task), timeout=10.0)
        assert "m" not in router._replicating  # the next hot window may try again
        control.gate.set()
        for inst in (first, second):
            await inst.stop()
            inst.close()

    asyncio.run(run())


class Counted(Machine):
    """Memory whose readings are counted."""

    def __init__(self, *, total_bytes: int) -> None:
        super().__init__(total_bytes=total_bytes)
        self.reads = 0

    def read(self) -> MemoryReading:
        self.reads += 1
        return super().read()


def test_a_load_waiting_for_a_busy_neighbour_reads_memory_only_when_it_went_idle() -> None:
    """A load with no room while the only other model serves a call waits for it to go
    idle (``busy_wait_s``) without reading the memory again until something changed (it
    took a fresh probe reading, an NVML call or a walk of Triton's process tree, every
    10 ms for up to 30 s); once the neighbour is idle it is evicted and the load goes on."""

    async def run() -> None:
        machine = Counted(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        options = InstanceOptions(busy_wait_s=30.0, release_timeout_s=1.0)
        inst = fake_instance(machine, control, limit_bytes=150 * MIB, options=options)
        await inst.start()
        await inst.acquire("old")  # a call in flight on it, for the whole wait
        load = asyncio.ensure_future(inst.acquire("new"))
        await wait_for_async(
            lambda: inst.state.load_lock.locked() and machine.reads >= 2,
            timeout_s=30,
            what="the load to read the memory",
        )
        reads = machine.reads
        await asyncio.sleep(0.3)  # the wait goes on: time passes, nothing changes
        assert machine.reads - reads <= 1 and not load.done()
        inst.release("old")
        await asyncio.wait_for(load, timeout=30.0)
        inst.release("new")
        assert inst.loaded() == ["new"] and ("delete", "old") in control.calls
        await inst.stop()
        inst.close()

    asyncio.run(run())
