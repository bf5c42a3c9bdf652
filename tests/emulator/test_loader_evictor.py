"""The loader and the evictor alone: each built from the parts its constructor names.

No Triton here: the front end's control calls are a small recorder (the HTTP calls
themselves are covered against real Triton in test_endpoint.py and test_trim.py). These
tests pin the sequencing the platform relies on: least recently used goes first, a busy
model is never unloaded, the next load waits until the memory is back, a 507 evicts one
more model and retries.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lifecycle_fakes import MIB, Cache, Control, Machine, StubMachine, TorchCache
from shared_helpers import StandInNvml

from mmelocal.emulator.events import EventLog
from mmelocal.emulator.eviction import Evictor
from mmelocal.emulator.gauge import MemoryGauge
from mmelocal.emulator.loading import Loader
from mmelocal.emulator.metrics import Metrics
from mmelocal.emulator.model_state import READY, InstanceOptions, LoadedSet, ModelEntry
from mmelocal.emulator.probes import MemoryReading, NvmlProbe
from mmelocal.errors import OutOfMemoryError


def parts(
    machine: Machine,
    control: Control,
    *,
    limit_bytes: int,
    options: InstanceOptions | None = None,
) -> tuple[Loader, LoadedSet]:
    options = options or InstanceOptions(busy_wait_s=0.2, release_timeout_s=1.0)
    state = LoadedSet(index=0, options=options)
    state.up = True
    gauge = MemoryGauge(machine, threshold=0.9)
    gauge.limit_override_bytes = limit_bytes
    evictor = Evictor(
        state=state,
        control=control,  # type: ignore[arg-type]  # fakes with what Evictor calls
        gauge=gauge,
        cache=Cache(),  # type: ignore[arg-type]
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


def test_an_unload_cancelled_while_the_probe_reads_leaves_the_model_ready() -> None:
    """A client that goes away mid-recovery cancels the unload; the model stays servable
    (it used to stay UNLOADING for good, and later calls waited, then got 429)."""

    class SlowMachine(Machine):
        def __init__(self) -> None:
            super().__init__(total_bytes=1000 * MIB)
            self.hold = False
            self.entered = threading.Event()
            self.go_on = threading.Event()

        def read(self) -> MemoryReading:
            if self.hold:
                self.entered.set()
                self.go_on.wait(timeout=30)
            return super().read()

    async def run() -> None:
        machine = SlowMachine()
        control = Control(machine, size=100 * MIB)
        loader, state = parts(machine, control, limit_bytes=400 * MIB)
        entry = await load(loader, "a")
        machine.hold = True
        unload = asyncio.ensure_future(loader.evictor.unload(entry, kind="evict", reason="t"))
        assert await asyncio.to_thread(machine.entered.wait, 30)
        unload.cancel()
        with pytest.raises(asyncio.CancelledError):
            await unload
        machine.hold = False
        machine.go_on.set()
        assert entry.state == READY and state.models["a"] is entry
        assert ("delete", "a") not in control.calls
        await loader.evictor.unload(entry, kind="evict", reason="t")  # and it still unloads
        assert ("delete", "a") in control.calls
        assert "a" not in state.models

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


class SharedRuntimeMachine(Machine):
    """Each model is a stub process holding ``own`` bytes of its own; while any model of
    the framework is loaded, its shared runtime (``runtime`` bytes) is counted once more
    (PSS: the pages every stub maps). Readings carry per-process figures, as the host
    probe's do."""

    def __init__(self, *, total_bytes: int, base_bytes: int, runtime_bytes: int) -> None:
        super().__init__(total_bytes=total_bytes, base_bytes=base_bytes)
        self.runtime_bytes = runtime_bytes

    def read(self) -> MemoryReading:
        runtime = self.runtime_bytes if self.resident else 0
        pids = {1: self.base_bytes}
        pids.update({100 + sorted(self.resident).index(t): b for t, b in self.resident.items()})
        return MemoryReading(
            used_bytes=self.base_bytes + runtime + sum(self.resident.values()),
            total_bytes=self.total_bytes,
            server_pid=1,
            per_process_bytes=pids,
        )


def test_a_frameworks_runtime_is_reserved_once(tmp_path: Path) -> None:
    """The first TorchScript model's load brings libtorch (the runtime) beside its own
    memory: its footprint is its own part, the runtime is kept per framework, and the
    planner never evicts while used memory plus the next model's own footprint fits."""

    async def run() -> None:
        own, runtime, base = 100 * MIB, 250 * MIB, 50 * MIB
        machine = SharedRuntimeMachine(
            total_bytes=2000 * MIB, base_bytes=base, runtime_bytes=runtime
        )
        control = Control(machine, size=own)
        loader, state = parts(machine, control, limit_bytes=base + runtime + 4 * own)
        loader.cache = loader.evictor.cache = TorchCache(tmp_path)  # type: ignore[assignment]
        for name in ("a", "b", "c", "d"):
            entry = await load(loader, name)
            assert entry.framework == "pytorch_libtorch"
            assert entry.footprint_bytes == own, name  # the runtime is not the model's
        assert state.runtimes == {"pytorch_libtorch": runtime}
        loads = loader.events.recent("load")
        assert [(e.detail or {}).get("runtime_bytes") for e in loads] == [runtime, None, None, None]
        assert not [c for c in control.calls if c[0] == "delete"], control.calls
        assert sorted(state.models) == ["a", "b", "c", "d"]
        # one more does not fit: exactly one eviction, the least recently used
        await load(loader, "e")
        assert [c for c in control.calls if c[0] == "delete"] == [("delete", "a")]
        # the last model of the framework takes the runtime with it: the policy counts it
        usages = {u.name: u for u in state.usages()}
        assert all(u.runtime_bytes == 0 for u in usages.values())
        for name in ("b", "c", "d"):
            await loader.evictor.unload(state.models[name], kind="unload", reason="test")
        (last,) = state.usages()
        assert last.name == "e" and last.runtime_bytes == runtime

    asyncio.run(run())


def test_a_load_queued_behind_another_does_not_count_as_a_busy_model() -> None:
    """A model that fits only alone loads alone, also while another cold call's load waits
    for its turn (that load cannot end before this one: waiting for it was a pause of
    ``busy_wait_s``, then OutOfMemoryError)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB, base_bytes=60 * MIB)
        control = Control(machine, size=100 * MIB)
        loader, state = parts(machine, control, limit_bytes=150 * MIB)
        await load(loader, "a")  # alone, over the limit: loaded all the same
        b, c = loader.new_entry("b"), loader.new_entry("c")
        loads = [asyncio.ensure_future(loader.load(e)) for e in (b, c)]
        await asyncio.gather(*loads)
        await b.future
        await c.future
        assert c.state == READY and list(state.models) == ["c"]  # b loaded, then gave way
        assert control.calls == [
            ("load", "a"),
            ("delete", "a"),
            ("load", "b"),
            ("delete", "b"),
            ("load", "c"),
        ]

    asyncio.run(run())


def test_507_waits_for_a_busy_model_to_go_idle_then_evicts_it() -> None:
    """Triton answers 507 while every other model serves a call: the load waits for one to
    go idle, as make_room does, evicts it and retries (it failed at once, advising more
    memory because the model did not fit 'even with nothing else loaded')."""

    class Busy(Control):
        async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
            status, text = await super().post_load(entry, url_dir)
            if status == 507:  # the call in flight on "old" ends a moment later
                asyncio.get_running_loop().call_soon(release_old)
            return status, text

    def release_old() -> None:
        state.models["old"].in_flight = 0

    machine = Machine(total_bytes=1000 * MIB)
    control = Busy(machine, size=100 * MIB)
    loader, state = parts(machine, control, limit_bytes=900 * MIB)

    async def run() -> None:
        await load(loader, "old")
        state.models["old"].in_flight = 1
        control.answers = [507, 200]
        entry = await load(loader, "new")
        assert entry.state == READY and list(state.models) == ["new"]
        assert control.calls[-3:] == [("load", "new"), ("delete", "old"), ("load", "new")]

    asyncio.run(run())


def test_507_with_every_other_model_busy_says_so() -> None:
    """When the others stay busy past busy_wait_s, the error says they were busy."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        loader, state = parts(machine, control, limit_bytes=900 * MIB)
        await load(loader, "old")
        state.models["old"].in_flight = 1
        control.answers = [507]
        entry = loader.new_entry("new")
        await loader.load(entry)
        with pytest.raises(OutOfMemoryError, match=r"beside 1 other model\(s\) that stayed busy"):
            await entry.future
        assert "new" not in state.models and "old" in state.models

    asyncio.run(run())


def test_a_load_that_found_every_model_busy_records_its_error_event() -> None:
    """No room while the only other model serves a call for ``busy_wait_s``: the load fails
    with OutOfMemoryError and, as every other failed load (refused by Triton, past the load
    limit), leaves an ``error`` event naming it (a replay reads those events to tell whose
    callers a failed load had)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        loader, state = parts(machine, control, limit_bytes=150 * MIB)
        await load(loader, "old")
        state.models["old"].in_flight = 1
        entry = loader.new_entry("new")
        await loader.load(entry)
        with pytest.raises(OutOfMemoryError, match="stayed busy"):
            await entry.future
        assert ("load", "new") not in control.calls
        errors = loader.events.recent("error")
        assert [(e.target, e.instance) for e in errors] == [("new", 0)]
        assert "stayed busy" in errors[0].reason

    asyncio.run(run())


class HalfThenRest(Control):
    """A DELETE whose model gives back half its memory at once and the rest when the DELETE
    ends (a Python-backend stub exits after its model is gone: the emulator's unload goes
    on once half is back, while Triton's DELETE is still polling). The DELETE ends once
    the memory was read twice after the half came back (the unload's reading that saw the
    half, then the next load's plan's): a plan made while it is in progress sees half."""

    def __init__(self, machine: CountedMachine) -> None:
        super().__init__(machine, size=100 * MIB)
        self.gate = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        machine.after_read = self._after_read
        self.half: str | None = None
        self.reads_since_half = 0

    def _after_read(self) -> None:  # on the gauge's thread
        if self.half is not None:
            self.reads_since_half += 1
            if self.reads_since_half == 2:
                self.loop.call_soon_threadsafe(self.gate.set)

    async def delete(self, entry: ModelEntry) -> int:
        self.calls.append(("delete", entry.target))
        self.machine.resident[entry.target] = self.size // 2
        self.half = entry.target
        await self.gate.wait()
        self.machine.resident.pop(entry.target, None)
        return 200


class CountedMachine(Machine):
    after_read: Any = None

    def read(self) -> MemoryReading:
        reading = super().read()
        if self.after_read is not None:
            self.after_read()
        return reading


def test_a_load_waits_for_the_unloads_finishing_before_evicting_one_more() -> None:
    """Room for one model is one eviction: the memory an unload still gives back (its
    DELETE in progress) is waited for, not taken as a reason to evict another model."""

    async def run() -> None:
        machine = CountedMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        control = HalfThenRest(machine)
        loader, state = parts(machine, control, limit_bytes=380 * MIB)
        for name in ("a", "b", "c"):
            await load(loader, name)
        state.models["a"].last_used_s = time.monotonic()  # "b" is the least recent
        # 350 MiB used + 100 needed: over the 380 MiB limit by one model's memory
        await load(loader, "d")
        assert [e.target for e in loader.events.recent("evict")] == ["b"]
        assert sorted(state.models) == ["a", "c", "d"]
        assert machine.read().used_bytes <= 380 * MIB

    asyncio.run(run())


class LateStubExit(Control):
    """An earlier victim's stub exits late: ``first``'s DELETE gives back half its memory at
    once (its model is gone, its stub process still exits) and the rest only while the next
    DELETE runs, inside that unload's two readings."""

    def __init__(self, machine: Machine, *, first: str) -> None:
        super().__init__(machine, size=100 * MIB)
        self.first = first
        self.gate = asyncio.Event()

    async def delete(self, entry: ModelEntry) -> int:
        self.calls.append(("delete", entry.target))
        if entry.target == self.first:
            self.machine.resident[entry.target] = self.size // 2
            await self.gate.wait()
            return 200
        self.machine.resident.pop(entry.target, None)
        self.machine.resident.pop(self.first, None)  # the earlier victim's stub exits now
        self.gate.set()
        return 200


@pytest.mark.parametrize("machine_type", [StubMachine, Machine], ids=["per-process", "total"])
def test_an_unload_is_not_charged_with_an_earlier_victims_late_exit(
    machine_type: type[Machine],
) -> None:
    """Two unloads overlap: the first victim's stub exits while the second's DELETE runs.
    The memory that came back between the second unload's readings is both; the second
    model's footprint (and its event) is its own memory: its own processes' with
    per-process figures, its known footprint without them (it was 1.5x its size)."""

    async def run() -> None:
        machine = machine_type(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        control = LateStubExit(machine, first="a")
        loader, state = parts(machine, control, limit_bytes=900 * MIB)
        for name in ("a", "b"):
            await load(loader, name)
        assert state.footprints == {"a": 100 * MIB, "b": 100 * MIB}
        for name in ("a", "b"):
            await loader.evictor.unload(state.models[name], kind="evict", reason="test")
        await asyncio.gather(*state.finishing, *state.deletes.values())
        assert state.footprints == {"a": 100 * MIB, "b": 100 * MIB}
        # what each held: its processes before the DELETE, else its load (a's stub left
        # late: the drop at its unload is half of it)
        assert state.held == {"a": 100 * MIB, "b": 100 * MIB}
        (event,) = [e for e in loader.events.recent("evict") if e.target == "b"]
        assert event.bytes == 100 * MIB

    asyncio.run(run())


def test_a_plan_counts_what_the_loaded_models_grew_to_at_their_first_calls() -> None:
    """A model's stub grows at its first call (the tiny Python-backend model: 16.6 MiB USS
    after its load, 19.9 after its first call, then flat). The plan for the next load
    counts each idle model at what its processes hold now, not at its load-time size: one
    eviction makes room where the load-time sizes asked for two."""

    async def run() -> None:
        machine = StubMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        control = Control(machine, size=100 * MIB)
        loader, state = parts(machine, control, limit_bytes=50 * MIB + 400 * MIB)
        for name in ("a", "b", "c"):
            await load(loader, name)
            machine.resident[name] = 130 * MIB  # its first call: its stub grew
            state.models[name].last_used_s = time.monotonic()
        state.footprints["d"] = 130 * MIB  # as its earlier load measured after its calls
        # used 50 + 390, need 130: over by 120; "a" alone gives back 130
        await load(loader, "d")
        assert [e.target for e in loader.events.recent("evict")] == ["a"]
        assert sorted(state.models) == ["b", "c", "d"]
        assert {t: state.footprints[t] for t in "abc"} == dict.fromkeys("abc", 130 * MIB)

    asyncio.run(run())


class ServerSwing(Control):
    """Each load also moves the server process's own memory by ``swing[target]``: the
    pages it shares with the new stub (or that another process on the machine maps too)
    leave its USS, or come back."""

    def __init__(self, machine: Machine, swing: dict[str, int]) -> None:
        super().__init__(machine, size=100 * MIB)
        self.swing = swing

    async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        self.machine.base_bytes += self.swing[entry.target]
        return await super().post_load(entry, url_dir)


def test_a_stub_models_footprint_is_its_stubs_memory_not_the_servers_swing() -> None:
    """The server's USS moves at a load with whatever shares its pages (measured at three
    loads of the tiny model: +24.4, -19.1 and -1.8 MiB beside 16.5 MiB stubs): a model
    that started processes of its own is what they hold."""

    async def run() -> None:
        machine = StubMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        control = ServerSwing(machine, {"a": -20 * MIB, "b": 25 * MIB})
        loader, state = parts(machine, control, limit_bytes=900 * MIB)
        for name in ("a", "b"):
            await load(loader, name)
        assert state.footprints == {"a": 100 * MIB, "b": 100 * MIB}

    asyncio.run(run())


class LateDelete(Control):
    """A DELETE whose model's memory is back at once but whose answer comes only when
    :attr:`gate` opens (Triton's SageMaker DELETE polls about 2 s after the model went
    away). Records when it began and when the next load was sent."""

    def __init__(self, machine: Machine) -> None:
        super().__init__(machine, size=100 * MIB)
        self.gate = asyncio.Event()
        self.delete_began_s = 0.0
        self.load_sent_s: list[float] = []

    async def delete(self, entry: ModelEntry) -> int:
        self.calls.append(("delete", entry.target))
        self.delete_began_s = time.monotonic()
        self.machine.resident.pop(entry.target, None)
        await self.gate.wait()
        self.calls.append(("deleted", entry.target))
        return 200

    async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        self.load_sent_s.append(time.monotonic())
        return await super().post_load(entry, url_dir)


def test_after_a_507_the_retry_waits_for_the_victims_delete_to_end() -> None:
    """Triton answers 507; the victim's memory is back at once but its DELETE answers
    later: the load is sent again only once that DELETE ended (the platform awaits its
    unload before the next load), not when the memory reading moved."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = LateDelete(machine)
        options = InstanceOptions(busy_wait_s=0.2, release_timeout_s=60.0)
        loader, state = parts(machine, control, limit_bytes=900 * MIB, options=options)
        await load(loader, "old")
        control.answers = [507, 200]
        asyncio.get_running_loop().call_later(0.3, control.gate.set)  # the DELETE's poll
        entry = await asyncio.wait_for(load(loader, "new"), timeout=30)
        assert entry.state == READY and list(state.models) == ["new"]
        assert control.calls[-4:] == [
            ("load", "new"),
            ("delete", "old"),
            ("deleted", "old"),
            ("load", "new"),
        ]

    asyncio.run(run())


def test_after_a_507_a_delete_that_never_ends_holds_the_retry_for_the_release_timeout() -> None:
    """The victim's DELETE never answers: the retry goes ahead after ``release_timeout_s``
    (not before: the DELETE may still be giving memory back; not never: the load would
    hang with its callers)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = LateDelete(machine)
        options = InstanceOptions(busy_wait_s=0.2, release_timeout_s=0.3)
        loader, state = parts(machine, control, limit_bytes=900 * MIB, options=options)
        await load(loader, "old")
        control.answers = [507, 200]
        entry = await asyncio.wait_for(load(loader, "new"), timeout=30)
        assert entry.state == READY and list(state.models) == ["new"]
        assert control.calls[-3:] == [("load", "new"), ("delete", "old"), ("load", "new")]
        assert control.load_sent_s[-1] - control.delete_began_s >= 0.3
        control.gate.set()  # let the DELETE end
        await asyncio.gather(*state.finishing, *state.deletes.values())

    asyncio.run(run())


class EnsembleCache(Cache):
    """Artifacts served as an ensemble of a Python step (a stub process) and an ONNX step
    (run in Triton's own process)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def ensure(self, target: str, prepare: Any = None, claim: Any = None) -> Any:
        steps = {"pre": 'backend: "python"', "m": 'platform: "onnxruntime_onnx"'}
        for name, runs in {**steps, "ens": 'platform: "ensemble"'}.items():
            folder = self.root / target / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.pbtxt").write_text(f'name: "{name}"\n{runs}\n')
        artifact = SimpleNamespace(serve_dir=self.root / target, size_bytes=1)
        return SimpleNamespace(downloaded=False, artifact=artifact)


def test_a_model_with_a_step_in_the_server_counts_the_servers_growth_too(
    tmp_path: Path,
) -> None:
    """An ensemble of a Python step and an ONNX step: its footprint is its stub's memory
    plus what the server grew by at its load (the ONNX step's), and a later reading adds
    that part to what its stub grew to."""

    async def run() -> None:
        machine = StubMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        control = ServerSwing(machine, {"a": 30 * MIB, "b": 0})
        loader, state = parts(machine, control, limit_bytes=900 * MIB)
        loader.cache = loader.evictor.cache = EnsembleCache(tmp_path)  # type: ignore[assignment]
        entry = await load(loader, "a")
        assert entry.server_steps and state.footprints["a"] == 130 * MIB
        machine.resident["a"] = 110 * MIB  # its first call: its stub grew
        await load(loader, "b")  # the plan's reading reads it again
        assert state.footprints["a"] == 140 * MIB

    asyncio.run(run())


class OtherVictimExitsLate(Control):
    """``first``'s DELETE gives back half its stub's memory at once and the rest only when
    the next DELETE begins (its stub exits late); that next DELETE frees its own model's
    memory only after three more readings (its stub takes a while to go). Counts the
    readings taken since the earlier victim's stub exited."""

    def __init__(self, machine: CountedMachine, *, first: str) -> None:
        super().__init__(machine, size=100 * MIB)
        self.first = first
        self.first_gone = asyncio.Event()
        self.second_gone = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.reads_since = -1
        machine.after_read = self._after_read

    def _after_read(self) -> None:  # on the gauge's thread
        if self.reads_since >= 0:
            self.reads_since += 1
            if self.reads_since == 3:
                self.loop.call_soon_threadsafe(self.second_gone.set)

    async def delete(self, entry: ModelEntry) -> int:
        self.calls.append(("delete", entry.target))
        if entry.target == self.first:
            self.machine.resident[entry.target] = self.size // 2
            await self.first_gone.wait()
            return 200
        self.machine.resident.pop(self.first, None)  # the earlier victim's stub exits now
        self.reads_since = 0
        self.first_gone.set()
        await self.second_gone.wait()
        self.machine.resident.pop(entry.target, None)
        return 200


class CountedStubMachine(CountedMachine, StubMachine):
    """A :class:`StubMachine` whose readings are counted (:class:`CountedMachine`)."""


def test_an_unload_waits_for_its_own_processes_not_for_another_victims_exit() -> None:
    """The earlier victim's stub exits while the next unload waits for its memory: the
    drop is a whole model's, but not this model's. The unload returns only once this
    model's own processes gave their memory back (the load after it would start beside
    them)."""

    async def run() -> None:
        machine = CountedStubMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        control = OtherVictimExitsLate(machine, first="a")  # type: ignore[arg-type]
        options = InstanceOptions(busy_wait_s=0.2, release_timeout_s=30.0)
        loader, state = parts(machine, control, limit_bytes=900 * MIB, options=options)
        for name in ("a", "b"):
            await load(loader, name)
        await loader.evictor.unload(state.models["a"], kind="evict", reason="test")
        await loader.evictor.unload(state.models["b"], kind="evict", reason="test")
        assert "b" not in machine.resident  # its stub had released its memory
        await asyncio.wait_for(asyncio.gather(*state.finishing, *state.deletes.values()), 30)

    asyncio.run(run())


class GpuBox(StandInNvml):
    """A stand-in ``pynvml`` for one card whose memory follows the loads: each loaded model
    is a Python-backend stub process (pid from 100) holding ``gpu_bytes[target]`` of GPU
    memory (0: a KIND_CPU-instance stub that never touches the card) beside the server
    (pid 1, 300 MiB: its CUDA context and memory pool); ``outside`` is the card's memory
    that processes outside Triton's tree hold (pid 9999). NVML lists every process that
    holds memory on the card, with its figure."""

    def __init__(self, gpu_bytes: dict[str, int]) -> None:
        super().__init__({0: 0}, total_bytes=16 * 2**30)
        self.gpu_bytes = gpu_bytes
        self.stubs: dict[str, int] = {}
        self.outside = 0
        self._next = 100

    def tree(self) -> list[int]:
        return [1, *self.stubs.values()]

    def _holders(self) -> dict[int, int]:
        held = {1: 300 * MIB, **{p: self.gpu_bytes[t] for t, p in self.stubs.items()}}
        if self.outside:
            held[9999] = self.outside
        return {pid: b for pid, b in held.items() if b}

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=sum(self._holders().values()), total=self.total_bytes)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in self._holders().items()]

    def start_stub(self, target: str) -> None:
        self.stubs[target], self._next = self._next, self._next + 1


class GpuControl(Control):
    """Loads start a stub on the :class:`GpuBox`; the first load also sees another process
    take 500 MiB of the card meanwhile."""

    def __init__(self, box: GpuBox) -> None:
        super().__init__(Machine(total_bytes=1), size=0)
        self.box = box

    async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        self.calls.append(("load", entry.target))
        self.box.start_stub(entry.target)
        self.box.outside += 500 * MIB if len(self.box.stubs) == 1 else 0
        return 200, ""

    async def delete(self, entry: ModelEntry) -> int:
        self.calls.append(("delete", entry.target))
        self.box.stubs.pop(entry.target, None)
        return 200


def test_a_gpu_models_footprint_is_its_own_processes_gpu_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU the footprint of a model with stubs of its own is their GPU memory as NVML
    gives it per process, not the card's growth (another process took 500 MiB of the card
    during the first load); a KIND_CPU-instance stub that holds none of the card is a
    known 0, not an unknown footprint counted at the others' mean."""
    box = GpuBox({"gpu": 100 * MIB, "cpu": 0})
    monkeypatch.setitem(sys.modules, "pynvml", box)
    monkeypatch.setattr("mmelocal.emulator.probes.process_tree_pids", lambda pid: box.tree())

    async def run() -> None:
        control = GpuControl(box)
        probe = NvmlProbe(0, lambda: 1)
        loader, state = parts(probe, control, limit_bytes=15 * 2**30)  # type: ignore[arg-type]
        await load(loader, "gpu")
        await load(loader, "cpu")
        assert state.footprints == {"gpu": 100 * MIB, "cpu": 0}
        assert loader._need_bytes(state.models["cpu"]) == 0
        for name in ("gpu", "cpu"):
            await loader.evictor.unload(state.models[name], kind="unload", reason="test")
        await asyncio.gather(*state.finishing, *state.deletes.values())
        assert state.footprints == {"gpu": 100 * MIB, "cpu": 0}
        assert [e.bytes for e in loader.events.recent("unload")] == [100 * MIB, 0]

    asyncio.run(run())
