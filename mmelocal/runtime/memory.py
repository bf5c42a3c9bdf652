"""Memory of a running Triton as the machine gives it: the process tree's PSS/USS/RSS, NVML.

Host memory (:func:`process_tree_memory`): for the server and every descendant (the
Python-backend stubs) psutil's ``memory_full_info`` (one read of ``/proc/PID/smaps_rollup``
on Linux) gives

* ``pss_bytes``: proportional set size, each shared page divided among the processes that
  map it. Summed over the tree it counts a shared library (libtorch, libpython) once, not
  once per stub: it is the figure the machine actually gives the tree.
* ``uss_bytes``: unique set size (private clean + private dirty pages): what the kernel would
  free if that process alone exited.
* ``rss_bytes``: resident set size, shared pages counted in full in every process (kept for
  comparison; summed over a tree it overstates by the shared runtime once per process).

Cost (``benchmarks/probe_cost.py``, the shared 2-core development machine): reading
``smaps_rollup`` makes the kernel walk the process's page tables, so it grows with resident
memory: a tree of 5 small processes takes 0.6-0.8 ms, a tree shaped like Triton with 4
torch stubs (2.4 GiB resident) 34-38 ms. :class:`TreeMemoryReader` (the host probe's)
reads it again only when the tree changed, and otherwise costs one ``statm`` per process:
about 0.2 ms for that same tree.

GPU memory (:class:`Nvml`): device used/total, utilization, and the GPU memory of given
processes where the driver reports it (``nvmlDeviceGetComputeRunningProcesses``; inside
containers and under some drivers it reports nothing, and :meth:`Nvml.process_used_bytes`
says so by answering None).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mmelocal.errors import MissingDependencyError

logger = logging.getLogger(__name__)

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True, kw_only=True)
class ProcessMemory:
    """Memory of one process (bytes)."""

    pid: int
    rss_bytes: int
    pss_bytes: int
    uss_bytes: int


@dataclass(frozen=True, kw_only=True)
class TreeMemory:
    """Memory of a process tree: ``processes[0]`` is the root (empty when it is gone)."""

    processes: tuple[ProcessMemory, ...] = ()

    @property
    def pids(self) -> list[int]:
        """Pids read, root first."""
        return [p.pid for p in self.processes]

    @property
    def pss_bytes(self) -> int:
        """Sum of PSS: what the tree costs the machine."""
        return sum(p.pss_bytes for p in self.processes)

    @property
    def uss_bytes(self) -> int:
        """Sum of USS: what exiting the whole tree frees for sure."""
        return sum(p.uss_bytes for p in self.processes)

    @property
    def rss_bytes(self) -> int:
        """Sum of RSS (shared pages counted once per process: an overstatement)."""
        return sum(p.rss_bytes for p in self.processes)

    def uss_by_pid(self) -> dict[int, int]:
        """USS of each process, by pid."""
        return {p.pid: p.uss_bytes for p in self.processes}

    def pss_by_pid(self) -> dict[int, int]:
        """PSS of each process, by pid (they sum to :attr:`pss_bytes`)."""
        return {p.pid: p.pss_bytes for p in self.processes}


_rss_warned: set[int] = set()


def process_memory(pid: int) -> ProcessMemory | None:
    """PSS/USS/RSS of one process (psutil; where a system has no PSS or USS, RSS stands in);
    None when it is gone.

    ``smaps_rollup`` (PSS, USS) is readable by the process's owner and root alone,
    ``statm`` (RSS) by anyone: for another user's process (a container's root-owned
    Triton read by a non-root user) RSS stands in, with a warning once per process.
    """
    import psutil

    try:
        process = psutil.Process(pid)
        info: Any
        try:
            info = process.memory_full_info()
        except psutil.AccessDenied:
            info = process.memory_info()
            if pid not in _rss_warned:
                _rss_warned.add(pid)
                logger.warning(
                    "cannot read the PSS of pid %d (another user's process: run mmelocal "
                    "as that user or as root); its resident size (RSS) stands in, which "
                    "counts shared libraries once per process",
                    pid,
                )
    except psutil.Error:
        return None
    rss = int(info.rss)
    return ProcessMemory(
        pid=pid,
        rss_bytes=rss,
        pss_bytes=int(getattr(info, "pss", rss)),
        uss_bytes=int(getattr(info, "uss", rss)),
    )


def _proc_children(pid: int) -> list[int] | None:
    """Children from ``/proc/PID/task/*/children`` (None: this kernel cannot say)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                children += [int(c) for c in fh.read().split()]
        except FileNotFoundError:
            if tid == str(pid) and os.path.exists(f"/proc/{pid}/task/{tid}"):
                return None  # kernel without CONFIG_PROC_CHILDREN
        except (OSError, ValueError):
            continue
    return children


def process_tree_pids(pid: int | None) -> list[int]:
    """``pid`` and all its descendants, root first ([] when it is gone)."""
    if pid is None:
        return []
    if sys.platform.startswith("linux") and os.path.isdir(f"/proc/{pid}"):
        pids: list[int] = []
        todo = [pid]
        while todo:
            current = todo.pop(0)
            children = _proc_children(current)
            if children is None:
                break
            pids.append(current)
            todo += children
        else:
            return pids
    import psutil

    try:
        root = psutil.Process(pid)
        return [pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.Error:
        return []


def process_tree_memory(pid: int | None) -> TreeMemory:
    """PSS/USS/RSS of ``pid`` and every descendant (an empty tree when ``pid`` is gone)."""
    found = (process_memory(p) for p in process_tree_pids(pid))
    return TreeMemory(processes=tuple(p for p in found if p is not None))


def _statm_resident_bytes(pid: int) -> int | None:
    """Resident bytes from ``/proc/PID/statm`` (O(1) for the kernel; None when gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


class TreeMemoryReader:
    """:func:`process_tree_memory` that re-reads ``smaps_rollup`` only when needed.

    ``smaps_rollup`` costs the kernel a walk of the process's page tables, ``statm`` does
    not (figures in the module docstring). Each read lists the tree and reads every
    ``statm``; when the set of processes is the same, no resident size moved by more than
    ``tolerance_bytes`` and the last full reading is younger than ``max_age_s``, the last
    reading is returned. Any change re-reads every process (a new stub mapping libtorch
    lowers the PSS of the others), so a reading is never a mix of old and new shares.
    Thread-safe.
    """

    def __init__(self, *, max_age_s: float = 2.0, tolerance_bytes: int = 1024 * 1024) -> None:
        if max_age_s < 0 or tolerance_bytes < 0:
            raise ValueError("max_age_s and tolerance_bytes must be >= 0")
        self.max_age_s = max_age_s
        self.tolerance_bytes = tolerance_bytes
        self.full_reads = 0
        self._lock = threading.Lock()
        self._last = TreeMemory()
        self._stamp: dict[int, int | None] = {}
        self._at = -math.inf

    def read(self, pid: int | None) -> TreeMemory:
        """The tree under ``pid`` (see the class docstring for when it is read again)."""
        pids = process_tree_pids(pid)
        stamp = {p: _statm_resident_bytes(p) for p in pids}
        with self._lock:
            if self._unchanged(stamp):
                return self._last
        tree = TreeMemory(processes=tuple(m for m in map(process_memory, pids) if m is not None))
        with self._lock:
            self._last, self._stamp, self._at = tree, stamp, time.monotonic()
            self.full_reads += 1
        return tree

    def _unchanged(self, stamp: dict[int, int | None]) -> bool:
        if stamp.keys() != self._stamp.keys() or time.monotonic() - self._at > self.max_age_s:
            return False
        for pid, resident in stamp.items():
            before = self._stamp[pid]
            if resident is None or before is None:
                return False
            if abs(resident - before) > self.tolerance_bytes:
                return False
        return True


def process_tree_pss_bytes(pid: int | None) -> int | None:
    """Summed PSS of the tree under ``pid`` (None when it is gone)."""
    tree = process_tree_memory(pid)
    return tree.pss_bytes if tree.processes else None


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:
        raise MissingDependencyError(
            "nvidia-ml-py", extra="gpu", feature="GPU memory readings"
        ) from exc
    return pynvml


class Nvml:
    """NVML, initialised once: device memory, utilization and per-process GPU memory.

    Raises :class:`~mmelocal.errors.MissingDependencyError` without ``nvidia-ml-py`` and
    NVML's own error without a driver.
    """

    def __init__(self) -> None:
        self.lib = _pynvml()
        self.lib.nvmlInit()
        self._handles: dict[int, Any] = {}

    def device_count(self) -> int:
        """GPUs NVML sees."""
        return int(self.lib.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        """NVML handle of GPU ``index`` (looked up once)."""
        if index not in self._handles:
            self._handles[index] = self.lib.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def memory(self, index: int) -> tuple[int, int]:
        """``(used_bytes, total_bytes)`` of GPU ``index``."""
        info = self.lib.nvmlDeviceGetMemoryInfo(self.handle(index))
        return int(info.used), int(info.total)

    def name(self, index: int) -> str:
        """The card's product name as NVML gives it (``Tesla T4``, ``NVIDIA A10G``)."""
        raw = self.lib.nvmlDeviceGetName(self.handle(index))
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def uuid(self, index: int) -> str:
        """The card's UUID as ``nvidia-smi -L`` prints it (``GPU-8932f937-...``)."""
        raw = self.lib.nvmlDeviceGetUUID(self.handle(index))
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def utilization_percent(self, index: int) -> float | None:
        """GPU utilization in percent (None when the driver does not report it)."""
        try:
            return float(self.lib.nvmlDeviceGetUtilizationRates(self.handle(index)).gpu)
        except self.lib.NVMLError:
            return None

    def process_used_bytes(self, index: int) -> dict[int, int] | None:
        """GPU memory of each compute process on GPU ``index``, by pid.

        None when the driver does not report per-process use (NVML error, or a process
        listed without a figure, as inside some containers).
        """
        try:
            procs = self.lib.nvmlDeviceGetComputeRunningProcesses(self.handle(index))
        except self.lib.NVMLError:
            return None
        used: dict[int, int] = {}
        for proc in procs:
            if proc.usedGpuMemory is None:
                return None
            used[int(proc.pid)] = used.get(int(proc.pid), 0) + int(proc.usedGpuMemory)
        return used

    def close(self) -> None:
        """Shut NVML down (readings after this fail)."""
        with contextlib.suppress(Exception):
            self.lib.nvmlShutdown()


def gpu_count() -> int:
    """Number of GPUs NVML sees (0 without the package, a driver or a GPU)."""
    try:
        nvml = Nvml()
    except Exception:
        return 0
    try:
        return nvml.device_count()
    except Exception:
        return 0
    finally:
        nvml.close()


def gpu_readings() -> list[tuple[str, int]]:
    """NVML's product name and memory total (bytes) of every GPU it sees, by index: what
    tells a card of the card table (:func:`~mmelocal.bench.capacity.projection.card_named`);
    [] without the package, a driver or a GPU."""
    try:
        nvml = Nvml()
    except Exception:
        return []
    try:
        return [(nvml.name(i), nvml.memory(i)[1]) for i in range(nvml.device_count())]
    except Exception:
        logger.debug("NVML readings failed", exc_info=True)
        return []
    finally:
        nvml.close()


def gpu_used_bytes(index: int | None = None) -> int | None:
    """Used memory of GPU ``index`` (all GPUs summed when None); None without NVML/GPU."""
    try:
        nvml = Nvml()
    except Exception:
        return None
    try:
        indexes = range(nvml.device_count()) if index is None else [index]
        return sum(nvml.memory(i)[0] for i in indexes)
    except Exception:
        logger.debug("NVML reading failed", exc_info=True)
        return None
    finally:
        nvml.close()


class TreeReading(Protocol):
    """What a split needs of a reading (the emulator probe's ``MemoryReading`` provides it)."""

    server_pid: int | None
    per_process_bytes: Mapping[int, int] | None


def marginal_bytes(before: TreeReading | object, after: TreeReading | object) -> int | None:
    """Own memory of what was loaded between ``before`` and ``after``.

    The per-process memory of the processes new in ``after`` plus the change of the server
    process's own; None when a reading has no per-process figures (a driver that does not
    report them, a probe that has none) or the server changed (a restart).
    """
    started = started_pids(before, after)
    old = getattr(before, "per_process_bytes", None)
    new = getattr(after, "per_process_bytes", None)
    if started is None or old is None or new is None:
        return None  # no per-process figures, or another server process
    server = getattr(after, "server_pid", None)
    return sum(new[pid] for pid in started) + new.get(server, 0) - old.get(server, 0)


def started_pids(
    before: TreeReading | object, after: TreeReading | object
) -> frozenset[int] | None:
    """The processes new in ``after`` but the server (a load's Python-backend stubs); None
    when a reading has no per-process figures or the server changed (a restart)."""
    old = getattr(before, "per_process_bytes", None)
    new = getattr(after, "per_process_bytes", None)
    server = getattr(after, "server_pid", None)
    if (
        old is None
        or new is None
        or server is None
        or getattr(before, "server_pid", None) != server
    ):
        return None
    return frozenset(pid for pid in new if pid not in old and pid != server)


__all__ = [
    "Nvml",
    "ProcessMemory",
    "TreeMemory",
    "TreeMemoryReader",
    "TreeReading",
    "gpu_count",
    "gpu_readings",
    "gpu_used_bytes",
    "marginal_bytes",
    "process_memory",
    "process_tree_memory",
    "process_tree_pids",
    "process_tree_pss_bytes",
    "started_pids",
]
