"""One instance's loaded set across its lifecycle, with no server (see lifecycle_fakes):
acquire and release, restarts and the models loaded again after them, Triton's 404 and
507 answers to an invoke."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lifecycle_fakes import (
    MIB,
    Control,
    GatedDelete,
    HeldMachine,
    Machine,
    ServerModelMachine,
    StubMachine,
    TorchCache,
    fake_instance,
)
from shared_helpers import wait_for_async

from mmelocal.emulator.emulator import Emulator
from mmelocal.emulator.model_state import (
    LOADING,
    UNLOADING,
    InstanceUnavailableError,
    ModelEntry,
)
from mmelocal.emulator.probes import MemoryReading
from mmelocal.emulator.recovery import Watchdog
from mmelocal.errors import ServerStartError


async def used_ago(inst: Any, *ages: tuple[float, str]) -> float:
    """Load and release each ``(age_s, target)`` on ``inst``, then date its last use
    ``age_s`` before now; returns that now (``time.monotonic``)."""
    now = time.monotonic()
    for age_s, target in ages:
        await inst.acquire(target)
        inst.release(target)
        inst.models[target].last_used_s = now - age_s
    return now


def test_models_loaded_again_after_a_restart_keep_their_recency() -> None:
    """The reload after a restart is no use of the models: the least recently used one
    before the restart is still the first evicted after it (the reload used to count as a
    use, most recent first, so the order came back reversed and the hottest model went
    first)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=250 * MIB)
        await inst.start()
        for target in ("cold", "hot"):
            await inst.acquire(target)
            inst.release(target)
        inst.models["cold"].last_used_s = time.monotonic() - 60.0
        assert inst.loaded() == ["cold", "hot"]

        inst.launcher.stop()  # the process dies
        previous = await inst.restart()
        await Watchdog([inst])._reload(inst, previous)
        assert inst.loaded() == ["cold", "hot"]

        await inst.acquire("new")  # no room for three: the least recently used goes
        inst.release("new")
        assert sorted(inst.loaded()) == ["hot", "new"]
        assert control.calls[-2:] == [("delete", "cold"), ("load", "new")]
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_two_calls_answered_404_load_the_model_once_and_pin_it_once() -> None:
    """Triton lost a model while two calls were in flight: the first call's recovery loads
    it again; the second's, coming while that load runs, leaves it alone (it used to drop
    the loading entry: a second load, which Triton answered 409, and an artifact pinned
    once too often, kept on disk for good)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        emulator = SimpleNamespace()  # recover_from(404) needs only the instance
        await inst.start()
        await inst.acquire("m")
        await inst.acquire("m")  # two calls in flight
        machine.resident.clear()  # Triton forgot it: both calls are answered 404

        inst.release("m")
        await Emulator.recover_from(emulator, inst, "m", 404)  # type: ignore[arg-type]
        assert inst.models["m"].state == LOADING  # the recovery started the load
        first = asyncio.ensure_future(inst.acquire("m"))  # the first call's retry waits

        inst.release("m")
        await Emulator.recover_from(emulator, inst, "m", 404)  # type: ignore[arg-type]
        second = asyncio.ensure_future(inst.acquire("m"))
        await asyncio.gather(first, second)
        inst.release("m")
        inst.release("m")

        assert [c for c in control.calls if c == ("load", "m")] == [("load", "m")] * 2
        assert inst.is_ready("m") and inst.models["m"].in_flight == 0
        assert inst.cache.pins == {"m": 1}
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_trim_does_not_wait_behind_a_load() -> None:
    """The watchdog's periodic trim gives up when a load took the lock while it read the
    memory (it used to wait for that load, minutes for a big model, and the watchdog with
    it: a Triton that died meanwhile was not restarted)."""

    class Gated(Control):
        def __init__(self, machine: Machine) -> None:
            super().__init__(machine, size=100 * MIB)
            self.gate = asyncio.Event()

        async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
            await self.gate.wait()
            return await super().post_load(entry, url_dir)

    async def run() -> None:
        machine = HeldMachine()
        control = Gated(machine)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        await inst.start()
        machine.hold = True
        trim = asyncio.ensure_future(inst.trim())
        assert await asyncio.to_thread(machine.entered.wait, 30)  # the trim reads
        load = asyncio.ensure_future(inst.acquire("m"))
        await wait_for_async(inst.state.load_lock.locked, timeout_s=30, what="the load's lock")
        machine.go_on.set()
        await wait_for_async(trim.done, timeout_s=5, what="the trim to give up")
        assert not load.done()
        control.gate.set()
        await load
        inst.release("m")
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_model_being_evicted_when_triton_died_is_not_loaded_again() -> None:
    """A restart loads again what was loaded, not the model an eviction was taking out to
    make room (reloaded last, it evicted a more recently used model in turn)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = GatedDelete(machine)
        inst = fake_instance(machine, control, limit_bytes=250 * MIB)
        await inst.start()
        for target in ("a", "b"):
            await inst.acquire(target)
            inst.release(target)
        inst.models["a"].last_used_s = time.monotonic() - 60.0
        cold = asyncio.ensure_future(inst.acquire("c"))  # evicts "a" to make room
        await wait_for_async(lambda: inst.models["a"].state == UNLOADING, timeout_s=30)

        inst.launcher.stop()  # the process dies during the unload
        previous = await inst.restart()
        with pytest.raises(InstanceUnavailableError):
            await cold
        control.gate.set()
        await Watchdog([inst])._reload(inst, previous)
        assert sorted(inst.loaded()) == ["b", "c"]
        assert ("load", "a") not in control.calls[2:]
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_stopped_instance_gives_up_its_artifacts() -> None:
    """Stopping an instance (a scale-in takes one out) releases the artifacts its models
    pinned: the disk budget may delete them again (they stayed pinned for good)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        await inst.start()
        for target in ("a", "b"):
            await inst.acquire(target)
            inst.release(target)
        assert inst.cache.pins == {"a": 1, "b": 1}
        await inst.stop()
        inst.close()
        assert inst.cache.pins == {"a": 0, "b": 0}
        assert inst.loaded() == []

    asyncio.run(run())


def test_a_late_404_does_not_release_another_calls_hold() -> None:
    """Two calls in flight when Triton lost the model; the second's 404 comes back after
    the first call's recovery loaded the model again and sent its retry. The second call
    releases its own hold, not the first call's (the model counted no call in flight while
    the retry ran: evictable under it)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        emulator = SimpleNamespace()
        await inst.start()
        await inst.acquire("m")
        await inst.acquire("m")
        machine.resident.clear()  # Triton forgot it

        inst.release("m")  # the first call's 404
        await Emulator.recover_from(emulator, inst, "m", 404)  # type: ignore[arg-type]
        await inst.acquire("m")  # its retry, in flight once the model is back
        assert inst.is_ready("m")

        inst.release("m")  # the second call's 404, late
        assert inst.models["m"].in_flight == 1
        assert not inst.models["m"].usage().evictable
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_failed_restart_keeps_the_models_to_load_again() -> None:
    """The first restart of a dead Triton fails; the next one still returns what was
    loaded (the first had forgotten the loaded set, so nothing was loaded again)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        await inst.start()
        for target in ("cold", "hot"):
            await inst.acquire(target)
            inst.release(target)
        launcher = inst.launcher
        launcher.stop()  # the process dies
        launcher.failing_starts = 1  # type: ignore[attr-defined]
        with pytest.raises(ServerStartError):
            await inst.restart()
        assert not inst.up
        previous = await inst.restart()
        assert list(previous) == ["hot", "cold"]
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_failed_connection_checks_the_process_off_the_event_loop() -> None:
    """A launcher's liveness check may be an HTTP call (an external server: up to 2 s) or
    a Docker API call: a failed connection runs it in an executor and marks the instance
    down when the process is gone (it ran on the event loop, stalling every call)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        inst = fake_instance(machine, Control(machine, size=MIB), limit_bytes=500 * MIB)
        await inst.start()
        checked_on: list[threading.Thread] = []
        launcher = inst.launcher

        def is_alive() -> bool:
            checked_on.append(threading.current_thread())
            return False  # the process died

        launcher.is_alive = is_alive  # type: ignore[method-assign]
        error = inst.connection_error(ConnectionResetError("reset by peer"))
        assert isinstance(error, InstanceUnavailableError) and "retry" in str(error)
        await wait_for_async(lambda: not inst.up, timeout_s=30, what="the instance down")
        assert checked_on and threading.current_thread() not in checked_on
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_call_whose_instance_stopped_before_it_was_sent_is_told_to_retry() -> None:
    """A cold call acquires its model, then awaits a connection; an instance stopped (or
    restarted) meanwhile has forgotten its loaded set: the call gets the retryable 503, its
    connection goes back to the pool and its hold is released (it raised KeyError in the
    call's task, and the client waited for its own timeout)."""
    from mmelocal.emulator.invocation import Invocation, InvocationPath
    from mmelocal.emulator.metrics import Metrics
    from mmelocal.emulator.upstream import UpstreamConnection, UpstreamPool

    config = SimpleNamespace(invoke_timeout_s=60.0, variant_name="AllTraffic")
    emulator: Any = SimpleNamespace(config=config, metrics=Metrics())
    answers: list[tuple[object, Any, int]] = []
    requester = SimpleNamespace(answered=lambda *args: answers.append(args))
    released: list[str] = []
    inst: Any = SimpleNamespace(index=3, models={}, release=released.append)
    pool = UpstreamPool("http://127.0.0.1:1")
    conn = UpstreamConnection()
    request = object()
    call = Invocation(InvocationPath(emulator), request, requester, True)
    call.target, call.raw_target = "m.tar.gz", b"m.tar.gz"
    call._send(inst, pool, conn)
    ((answered_request, answer, status),) = answers
    assert answered_request is request and status == 503
    assert b"ServiceUnavailable" in answer.body and b"instance 3 is restarting" in answer.body
    assert released == ["m.tar.gz"]
    assert pool.take_idle() is conn


def test_a_load_stopped_before_it_began_answers_its_callers_at_once() -> None:
    """``stop()`` cancels a load whose task had not run yet (the first cold call came in the
    same turn of the loop): its callers get the retryable InstanceUnavailableError at once
    (the task's code never ran, so its future was never resolved: they waited for their own
    timeout and got ModelNotReadyError)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        await inst.start()
        call = asyncio.ensure_future(inst.acquire("m", wait_timeout_s=60.0))
        await asyncio.sleep(0)  # one turn: the call started the load's task, not yet run
        task = inst.models["m"].task
        assert task is not None and not task.done() and control.calls == []
        await inst.stop()
        with pytest.raises(InstanceUnavailableError, match="retry"):
            await asyncio.wait_for(call, timeout=5.0)
        assert "m" not in inst.models and inst.cache.pins == {}
        inst.close()

    asyncio.run(run())


def test_an_eviction_after_an_invoke_507_is_counted_as_one() -> None:
    """Triton answered 507 to an invoke: the least recently used idle model is unloaded to
    make room, an eviction like the load path's (event ``evict``, counted in
    ModelEvictions); it was recorded as a plain ``unload`` and not counted."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        await inst.start()
        for target in ("old", "m"):
            await inst.acquire(target)
            inst.release(target)
        await Emulator.recover_from(SimpleNamespace(), inst, "m", 507)  # type: ignore[arg-type]
        assert inst.loaded() == ["m"]
        await wait_for_async(lambda: not inst.state.finishing, timeout_s=30, what="the unload")
        assert [e.kind for e in inst.events.recent(limit=10) if e.target == "old"] == [
            "load",
            "evict",
        ]
        assert inst.metrics.counters["ModelEvictions"] == 1
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_an_invoke_507_waits_for_a_busy_neighbour_to_go_idle() -> None:
    """Triton answered 507 to an invoke while the only other model served a call: the
    recovery waits for it to go idle (up to busy_wait_s), as the load path's 507 does, then
    evicts it (it gave up at once, evicting nothing: the retry got 507 again); a model that
    stays busy is not evicted."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        emulator: Any = SimpleNamespace()
        await inst.start()
        for target in ("old", "m"):
            await inst.acquire(target)
            inst.release(target)
        inst.models["old"].last_used_s = time.monotonic() - 60.0
        await inst.acquire("old")  # a call in flight on the neighbour
        recovery = asyncio.ensure_future(Emulator.recover_from(emulator, inst, "m", 507))
        await wait_for_async(
            lambda: recovery.done() or inst.state.load_lock.locked(),
            timeout_s=30,
            what="the recovery to look for a victim",
        )
        assert not recovery.done(), "the recovery gave up while its neighbour was busy"
        inst.release("old")
        await recovery
        assert inst.loaded() == ["m"] and ("delete", "old") in control.calls

        await inst.acquire("old")
        await Emulator.recover_from(emulator, inst, "m", 507)  # busy past busy_wait_s
        assert sorted(inst.loaded()) == ["m", "old"]
        inst.release("old")
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_liveness_check_of_a_process_gone_since_does_not_mark_its_successor_down() -> None:
    """A failed connection's liveness check (in an executor) finds the old process dead but
    answers only after the watchdog restarted it: the restarted instance stays up (the
    stale answer marked the new process down until the watchdog's next look, about 0.2 s
    of 503s from a healthy server)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        inst = fake_instance(machine, Control(machine, size=MIB), limit_bytes=500 * MIB)
        await inst.start()
        launcher: Any = inst.launcher
        entered, gate = threading.Event(), threading.Event()

        def old_process_alive() -> bool:
            entered.set()
            assert gate.wait(timeout=30)
            return False  # what it found: the process it checked is dead

        launcher.stop()  # the process dies; a call's connection fails
        launcher.is_alive = old_process_alive
        inst.connection_error(ConnectionResetError("reset by peer"))
        assert await asyncio.to_thread(entered.wait, 30)
        del launcher.is_alive
        await inst.restart()  # the watchdog restarted it meanwhile
        assert inst.up
        gate.set()
        check = inst._liveness
        assert check is not None
        await check
        assert inst.up, "a check of the dead process marked the restarted one down"
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_restart_that_hangs_does_not_hold_up_another_instances_restart() -> None:
    """Two instances; the first one's Triton died and its restart hangs (a start waits up
    to its start timeout; a failing one backs off up to 30 s). The second one's Triton dies
    meanwhile: the watchdog restarts it at once (it awaited the first one's restart, and
    every instance went unwatched until that ended)."""

    async def run() -> None:
        instances = []
        for _ in range(2):
            machine = Machine(total_bytes=1000 * MIB)
            inst = fake_instance(machine, Control(machine, size=MIB), limit_bytes=500 * MIB)
            await inst.start()
            instances.append(inst)
        first, second = instances
        entered, gate = threading.Event(), threading.Event()
        slow: Any = first.launcher

        def hanging_start() -> None:
            entered.set()
            assert gate.wait(timeout=60)
            slow.alive = True

        slow.start = hanging_start
        watchdog = Watchdog(instances, interval_s=0.01)
        watchdog.start()
        try:
            slow.stop()  # the first one dies; its restart hangs
            assert await asyncio.to_thread(entered.wait, 30)
            second.launcher.stop()  # then the second one dies
            await wait_for_async(
                lambda: second.up and second.launcher.starts == 2,  # type: ignore[attr-defined]
                timeout_s=10,
                what="the second instance restarted while the first one's restart hangs",
            )
            assert not first.up
        finally:
            gate.set()
            await watchdog.stop()
        for inst in instances:
            await inst.stop()
            inst.close()

    asyncio.run(run())


class _CountedMachine(Machine):
    def __init__(self, *, kind: str = "host") -> None:
        super().__init__(total_bytes=1000 * MIB)
        self.kind = kind
        self.reads = 0

    def read(self) -> MemoryReading:
        self.reads += 1
        return super().read()


def test_an_idle_host_instance_is_trimmed_without_a_new_reading() -> None:
    """The watchdog's trim reads the memory again only when something was loaded or served
    since its last reading, or a call is in flight: the tree's PSS does not grow on an idle
    server (each reading walked every process's page tables every 2 s: about half the
    idle emulator's CPU). A limit lowered meanwhile still trims, against the last reading."""

    async def run() -> None:
        machine = _CountedMachine()
        inst = fake_instance(machine, Control(machine, size=100 * MIB), limit_bytes=500 * MIB)
        await inst.start()
        await inst.acquire("m")
        inst.release("m")
        await inst.trim()
        reads = machine.reads
        await inst.trim()
        await inst.trim()
        assert machine.reads == reads, "an idle instance was read again"

        assert inst.hold_ready("m")  # a call in flight: read at every trim
        await inst.trim()
        await inst.trim()
        assert machine.reads == reads + 2
        inst.release("m")  # served since: read once more, then idle again
        await inst.trim()
        await inst.trim()
        assert machine.reads == reads + 3

        inst.gauge.limit_override_bytes = 50 * MIB  # the limit now holds nothing
        await inst.trim()
        assert inst.loaded() == []
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_an_idle_gpu_instance_is_read_at_every_trim() -> None:
    """A GPU probe reads the whole device, whose memory other processes on it change: its
    trim reads every time, idle or not."""

    async def run() -> None:
        machine = _CountedMachine(kind="gpu")
        inst = fake_instance(machine, Control(machine, size=100 * MIB), limit_bytes=500 * MIB)
        await inst.start()
        await inst.acquire("m")
        inst.release("m")
        reads = machine.reads
        for _ in range(3):
            await inst.trim()
        assert machine.reads == reads + 3
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_the_trim_reads_again_what_a_model_grew_to_at_its_first_call() -> None:
    """The watchdog's trim, on the reading it takes anyway, raises an idle model's footprint
    to what its stub holds after its first call (not while the call is in flight)."""

    async def run() -> None:
        machine = StubMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        inst = fake_instance(machine, Control(machine, size=100 * MIB), limit_bytes=900 * MIB)
        await inst.start()
        await inst.acquire("m")
        assert inst.footprints["m"] == 100 * MIB
        machine.resident["m"] = 130 * MIB  # its first call: its stub grew
        await inst.trim()
        assert inst.footprints["m"] == 100 * MIB  # serving the call: not read
        inst.release("m")
        await inst.trim()
        assert inst.footprints["m"] == inst.models["m"].footprint_bytes == 130 * MIB
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_model_in_the_servers_process_counts_what_the_server_grew_at_its_first_call(
    tmp_path: Path,
) -> None:
    """A TorchScript model runs in Triton's own process (no stub to read again): the
    server's growth across its first call is its own when nothing else happened in that
    window (no load, no unload, no other model's first call), and the trim's reading
    counts it; the plan then frees what evicting it really gives back."""

    async def run() -> None:
        machine = ServerModelMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        inst = fake_instance(
            machine,
            Control(machine, size=100 * MIB),
            limit_bytes=900 * MIB,
            cache=TorchCache(tmp_path),
        )
        await inst.start()
        await inst.acquire("m")
        assert inst.footprints["m"] == 100 * MIB
        machine.resident["m"] = 130 * MIB  # its first call: cuDNN workspace, pools
        await inst.trim()
        assert inst.footprints["m"] == 100 * MIB  # serving the call: not read
        inst.release("m")
        await inst.trim()
        assert inst.footprints["m"] == inst.models["m"].footprint_bytes == 130 * MIB
        await inst.acquire("m")  # later calls: not first calls, nothing more is added
        machine.base_bytes += 5 * MIB
        inst.release("m")
        await inst.trim()
        assert inst.footprints["m"] == 130 * MIB
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_first_calls_in_one_window_are_not_given_to_either_model(tmp_path: Path) -> None:
    """Two models in the server's process have their first calls between the same two
    readings: the server's growth cannot be split between them, so neither is charged
    with it (their load-time figures stay), nor is a model whose first call overlapped a
    load."""

    async def run() -> None:
        machine = ServerModelMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        inst = fake_instance(
            machine,
            Control(machine, size=100 * MIB),
            limit_bytes=900 * MIB,
            cache=TorchCache(tmp_path),
        )
        await inst.start()
        for name in ("a", "b"):
            await inst.acquire(name)
        machine.resident["a"] = machine.resident["b"] = 130 * MIB
        for name in ("a", "b"):
            inst.release(name)
        await inst.trim()
        assert inst.footprints == {"a": 100 * MIB, "b": 100 * MIB}
        await inst.acquire("c")  # c's first call, and d's load in the same window
        machine.resident["c"] = 130 * MIB
        inst.release("c")
        await inst.acquire("d")
        inst.release("d")
        await inst.trim()
        assert inst.footprints["c"] == 100 * MIB
        await inst.stop()
        inst.close()

    asyncio.run(run())


class SharedPagesMachine(StubMachine):
    """:class:`StubMachine` whose server and stubs also map ``shared_bytes`` of the same
    pages (libpython, the Python backend's shared-memory region): each process's PSS is
    its USS plus an equal share of them, and ``used_bytes`` sums the PSS (as the host
    probe's reading does)."""

    shared_bytes = 12 * MIB

    def read(self) -> MemoryReading:
        reading = super().read()
        uss = dict(reading.per_process_bytes or {})
        share = self.shared_bytes // len(uss)
        return dataclasses.replace(
            reading,
            used_bytes=reading.used_bytes + self.shared_bytes,
            per_process_pss_bytes={pid: b + share for pid, b in uss.items()},
        )


def test_footprints_are_the_models_part_of_the_budgets_pss() -> None:
    """The budget is the tree's summed PSS; each stub's footprint is its PSS (its USS plus
    its share of the pages it shares: 2.9-4.9 MiB for the tiny model), read again as the
    shares move, so the footprints and the server's memory beside them add up to the
    reading (it was the USS: the shares went to the idle server's figure, and a plan
    counted each model short)."""

    async def run() -> None:
        machine = SharedPagesMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        inst = fake_instance(machine, Control(machine, size=100 * MIB), limit_bytes=900 * MIB)
        await inst.start()
        for name in ("a", "b"):
            await inst.acquire(name)
            inst.release(name)
        assert inst.footprints == {"a": 106 * MIB, "b": 104 * MIB}  # 12 MiB / 2, then / 3
        await inst.trim()
        assert {t: e.footprint_bytes for t, e in inst.models.items()} == {
            "a": 104 * MIB,  # its share now: evicting it frees that, not its first figure
            "b": 104 * MIB,
        }
        assert inst.footprints["a"] == 106 * MIB  # what its next load may need: kept
        assert inst.held_footprints == {"a": 104 * MIB, "b": 104 * MIB}  # what each holds
        assert inst.idle_memory_bytes == 54 * MIB  # the server's PSS
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_the_idle_servers_memory_follows_its_readings() -> None:
    """``idle_memory_bytes`` (the state page's ``memory_idle_bytes``, a replay's room for
    models) is what the server holds beside its models: the idle server of the tiny-model
    emulator read 25.2 MiB at its start and 29.1 once its three models were gone. The
    trim's reading keeps it current (less the loaded models' footprints) while nothing
    loads or unloads, and a restarted server's own first reading replaces it."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        inst = fake_instance(machine, Control(machine, size=100 * MIB), limit_bytes=900 * MIB)
        await inst.start()
        assert inst.idle_memory_bytes == 50 * MIB
        await inst.acquire("m")
        inst.release("m")
        machine.base_bytes = 60 * MIB  # the server's PSS drifted up
        await inst.trim()
        assert inst.idle_memory_bytes == 60 * MIB
        inst.launcher.stop()  # the process dies; its successor starts smaller
        machine.base_bytes = 40 * MIB
        await inst.restart()
        assert inst.idle_memory_bytes == 40 * MIB
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_model_loaded_again_after_a_restart_evicts_none_used_more_recently() -> None:
    """After a restart the models come back most recently used first, as far as memory
    allows: when the server now holds less, the least recently used one is not loaded again
    (its reload evicted the next least recently used model, reloaded just before it: a
    model used more recently gave way to one used less recently)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=350 * MIB)
        await inst.start()
        await used_ago(inst, (30.0, "cold"), (20.0, "warm"), (10.0, "hot"))

        inst.launcher.stop()  # the process dies
        previous = await inst.restart()
        machine.base_bytes = 100 * MIB  # the new server holds more: two models fit, not three
        await Watchdog([inst])._reload(inst, previous)
        assert sorted(inst.loaded()) == ["hot", "warm"]
        assert ("delete", "warm") not in control.calls
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_model_loaded_again_after_a_restart_answered_507_evicts_nothing() -> None:
    """The same when Triton itself answers 507 to the reload: the model is not loaded
    again; the one reloaded before it, used more recently, stays."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        await inst.start()
        for target in ("warm", "hot"):
            await inst.acquire(target)
            inst.release(target)
        inst.models["warm"].last_used_s -= 10.0

        inst.launcher.stop()
        previous = await inst.restart()
        control.answers = [200, 507]  # "hot" loads again, "warm" does not fit
        await Watchdog([inst])._reload(inst, previous)
        assert inst.loaded() == ["hot"]
        assert ("delete", "hot") not in control.calls
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_call_for_a_model_being_loaded_again_lets_it_make_room() -> None:
    """A call that asks for a model while its reload runs makes it a cold load like any
    other: it evicts the least recently used model when it does not fit."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=250 * MIB)
        await inst.start()
        now = await used_ago(inst, (20.0, "warm"), (10.0, "hot"))
        inst.launcher.stop()
        await inst.restart()
        await inst.reload("hot", last_used_s=now - 10.0)
        await inst.reload("warm", last_used_s=now - 20.0)
        reload = asyncio.ensure_future(inst.reload("cold", last_used_s=now - 30.0))
        await asyncio.sleep(0)  # one turn: the reload's load is under way
        await inst.acquire("cold")  # a call for it meanwhile
        await reload
        inst.release("cold")
        assert sorted(inst.loaded()) == ["cold", "hot"]
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_models_not_yet_loaded_again_when_triton_died_again_are_kept() -> None:
    """Triton dies again while the models of the first restart are being loaded again: the
    second restart still returns those not loaded yet (it returned only what was loaded
    when it died: the rest never came back)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB)
        await inst.start()
        await used_ago(inst, (30.0, "cold"), (20.0, "warm"), (10.0, "hot"))
        inst.launcher.stop()
        previous = await inst.restart()
        assert list(previous) == ["hot", "warm", "cold"]
        await inst.reload("hot", last_used_s=previous["hot"])  # then it dies again
        inst.launcher.stop()
        again = await inst.restart()
        assert again == previous
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_a_stop_before_the_queued_start_begins_starts_no_server() -> None:
    """A stop that comes while the instance's start waits on its process thread behind other
    work (a restart's stop, a liveness job) used to find no start under way in the launcher
    and so let that start run to its end (a real Triton: until ready or its start timeout)
    before the stop behind it; it ends the start before the launcher is asked."""

    async def run() -> None:
        machine = StubMachine(total_bytes=1000 * MIB, base_bytes=50 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=900 * MIB)
        busy, release, closed = threading.Event(), threading.Event(), asyncio.Event()
        control.close = closed.set  # type: ignore[method-assign]  # stop() got this far

        def hold() -> None:
            busy.set()
            release.wait(timeout=30)

        held = inst._process_thread.run(hold)
        await asyncio.to_thread(busy.wait, 30)
        starting = asyncio.ensure_future(inst.start())
        while not inst._launching.is_set():
            await asyncio.sleep(0)  # a yield: start() queues its launch at its first step
        stopping = asyncio.ensure_future(inst.stop())
        await closed.wait()  # the stop waits on the process thread now, behind the start
        release.set()
        await held
        with pytest.raises(ServerStartError, match="stopped before its server started"):
            await starting
        await stopping
        assert inst.launcher.starts == 0  # type: ignore[attr-defined]
        inst.close()

    asyncio.run(run())
