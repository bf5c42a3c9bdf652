"""Memory probes: how much memory one Triton instance uses, against what total.

Two implementations of one :class:`MemoryProbe` protocol, chosen by :func:`choose_probe`:

* :class:`NvmlProbe` (a GPU is visible through NVML, package ``nvidia-ml-py``): device
  memory used and total; per-process usage of the Triton process tree when the driver
  reports it.
* :class:`HostProbe` (no GPU): the resident memory (RSS) of the Triton process tree (the
  server and its Python-backend stub children) against a configured budget.

Readings are blocking (``/proc`` or NVML): call them from an executor, not the event loop.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mmelocal.errors import MissingDependencyError, UserInputError

logger = logging.getLogger(__name__)

PidSource = Callable[[], "int | None"]


@dataclass(frozen=True, kw_only=True)
class MemoryReading:
    """One reading: ``used_bytes`` of ``total_bytes`` (a device's memory or a budget)."""

    used_bytes: int
    total_bytes: int
    process_bytes: int | None = None
    utilization_percent: float | None = None

    @property
    def used_fraction(self) -> float:
        """``used / total`` (0 when total is unknown)."""
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0


@runtime_checkable
class MemoryProbe(Protocol):
    """Reads the memory one Triton instance can use."""

    @property
    def name(self) -> str:
        """Short description for logs and /ping (e.g. ``host-rss`` or ``nvml:0``)."""
        ...

    @property
    def kind(self) -> str:
        """``"gpu"`` or ``"host"``."""
        ...

    def read(self) -> MemoryReading:
        """A fresh reading (blocking)."""
        ...


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _proc_tree_rss(pid: int) -> tuple[int, list[int]] | None:
    """Linux fast path: ``/proc/PID/task/*/children`` and ``statm`` (None when unavailable)."""
    total = 0
    pids: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE_BYTES
            tasks = os.listdir(f"/proc/{current}/task")
        except (OSError, ValueError, IndexError):
            if current == pid:
                return (0, []) if not os.path.exists(f"/proc/{pid}") else None
            continue
        pids.append(current)
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children", "rb") as fh:
                    todo += [int(c) for c in fh.read().split()]
            except FileNotFoundError:
                if tid == str(current) and not os.path.exists(f"/proc/{current}/task/{tid}"):
                    continue
                if tid == str(current):
                    return None  # kernel without CONFIG_PROC_CHILDREN
            except (OSError, ValueError):
                continue
    return total, pids


def process_tree_rss(pid: int | None) -> tuple[int, list[int]]:
    """RSS in bytes of ``pid`` and all its descendants, and their pids (0, [] if gone)."""
    if pid is None:
        return 0, []
    fast = _proc_tree_rss(pid) if sys.platform.startswith("linux") else None
    if fast is not None:
        return fast
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, []
    total = 0
    pids: list[int] = []
    for proc in procs:
        try:
            total += proc.memory_info().rss
            pids.append(proc.pid)
        except psutil.Error:
            continue
    return total, pids


class HostProbe:
    """RSS of the Triton process tree against ``budget_bytes`` (no GPU)."""

    kind = "host"

    def __init__(self, pid_source: PidSource, *, budget_bytes: int) -> None:
        if budget_bytes <= 0:
            raise UserInputError(f"memory budget_bytes must be > 0, got {budget_bytes}")
        self._pid_source = pid_source
        self.budget_bytes = budget_bytes

    @property
    def name(self) -> str:
        """``host-rss`` plus the budget."""
        return f"host-rss(budget {self.budget_bytes / 2**30:,.2f} GiB)"

    def read(self) -> MemoryReading:
        """Sum of RSS over the server and its children."""
        used, _ = process_tree_rss(self._pid_source())
        return MemoryReading(used_bytes=used, total_bytes=self.budget_bytes, process_bytes=used)


class NvmlProbe:
    """GPU memory of one device through NVML (``nvidia-ml-py``)."""

    kind = "gpu"

    def __init__(self, device_index: int, pid_source: PidSource | None = None) -> None:
        self._nvml = _nvml()
        self._nvml.nvmlInit()
        self.device_index = device_index
        self._handle = self._nvml.nvmlDeviceGetHandleByIndex(device_index)
        self._pid_source = pid_source

    @property
    def name(self) -> str:
        """``nvml:<index>``."""
        return f"nvml:{self.device_index}"

    def read(self) -> MemoryReading:
        """Device used/total, GPU utilization and the Triton tree's share when reported."""
        nvml = self._nvml
        info = nvml.nvmlDeviceGetMemoryInfo(self._handle)
        util: float | None = None
        try:
            util = float(nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
        except nvml.NVMLError:
            util = None
        process_bytes: int | None = None
        if self._pid_source is not None:
            _, pids = process_tree_rss(self._pid_source())
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
                process_bytes = sum(int(p.usedGpuMemory or 0) for p in procs if p.pid in set(pids))
            except nvml.NVMLError:
                process_bytes = None
        return MemoryReading(
            used_bytes=int(info.used),
            total_bytes=int(info.total),
            process_bytes=process_bytes,
            utilization_percent=util,
        )


def _nvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise MissingDependencyError(
            "nvidia-ml-py", extra="gpu", feature="GPU memory probe"
        ) from exc
    return pynvml


def gpu_count() -> int:
    """Number of GPUs NVML sees (0 without the package, a driver or a GPU)."""
    try:
        nvml = _nvml()
        nvml.nvmlInit()
        return int(nvml.nvmlDeviceGetCount())
    except Exception:
        return 0


def choose_probe(
    pid_source: PidSource,
    *,
    budget_bytes: int,
    gpu_index: int | None = None,
) -> MemoryProbe:
    """NVML on ``gpu_index`` when one is given and usable, else the host RSS probe."""
    if gpu_index is not None:
        try:
            probe: MemoryProbe = NvmlProbe(gpu_index, pid_source)
            logger.info("memory probe: %s", probe.name)
            return probe
        except Exception as exc:
            logger.warning("NVML unavailable (%s); using the host RSS probe", exc)
    probe = HostProbe(pid_source, budget_bytes=budget_bytes)
    logger.info("memory probe: %s", probe.name)
    return probe


def cpu_percent_of_tree(pid: int | None) -> float:
    """CPU use of the process tree since the previous call, in percent of one core."""
    if pid is None:
        return 0.0
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            total += _cached_process(proc).cpu_percent(None)
        except psutil.Error:
            continue
    return total


_PROCESS_CACHE: dict[int, Any] = {}


def _cached_process(proc: Any) -> Any:
    """psutil needs the same Process object between calls to compute cpu_percent."""
    cached = _PROCESS_CACHE.get(proc.pid)
    if cached is None or cached.create_time() != proc.create_time():
        if len(_PROCESS_CACHE) > 1024:
            _PROCESS_CACHE.clear()
        _PROCESS_CACHE[proc.pid] = cached = proc
    return cached


__all__ = [
    "HostProbe",
    "MemoryProbe",
    "MemoryReading",
    "NvmlProbe",
    "choose_probe",
    "cpu_percent_of_tree",
    "gpu_count",
    "process_tree_rss",
]
