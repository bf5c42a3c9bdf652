"""Stand-ins for Triton in the lifecycle tests (``from lifecycle_fakes import ...``): memory
that follows the loads, a recorder of the front end's control calls, the artifact cache's
pin count and a launcher whose process can die, so a loader, an evictor or a whole
:class:`~mmelocal.emulator.instance.TritonInstance` runs with no server."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mmelocal.emulator.events import EventLog
from mmelocal.emulator.instance import TritonInstance
from mmelocal.emulator.metrics import Metrics
from mmelocal.emulator.model_state import InstanceOptions, ModelEntry
from mmelocal.emulator.probes import MemoryReading
from mmelocal.errors import ServerStartError
from mmelocal.runtime.launcher import Endpoints

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


class StubMachine(Machine):
    """Each loaded model is a stub process of its own (a Python-backend model's), with a pid
    it keeps until it exits, beside the server's process (pid 1, ``base_bytes``); readings
    carry per-process figures as the host probe's do (its USS)."""

    SERVER_PID = 1

    def __init__(self, *, total_bytes: int, base_bytes: int = 0) -> None:
        super().__init__(total_bytes=total_bytes, base_bytes=base_bytes)
        self.pids: dict[str, int] = {}
        self._next_pid = 100

    def read(self) -> MemoryReading:
        per_process = {self.SERVER_PID: self.base_bytes}
        for target in set(self.pids) - set(self.resident):
            del self.pids[target]  # its stub exited: a new load starts another
        for target, used in self.resident.items():
            if target not in self.pids:
                self.pids[target], self._next_pid = self._next_pid, self._next_pid + 1
            per_process[self.pids[target]] = used
        return MemoryReading(
            used_bytes=sum(per_process.values()),
            total_bytes=self.total_bytes,
            server_pid=self.SERVER_PID,
            per_process_bytes=per_process,
        )


class ServerModelMachine(Machine):
    """Every loaded model runs in the server's own process (pid 1: a TorchScript or ONNX
    model, no stub of its own); readings carry per-process figures as the probes' do."""

    SERVER_PID = 1

    def read(self) -> MemoryReading:
        used = self.base_bytes + sum(self.resident.values())
        return MemoryReading(
            used_bytes=used,
            total_bytes=self.total_bytes,
            server_pid=self.SERVER_PID,
            per_process_bytes={self.SERVER_PID: used},
        )


class HeldMachine(Machine):
    """A machine over a 500 MiB limit whose next reading, once ``hold`` is set, stops until
    the test sets ``go_on`` (``entered`` says it got there): a trim or a load caught in
    the middle of its memory reading."""

    def __init__(self) -> None:
        super().__init__(total_bytes=1000 * MIB, base_bytes=900 * MIB)
        self.hold = False
        self.entered = threading.Event()
        self.go_on = threading.Event()

    def read(self) -> MemoryReading:
        if self.hold:
            self.hold = False
            self.entered.set()
            self.go_on.wait(timeout=30)
        return super().read()


class Control:
    """Records the control calls; a load adds ``size`` bytes, a DELETE frees them."""

    def __init__(self, machine: Machine, *, size: int, answers: list[int] | None = None) -> None:
        self.machine = machine
        self.size = size
        self.answers = answers or []
        self.calls: list[tuple[str, str]] = []
        self.url = "http://127.0.0.1:2"

    def connect(self, sagemaker_url: str, v2_url: str | None, *, bridge: str | None = None) -> None:
        self.url = sagemaker_url

    def close(self) -> None:
        pass

    def log_path(self) -> Path | None:
        return None

    async def post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        self.calls.append(("load", entry.target))
        if entry.target in self.machine.resident:  # Triton's answer for a model it has
            return 409, f"model {entry.target} is already loaded"
        status = self.answers.pop(0) if self.answers else 200
        if status == 200:
            self.machine.resident[entry.target] = self.size
        return status, "" if status == 200 else "CUDA out of memory"

    async def delete(self, entry: ModelEntry) -> int:
        self.calls.append(("delete", entry.target))
        self.machine.resident.pop(entry.target, None)
        return 200


class GatedDelete(Control):
    """A DELETE that waits for :attr:`gate`."""

    def __init__(self, machine: Machine) -> None:
        super().__init__(machine, size=100 * MIB)
        self.gate = asyncio.Event()

    async def delete(self, entry: ModelEntry) -> int:
        await self.gate.wait()
        return await super().delete(entry)


class Cache:
    """The artifact cache's part the loader uses: ensure, release, and pin / unpin counted
    per target as the real cache counts them."""

    def __init__(self) -> None:
        self.pins: dict[str, int] = {}
        self.store = SimpleNamespace(description="test store")
        #: the targets :meth:`ensure` was asked for (a download when not on disk)
        self.ensured: list[str] = []

    def ensure(self, target: str, prepare: Any = None, claim: Any = None) -> Any:
        self.ensured.append(target)
        artifact = SimpleNamespace(serve_dir=Path("/models") / target, size_bytes=1)
        return SimpleNamespace(downloaded=False, artifact=artifact)

    def lookup(self, target: str) -> Any:
        return None

    def pin(self, target: str, claim: Any = None) -> None:
        self.pins[target] = self.pins.get(target, 0) + 1

    def release(self, claim: Any) -> None:
        pass

    def unpin(self, target: str) -> None:
        if self.pins.get(target):
            self.pins[target] -= 1


class TorchCache(Cache):
    """Artifacts whose served folder is a TorchScript model (its config names the runtime:
    Triton runs it in its own process)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def ensure(self, target: str, prepare: Any = None, claim: Any = None) -> Any:
        self.ensured.append(target)
        folder = self.root / target / "m"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.pbtxt").write_text('name: "m"\nplatform: "pytorch_libtorch"\n')
        artifact = SimpleNamespace(serve_dir=folder.parent, size_bytes=1)
        return SimpleNamespace(downloaded=False, artifact=artifact)


class Launcher:
    """A Triton process that can die: its death empties the machine's memory."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.alive = False
        self.starts = 0
        #: how many of the next starts fail
        self.failing_starts = 0
        self.endpoints = Endpoints(
            http_url="http://127.0.0.1:1", sagemaker_url="http://127.0.0.1:2"
        )
        self.log_path: Path | None = None
        self.model_repository: Path | None = None

    def start(self) -> None:
        self.starts += 1
        if self.failing_starts:
            self.failing_starts -= 1
            raise ServerStartError("tritonserver did not become ready (test)")
        self.alive = True

    def stop(self) -> None:
        self.alive = False
        self.machine.resident.clear()

    def is_alive(self) -> bool:
        return self.alive

    def pid(self) -> int | None:
        return None


def fake_instance(
    machine: Machine,
    control: Control,
    *,
    limit_bytes: int,
    cache: Cache | None = None,
    options: InstanceOptions | None = None,
    index: int = 0,
) -> TritonInstance:
    """A TritonInstance whose server is :class:`Launcher` and whose calls go to ``control``
    (start it with ``await inst.start()``)."""
    inst = TritonInstance(
        index=index,
        launcher=Launcher(machine),  # type: ignore[arg-type]
        probe=machine,
        cache=cache if cache is not None else Cache(),  # type: ignore[arg-type]
        metrics=Metrics(),
        events=EventLog(),
        options=options or InstanceOptions(busy_wait_s=0.2, release_timeout_s=1.0),
    )
    inst.control = inst.evictor.control = inst.loader.control = control  # type: ignore[assignment]
    inst.gauge.limit_override_bytes = limit_bytes
    return inst
