"""Bounds on what one instance does when it waits (with no server, see lifecycle_fakes):
a stopped instance starts nothing, the platform's load limit covers the whole load, a
busy wait reads memory only when something changed, a retired instance is not trimmed,
and a hot model's copy waits no longer than a load may take."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from lifecycle_fakes import (
    MIB,
    Cache,
    Control,
    GatedDelete,
    HeldMachine,
    Machine,
    fake_instance,
)
from shared_helpers import wait_for_async

from mmelocal.emulator.cache import ArtifactCache
from mmelocal.emulator.model_state import (
    UNLOADING,
    InstanceOptions,
    InstanceUnavailableError,
    ModelEntry,
)
from mmelocal.emulator.probes import MemoryReading
from mmelocal.emulator.recovery import Watchdog
from mmelocal.emulator.router import Router
from mmelocal.emulator.sagemaker_control import SageMakerControl
from mmelocal.emulator.store import LocalStore
from mmelocal.errors import EmulatorError, ModelLoadError
from mmelocal.testing.tiny_model import write_tarball


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

    async def run() -> None:
        machine = HeldMachine()
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


class SlowDownload(Cache):
    """A store whose download waits for :attr:`gate` (a thread event: it runs in an
    executor, as the real one does)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def ensure(self, target: str, prepare: Any = None, claim: Any = None) -> Any:
        if not self.ensured:
            self.gate.wait(timeout=60)
        return super().ensure(target, prepare, claim)


def test_the_load_limit_covers_the_download() -> None:
    """The platform lets a cold model "download and load into the inference container for
    up to 360 seconds" (the MME guide): a download still running at the limit fails the
    load then, as a ModelError, and the next call loads it again (the limit timed Triton's
    load alone: the download could take any time, and the load 360 s more)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        cache = SlowDownload()
        options = InstanceOptions(busy_wait_s=0.2, release_timeout_s=1.0, load_timeout_s=0.5)
        inst = fake_instance(machine, control, limit_bytes=500 * MIB, cache=cache, options=options)
        await inst.start()
        try:
            with pytest.raises(ModelLoadError, match=r"not downloaded and loaded within 0\.5s"):
                await asyncio.wait_for(inst.acquire("m"), timeout=10.0)
            assert control.calls == [] and "m" not in inst.models and cache.pins == {}
        finally:
            cache.gate.set()
        await asyncio.wait_for(inst.acquire("m"), timeout=10.0)  # loaded again
        inst.release("m")
        assert control.calls == [("load", "m")]
        await inst.stop()
        inst.close()

    asyncio.run(run())


def test_triton_gets_what_is_left_of_the_load_limit() -> None:
    """``POST /models`` waits only for what the download left of the limit, then the
    load is undone with a DELETE (it waited the whole limit again)."""

    async def run() -> None:
        asked: list[bytes] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:  # a load is never answered, a DELETE at once
                head = await reader.readuntil(b"\r\n\r\n")
                asked.append(head)
                if head.startswith(b"DELETE"):
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        options = InstanceOptions(load_timeout_s=30.0, unload_timeout_s=10.0)
        control = SageMakerControl(
            options=options,
            connection_error=lambda exc: EmulatorError(str(exc)),
            log_path=lambda: None,
        )
        control.connect(f"http://127.0.0.1:{port}", None)
        loop = asyncio.get_running_loop()
        entry = ModelEntry(
            target="m", key="k", state="loading", last_used_s=0.0, future=loop.create_future()
        )
        entry.load_deadline_s = loop.time() + 0.3  # the download took the rest
        t0 = loop.time()
        with pytest.raises(ModelLoadError, match="within 30s"):
            await asyncio.wait_for(control.post_load(entry, "/models/m"), timeout=10.0)
        assert loop.time() - t0 < 5.0
        await wait_for_async(lambda: len(asked) == 2, timeout_s=10, what="the DELETE")
        assert asked[1].startswith(b"DELETE /models/k ")
        control.close()
        server.close()

    asyncio.run(run())


def test_a_failed_undo_of_a_load_past_the_limit_still_answers_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The DELETE that undoes a load still running at the limit fails (Triton drops the
    connection): the caller gets the load limit's ModelLoadError, and the failed undo is
    logged (the caller got the DELETE's connection error, as if the load had failed
    for that). The undo runs on after the caller's answer (``entry.undo``)."""

    async def run() -> None:
        asked: list[bytes] = []

        async def dropping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                while True:  # a load is never answered, a DELETE's connection is dropped
                    head = await reader.readuntil(b"\r\n\r\n")
                    asked.append(head)
                    if head.startswith(b"DELETE"):
                        break
            writer.close()

        server = await asyncio.start_server(dropping, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        control = SageMakerControl(
            options=InstanceOptions(load_timeout_s=30.0, unload_timeout_s=10.0),
            connection_error=lambda exc: EmulatorError(f"connection failed: {exc}"),
            log_path=lambda: None,
        )
        control.connect(f"http://127.0.0.1:{port}", None)
        loop = asyncio.get_running_loop()
        entry = ModelEntry(
            target="m", key="k", state="loading", last_used_s=0.0, future=loop.create_future()
        )
        entry.load_deadline_s = loop.time() + 0.3
        logged = caplog.at_level(logging.WARNING, logger="mmelocal.emulator.sagemaker_control")
        with logged:
            with pytest.raises(ModelLoadError, match="within 30s"):
                await asyncio.wait_for(control.post_load(entry, "/models/m"), timeout=10.0)
            assert entry.undo is not None  # the undo runs on after the caller's answer
            await asyncio.wait_for(entry.undo, timeout=10.0)
        assert any(head.startswith(b"DELETE /models/k ") for head in asked)
        (record,) = [r for r in caplog.records if r.name.endswith("sagemaker_control")]
        assert "'m'" in record.getMessage() and "connection failed" in record.getMessage()
        control.close()
        server.close()

    asyncio.run(run())


class GatedStore(LocalStore):
    """A folder of tarballs whose downloads wait for :attr:`gate` (a thread event: they run
    in an executor, as every download does)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()

    def fetch(self, target: str, dest: Path) -> int:
        self.gate.wait(timeout=60)
        return super().fetch(target, dest)


def test_a_download_cut_off_by_the_load_limit_leaves_its_artifact_unclaimed(
    tmp_path: Path,
) -> None:
    """The load gives up at the limit while its download goes on: once the download ends,
    its artifact is on disk for a retry but held for no one, so the disk budget may delete
    it (it stayed claimed for the load for CLAIM_S, 900 s, and no other download could
    take its room)."""
    store = tmp_path / "store"
    store.mkdir()
    for i in range(2):
        write_tarball(store / f"model-{i}.tar.gz", scale=float(i))
    probe = ArtifactCache(tmp_path / "probe", LocalStore(store), disk_budget_bytes=10**9)
    size = probe.ensure("model-0.tar.gz").artifact.size_bytes
    gated = GatedStore(store)
    cache = ArtifactCache(tmp_path / "cache", gated, disk_budget_bytes=int(1.5 * size))

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        options = InstanceOptions(busy_wait_s=0.2, release_timeout_s=1.0, load_timeout_s=0.5)
        real_cache: Any = cache
        inst = fake_instance(
            machine, control, limit_bytes=500 * MIB, cache=real_cache, options=options
        )
        await inst.start()
        try:
            with pytest.raises(ModelLoadError, match=r"within 0\.5s"):
                await asyncio.wait_for(inst.acquire("model-0.tar.gz"), timeout=10.0)
        finally:
            gated.gate.set()
        await wait_for_async(
            lambda: cache.lookup("model-0.tar.gz") is not None, timeout_s=30, what="the download"
        )
        await inst.stop()
        inst.close()

    asyncio.run(run())
    cache.ensure("model-1.tar.gz")  # needs the room the abandoned artifact holds
    cache.close()
    assert cache.targets() == ["model-1.tar.gz"]


async def _never_loads(
    asked: list[bytes], delete_gate: asyncio.Event
) -> tuple[asyncio.Server, int]:
    """A SageMaker front end whose loads never end (a stub that cannot start hangs one so)
    and whose DELETEs are answered once ``delete_gate`` is set."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                asked.append(head)
                if head.startswith(b"DELETE"):
                    await delete_gate.wait()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_a_load_given_up_at_the_limit_is_unloading_while_its_undo_runs() -> None:
    """Triton still loads a model at the load limit: its callers get the limit's
    ModelError at the limit, and the model shows as unloading (not loading) while the
    DELETE undoing it runs, which may take up to the unload timeout (350 s). The callers
    waited for that DELETE, the model showed as loading and the instance's load lock was
    held meanwhile (no other load could start). A call for it meanwhile waits for the
    undo as for any unload; its artifact stays pinned until the DELETE ends."""

    async def run() -> None:
        asked: list[bytes] = []
        gate = asyncio.Event()
        server, port = await _never_loads(asked, gate)
        machine = Machine(total_bytes=1000 * MIB)
        options = InstanceOptions(
            busy_wait_s=0.2, release_timeout_s=1.0, load_timeout_s=0.5, unload_timeout_s=30.0
        )
        cache = Cache()
        inst = fake_instance(
            machine, Control(machine, size=MIB), limit_bytes=500 * MIB, options=options, cache=cache
        )
        await inst.start()
        control = SageMakerControl(
            options=options,
            connection_error=lambda exc: EmulatorError(str(exc)),
            log_path=lambda: None,
        )
        control.connect(f"http://127.0.0.1:{port}", None)
        inst.control = inst.evictor.control = inst.loader.control = control
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(ModelLoadError, match=r"within 0\.5s"):
            await asyncio.wait_for(inst.acquire("m", wait_timeout_s=60.0), timeout=10.0)
        assert loop.time() - t0 < 5.0  # at the limit, not after the DELETE
        await wait_for_async(
            lambda: any(h.startswith(b"DELETE") for h in asked), timeout_s=10, what="the undo"
        )
        assert inst.models["m"].state == UNLOADING
        assert [e["state"] for e in inst.usage_snapshot()] == ["unloading"]
        assert not inst.state.load_lock.locked() and cache.pins == {"m": 1}
        call = asyncio.ensure_future(inst.acquire("m", wait_timeout_s=60.0))
        await wait_for_async(lambda: inst.models["m"].waiters == 1, timeout_s=10)
        assert sum(h.startswith(b"POST /models ") for h in asked) == 1  # it waits, no load
        gate.set()  # the DELETE ends: the waiting call loads it again (and hits the limit)
        with pytest.raises(ModelLoadError, match=r"within 0\.5s"):
            await asyncio.wait_for(call, timeout=10.0)
        assert sum(h.startswith(b"POST /models ") for h in asked) == 2
        await wait_for_async(lambda: "m" not in inst.models, timeout_s=10, what="undone")
        assert cache.pins == {"m": 0}
        await inst.stop()
        inst.close()
        control.close()
        server.close()

    asyncio.run(run())


def test_the_undo_of_a_load_past_the_limit_is_recorded_as_an_unload() -> None:
    """The DELETE undoing a load given up at the limit unloads the model from Triton, as
    any unload: one ``unload`` event naming the limit, one ``ModelUnloadingTime`` sample and
    one ``ModelUnloads`` (it was in no event and no metric: the unload was invisible)."""

    async def run() -> None:
        asked: list[bytes] = []
        gate = asyncio.Event()
        server, port = await _never_loads(asked, gate)
        machine = Machine(total_bytes=1000 * MIB)
        options = InstanceOptions(
            busy_wait_s=0.2, release_timeout_s=1.0, load_timeout_s=0.5, unload_timeout_s=30.0
        )
        inst = fake_instance(
            machine, Control(machine, size=MIB), limit_bytes=500 * MIB, options=options
        )
        await inst.start()
        control = SageMakerControl(
            options=options,
            connection_error=lambda exc: EmulatorError(str(exc)),
            log_path=lambda: None,
        )
        control.connect(f"http://127.0.0.1:{port}", None)
        inst.control = inst.evictor.control = inst.loader.control = control
        with pytest.raises(ModelLoadError, match=r"within 0\.5s"):
            await asyncio.wait_for(inst.acquire("m", wait_timeout_s=60.0), timeout=10.0)
        await wait_for_async(
            lambda: any(h.startswith(b"DELETE") for h in asked), timeout_s=10, what="the undo"
        )
        assert inst.events.recent("unload") == []  # not before the DELETE ends
        gate.set()
        await wait_for_async(lambda: "m" not in inst.models, timeout_s=10, what="undone")
        (event,) = inst.events.recent("unload")
        assert (event.target, event.instance) == ("m", 0)
        assert "load limit" in event.reason and event.duration_ms is not None
        assert inst.metrics.summaries["ModelUnloadingTime"].count == 1
        assert inst.metrics.counters["ModelUnloads"] == 1
        assert inst.metrics.counters["ModelEvictions"] == 0
        await inst.stop()
        inst.close()
        control.close()
        server.close()

    asyncio.run(run())
