"""Memory probes: how much memory one Triton instance uses, against what total.

Two implementations of one :class:`MemoryProbe` protocol, chosen by :func:`choose_probe`,
both reading through :mod:`mmelocal.runtime.memory`:

* :class:`NvmlProbe` (a GPU is visible through NVML, package ``nvidia-ml-py``): device
  memory used and total; the GPU memory of each process of the Triton tree where the driver
  reports it (``per_process_bytes`` is None where it does not, and where its list names
  none of the tree's processes: inside a container of its own pid namespace the driver
  still gives the host's pids).
* :class:`HostProbe` (no GPU), named ``host-pss``: the summed proportional set size (PSS)
  of the Triton process tree (the server and its Python-backend stubs) against a configured
  budget. PSS divides each shared page among the processes that map it, so libtorch or
  libpython count once for the tree, not once per stub as resident sizes (RSS) would.
  It reads through :class:`~mmelocal.runtime.memory.TreeMemoryReader`, whose docstring and
  module give the cost per reading (``benchmarks/probe_cost.py``). Where the server's
  processes are not this machine's (a Docker engine in Docker Desktop's VM: the launcher
  gives no pid), it reads the container's memory as the engine counts it instead (named
  ``host-engine``: no per-process figures, so a load's footprint is its whole growth).

Readings are blocking (``/proc`` or NVML): call them from an executor, not the event loop.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mmelocal.errors import UserInputError
from mmelocal.runtime.memory import Nvml, TreeMemoryReader, process_tree_pids
from mmelocal.units import mib

logger = logging.getLogger(__name__)

PidSource = Callable[[], "int | None"]
#: a launcher's ``container_memory_bytes``: its server's memory as a container engine counts it
EngineMemorySource = Callable[[], "int | None"]


@dataclass(frozen=True, kw_only=True)
class MemoryReading:
    """One reading: ``used_bytes`` of ``total_bytes`` (a device's memory or a budget).

    ``per_process_bytes`` is what each process of the Triton tree holds on its own (USS on
    the host, the driver's per-process figure on a GPU; None where the driver does not say)
    and ``server_pid`` the tree's root: together they split a load's growth into the new
    model's own memory and the rest (see :mod:`mmelocal.bench.capacity.footprint`).
    ``per_process_pss_bytes`` (the host probe's) is each process's PSS, its USS plus its
    share of the pages it shares: the parts ``used_bytes`` sums (a GPU's per-process
    figures share nothing: None there).
    """

    used_bytes: int
    total_bytes: int
    process_bytes: int | None = None
    utilization_percent: float | None = None
    rss_bytes: int | None = None
    server_pid: int | None = None
    per_process_bytes: Mapping[int, int] | None = None
    per_process_pss_bytes: Mapping[int, int] | None = None

    @property
    def used_fraction(self) -> float:
        """``used / total`` (0 when total is unknown)."""
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0


@runtime_checkable
class MemoryProbe(Protocol):
    """Reads the memory one Triton instance can use."""

    @property
    def name(self) -> str:
        """Short description for logs and /ping (e.g. ``host-pss`` or ``nvml:0``)."""
        ...

    @property
    def kind(self) -> str:
        """``"gpu"`` or ``"host"``."""
        ...

    def read(self) -> MemoryReading:
        """A fresh reading (blocking)."""
        ...


class CappedProbe:
    """Another probe whose total is at most ``total_bytes``: a smaller card's memory on a
    bigger GPU (the local AWS runs an ``ml.g5.xlarge`` endpoint as a 24 GB A10G)."""

    def __init__(self, inner: MemoryProbe, total_bytes: int) -> None:
        self.inner = inner
        self.total_bytes = total_bytes

    @property
    def name(self) -> str:
        """The inner probe's name and the cap."""
        return f"{self.inner.name}(cap {self.total_bytes / 2**30:.2f} GiB)"

    @property
    def kind(self) -> str:
        """The inner probe's kind."""
        return self.inner.kind

    def read(self) -> MemoryReading:
        """The inner reading with its total capped."""
        reading = self.inner.read()
        return dataclasses.replace(reading, total_bytes=min(reading.total_bytes, self.total_bytes))


class HostProbe:
    """Summed PSS of the Triton process tree against ``budget_bytes`` (no GPU).

    ``engine_memory`` (a Docker launcher's ``container_memory_bytes``) is read instead
    when ``pid_source`` gives no pid: a server whose processes are not this machine's."""

    kind = "host"

    def __init__(
        self,
        pid_source: PidSource,
        *,
        budget_bytes: int,
        engine_memory: EngineMemorySource | None = None,
    ) -> None:
        if budget_bytes <= 0:
            raise UserInputError(f"memory budget_bytes must be > 0, got {budget_bytes}")
        self._pid_source = pid_source
        self._engine_memory = engine_memory
        self.budget_bytes = budget_bytes
        self.reader = TreeMemoryReader()
        #: what the last reading read: ``pss`` (the process tree) or ``engine``
        self.source = "pss"

    @property
    def name(self) -> str:
        """``host-pss`` (``host-engine`` once it read the engine's figure) plus the budget."""
        return f"host-{self.source}(budget {mib(self.budget_bytes)})"

    def read(self) -> MemoryReading:
        """PSS summed over the server and its children (USS and RSS alongside); without a
        pid, the engine's figure for the container where there is one."""
        pid = self._pid_source()
        if pid is None and self._engine_memory is not None:
            used = self._engine_memory()
            if used is not None:
                self.source = "engine"
                return MemoryReading(
                    used_bytes=used, total_bytes=self.budget_bytes, process_bytes=used
                )
        tree = self.reader.read(pid)
        used = tree.pss_bytes
        return MemoryReading(
            used_bytes=used,
            total_bytes=self.budget_bytes,
            process_bytes=used,
            rss_bytes=tree.rss_bytes,
            server_pid=tree.pids[0] if tree.processes else None,
            per_process_bytes=tree.uss_by_pid(),
            per_process_pss_bytes=tree.pss_by_pid(),
        )


class NvmlProbe:
    """GPU memory of one device through NVML (``nvidia-ml-py``)."""

    kind = "gpu"

    def __init__(self, device_index: int, pid_source: PidSource | None = None) -> None:
        self._nvml = Nvml()
        self.device_index = device_index
        self._nvml.handle(device_index)  # fails now for a GPU that is not there
        self._pid_source = pid_source

    @property
    def name(self) -> str:
        """``nvml:<index>``."""
        return f"nvml:{self.device_index}"

    def read(self) -> MemoryReading:
        """Device used/total, GPU utilization and the Triton tree's share when reported."""
        used, total = self._nvml.memory(self.device_index)
        process_bytes: int | None = None
        mine: dict[int, int] | None = None
        pids: list[int] = []
        if self._pid_source is not None:
            pids = process_tree_pids(self._pid_source())
            by_pid = self._nvml.process_used_bytes(self.device_index)
            # the driver gives host pids whatever namespace asks (NVIDIA/nvidia-docker#1483):
            # a list naming none of the tree's processes is no figure of theirs
            if by_pid is not None and (not by_pid or not by_pid.keys().isdisjoint(pids)):
                mine = {pid: by_pid.get(pid, 0) for pid in pids}
                process_bytes = sum(mine.values())
        return MemoryReading(
            used_bytes=used,
            total_bytes=total,
            process_bytes=process_bytes,
            utilization_percent=self._nvml.utilization_percent(self.device_index),
            server_pid=pids[0] if pids else None,
            per_process_bytes=mine,
        )


def choose_probe(
    pid_source: PidSource,
    *,
    budget_bytes: int,
    gpu_index: int | None = None,
) -> MemoryProbe:
    """NVML on ``gpu_index`` when one is given and usable, else the host PSS probe."""
    if gpu_index is not None:
        try:
            probe: MemoryProbe = NvmlProbe(gpu_index, pid_source)
            logger.info("memory probe: %s", probe.name)
            return probe
        except Exception as exc:
            logger.warning("NVML unavailable (%s); using the host PSS probe", exc)
    probe = HostProbe(pid_source, budget_bytes=budget_bytes)
    logger.info("memory probe: %s", probe.name)
    return probe


class TreeCpuMeter:
    """CPU use of a process tree since this meter's previous reading, in percent of one
    core (a process new to the meter counts from its first reading). The baseline is the
    meter's own: each reader of the figure (a ``/metrics`` scrape, the local CloudWatch's
    period) keeps one, so that one reading does not shorten the interval another covers."""

    def __init__(self) -> None:
        # psutil keeps cpu_percent's baseline on the Process object: one per pid, kept
        # while that process stays in the tree
        self._processes: dict[int, Any] = {}

    def percent(self, pid: int | None) -> float:
        """CPU of ``pid`` and its children since this meter's previous reading (blocking:
        ``/proc``); 0 for no process."""
        if pid is None:
            return 0.0
        import psutil

        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0.0
        kept: dict[int, Any] = {}
        for proc in procs:
            known = self._processes.get(proc.pid)
            try:
                if known is None or known.create_time() != proc.create_time():
                    known = proc  # a new process, or a new one under a reused pid
                total += known.cpu_percent(None)
            except psutil.Error:
                continue
            kept[proc.pid] = known
        self._processes = kept
        return total


__all__ = [
    "CappedProbe",
    "EngineMemorySource",
    "HostProbe",
    "MemoryProbe",
    "MemoryReading",
    "NvmlProbe",
    "TreeCpuMeter",
    "choose_probe",
]
