"""Memory of a running Triton as the machine gives it: the process tree's PSS/USS/RSS, NVML.

Host memory (:func:`process_tree_memory`): for the server and every descendant (the
Python-backend stubs) one read of ``/proc/PID/smaps_rollup`` gives

* ``pss_bytes``: proportional set size, each shared page divided among the processes that
  map it. Summed over the tree it counts a shared library (libtorch, libpython) once, not
  once per stub: it is the figure the machine actually gives the tree.
* ``uss_bytes``: unique set size (private clean + private dirty pages): what the kernel would
  free if that process alone exited.
* ``rss_bytes``: resident set size, shared pages counted in full in every process (kept for
  comparison; summed over a tree it overstates by the shared runtime once per process).

Without ``smaps_rollup`` (kernels before 4.14, other systems) psutil's ``memory_full_info``
gives the same three numbers (slower: it parses the whole ``smaps``).

Cost: the kernel walks each process's page tables for ``smaps_rollup``. Measured with
``benchmarks/probe_cost.py`` on the shared 2-core development machine, one
:func:`process_tree_memory` call on a tree of 5 processes (bash and 4 Python interpreters)
takes about 0.6 ms, 4x less than psutil's ``memory_full_info`` for the same figures and 3x
less than psutil's RSS alone: cheap enough to sample several times a second during a load.

GPU memory (:class:`Nvml`): device used/total, utilization, and the GPU memory of given
processes where the driver reports it (``nvmlDeviceGetComputeRunningProcesses``; inside
containers and under some drivers it reports nothing, and :meth:`Nvml.processes_used_bytes`
says so by answering None).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from mmelocal.errors import MissingDependencyError

logger = logging.getLogger(__name__)

_SMAPS_FIELDS = {b"Rss:": "rss", b"Pss:": "pss", b"Private_Clean:": "pc", b"Private_Dirty:": "pd"}


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


def _smaps_rollup(pid: int) -> ProcessMemory | None:
    """One process from ``/proc/PID/smaps_rollup`` (None when unreadable)."""
    values = dict.fromkeys(_SMAPS_FIELDS.values(), 0)
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    for line in data.splitlines():
        key, _, rest = line.partition(b" ")
        name = _SMAPS_FIELDS.get(key)
        if name is not None:
            values[name] = int(rest.split()[0]) * 1024
    if not data:
        return None  # a kernel thread, or a process that just exited
    return ProcessMemory(
        pid=pid,
        rss_bytes=values["rss"],
        pss_bytes=values["pss"],
        uss_bytes=values["pc"] + values["pd"],
    )


def _psutil_memory(pid: int) -> ProcessMemory | None:
    import psutil

    try:
        info = psutil.Process(pid).memory_full_info()
    except psutil.Error:
        return None
    rss = int(info.rss)
    return ProcessMemory(
        pid=pid,
        rss_bytes=rss,
        pss_bytes=int(getattr(info, "pss", rss)),
        uss_bytes=int(getattr(info, "uss", rss)),
    )


def process_memory(pid: int) -> ProcessMemory | None:
    """PSS/USS/RSS of one process (``smaps_rollup``, else psutil); None when it is gone."""
    if sys.platform.startswith("linux") and os.path.exists(f"/proc/{pid}/smaps_rollup"):
        found = _smaps_rollup(pid)
        if found is not None:
            return found
    return _psutil_memory(pid)


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

    def device_count(self) -> int:
        """GPUs NVML sees."""
        return int(self.lib.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        """NVML handle of GPU ``index``."""
        return self.lib.nvmlDeviceGetHandleByIndex(index)

    def memory(self, index: int) -> tuple[int, int]:
        """``(used_bytes, total_bytes)`` of GPU ``index``."""
        info = self.lib.nvmlDeviceGetMemoryInfo(self.handle(index))
        return int(info.used), int(info.total)

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

    def processes_used_bytes(self, index: int, pids: list[int]) -> int | None:
        """GPU memory of ``pids`` on GPU ``index`` (None when the driver does not say)."""
        used = self.process_used_bytes(index)
        if used is None:
            return None
        return sum(b for pid, b in used.items() if pid in set(pids))

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


__all__ = [
    "Nvml",
    "ProcessMemory",
    "TreeMemory",
    "gpu_count",
    "gpu_used_bytes",
    "process_memory",
    "process_tree_memory",
    "process_tree_pids",
    "process_tree_pss_bytes",
]
