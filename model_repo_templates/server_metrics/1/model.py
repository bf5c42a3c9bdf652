"""mmelocal's memory probe: a Python-backend model that reports the instance's memory.

Deployed as ``metrics.tar.gz`` beside the models of a multi-model endpoint, it answers one
request with what the container sees, from the first source that works:

1. ``nvml``: NVML through ``pynvml`` (package nvidia-ml-py) where the container has it;
2. ``nvidia-smi``: the command the published procedure runs
   (aws-samples/sagemaker-mme-gpu-benchmarking, ``server_metrics``);
3. ``host-pss``: no GPU: the proportional set size (PSS) of the Triton process tree (this
   stub's parent and its children) against the host's ``MemTotal``.

It answers the published outputs (MiB per GPU, as nvidia-smi gives them) and one more,
``mmelocal``: JSON with exact byte counts (``used_bytes``, ``total_bytes``), the source, the
devices, and, where the process IDs can be matched, each Triton process's own memory
(``per_process_bytes``, USS on the host) with the tree's root (``server_pid``).

Only the standard library and numpy are used (the stub's environment has nothing else
for sure); the pure functions below are tested outside Triton.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
NVIDIA_SMI_COMMAND = (
    "nvidia-smi",
    "--query-gpu=name,pci.bus_id,utilization.gpu,utilization.memory,"
    "memory.total,memory.free,memory.used",
    "--format=csv",
)
FIELD_NAMES = (
    "gpu_utilization",
    "gpu_memory_utilization",
    "gpu_total_memory",
    "gpu_free_memory",
    "gpu_used_memory",
    "cpu_utilization",
    "memory_utilization",
)
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """The devices in ``nvidia-smi --query-gpu=... --format=csv`` output (with its header).

    Memory columns are MiB (``15360 MiB``) and become bytes; a ``[N/A]`` utilization is None.
    """
    rows = list(csv.reader(io.StringIO(text.strip())))
    if not rows:
        raise ValueError("nvidia-smi printed nothing")
    header = [column.strip().split(" [")[0] for column in rows[0]]
    devices = []
    for row in rows[1:]:
        if not any(cell.strip() for cell in row):
            continue
        cells = dict(zip(header, (cell.strip() for cell in row), strict=False))

        def number(key: str, cells: dict[str, str] = cells) -> float | None:
            match = _NUMBER.search(cells.get(key, ""))
            return float(match.group()) if match else None

        total, free, used = (number(k) for k in ("memory.total", "memory.free", "memory.used"))
        if total is None or used is None:
            raise ValueError(f"nvidia-smi row without memory figures: {row}")
        devices.append(
            {
                "name": cells.get("name", ""),
                "bus_id": cells.get("pci.bus_id", ""),
                "total_bytes": int(total * MIB),
                "used_bytes": int(used * MIB),
                "free_bytes": int((free if free is not None else total - used) * MIB),
                "gpu_utilization": number("utilization.gpu"),
                "memory_utilization": number("utilization.memory"),
            }
        )
    if not devices:
        raise ValueError("nvidia-smi listed no GPU")
    return devices


def read_nvidia_smi() -> list[dict[str, Any]]:
    """The devices as ``nvidia-smi`` reports them (raises when it is missing or fails)."""
    if shutil.which(NVIDIA_SMI_COMMAND[0]) is None:
        raise FileNotFoundError("nvidia-smi is not on PATH")
    output = subprocess.run(
        NVIDIA_SMI_COMMAND, capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return parse_nvidia_smi(output)


def read_nvml(tree: list[int]) -> tuple[list[dict[str, Any]], dict[int, int] | None]:
    """The devices through NVML, and the GPU memory of the ``tree`` processes when NVML
    names any of them (a container in its own PID namespace sees other PIDs: then None)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        devices, by_pid = [], {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
                gpu_util, mem_util = float(rates.gpu), float(rates.memory)
            except pynvml.NVMLError:
                gpu_util = mem_util = None
            name = pynvml.nvmlDeviceGetName(handle)
            devices.append(
                {
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "bus_id": _nvml_bus_id(pynvml, handle),
                    "total_bytes": int(memory.total),
                    "used_bytes": int(memory.used),
                    "free_bytes": int(memory.free),
                    "gpu_utilization": gpu_util,
                    "memory_utilization": mem_util,
                }
            )
            try:
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    used = proc.usedGpuMemory
                    by_pid[int(proc.pid)] = by_pid.get(int(proc.pid), 0) + int(used or 0)
            except pynvml.NVMLError:
                pass
    finally:
        pynvml.nvmlShutdown()
    matched = {pid: by_pid.get(pid, 0) for pid in tree} if set(tree) & set(by_pid) else None
    return devices, matched


def _nvml_bus_id(pynvml: Any, handle: Any) -> str:
    try:
        bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
    except pynvml.NVMLError:
        return ""
    return bus.decode() if isinstance(bus, bytes) else str(bus)


def tree_pids(root: int, proc: Path = Path("/proc")) -> list[int]:
    """``root`` and its descendants, root first: from ``/proc/PID/task/TID/children``, or
    from every process's parent in ``/proc/PID/stat`` on a kernel without those files."""
    if not (proc / str(root) / "task" / str(root) / "children").exists():
        return _tree_from_parents(root, proc)
    pids, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        if pid in pids or not (proc / str(pid)).is_dir():
            continue
        pids.append(pid)
        for children in sorted((proc / str(pid) / "task").glob("*/children")):
            try:
                queue.extend(int(child) for child in children.read_text().split())
            except OSError:
                continue
    return pids


def _tree_from_parents(root: int, proc: Path) -> list[int]:
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:  # "pid (comm) state ppid ...": comm may hold spaces and brackets
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            parents[int(entry.name)] = int(fields[1])
    pids, queue = [], [root] if (proc / str(root)).is_dir() else []
    while queue:
        pid = queue.pop(0)
        pids.append(pid)
        queue.extend(sorted(child for child, parent in parents.items() if parent == pid))
    return pids


def smaps_rollup(pid: int, proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """``(PSS, USS)`` bytes of one process from ``/proc/PID/smaps_rollup`` (None if gone)."""
    try:
        text = (proc / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return None
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[key.strip()] = int(parts[0]) * 1024
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return fields.get("Pss", 0), uss


def meminfo(proc: Path = Path("/proc")) -> dict[str, int]:
    """``/proc/meminfo`` in bytes."""
    found = {}
    for line in (proc / "meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            found[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return found


def host_tree(root: int, proc: Path = Path("/proc")) -> tuple[int, dict[int, int]]:
    """Summed PSS of the tree under ``root`` and each process's USS."""
    pss_total, own = 0, {}
    for pid in tree_pids(root, proc):
        figures = smaps_rollup(pid, proc)
        if figures is not None:
            pss_total += figures[0]
            own[pid] = figures[1]
    return pss_total, own


class CpuMeter:
    """CPU use of the whole host between two calls, in percent (``/proc/stat``)."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self.last = self._times()

    def _times(self) -> tuple[int, int]:
        try:
            first = (self.proc / "stat").read_text().splitlines()[0].split()[1:]
        except (OSError, IndexError):
            return 0, 0
        values = [int(v) for v in first]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return sum(values), idle

    def percent(self) -> float:
        """Busy share of the CPU time since the previous call."""
        now = self._times()
        total, idle = now[0] - self.last[0], now[1] - self.last[1]
        self.last = now
        return 100.0 * (total - idle) / total if total > 0 else 0.0


def read(server_pid: int, cpu: CpuMeter | None = None) -> dict[str, Any]:
    """One reading from the first source that works (see the module docstring)."""
    tree = tree_pids(server_pid)
    info = meminfo()
    reading: dict[str, Any] = {
        "server_pid": server_pid,
        "cpu_utilization": cpu.percent() if cpu is not None else None,
        "memory_utilization": 1.0 - info.get("MemAvailable", 0) / info["MemTotal"],
        "host_total_bytes": info["MemTotal"],
        "problems": [],
    }
    sources = (("nvml", lambda: read_nvml(tree)), ("nvidia-smi", lambda: (read_nvidia_smi(), None)))
    for source, reader in sources:
        try:
            devices, per_process = reader()
        except Exception as exc:  # the next source is tried; the reason is kept
            reading["problems"].append(f"{source}: {type(exc).__name__}: {exc}")
            continue
        return {
            **reading,
            "source": source,
            "devices": devices,
            "used_bytes": sum(d["used_bytes"] for d in devices),
            "total_bytes": sum(d["total_bytes"] for d in devices),
            "per_process_bytes": per_process,
        }
    used, own = host_tree(server_pid)
    return {
        **reading,
        "source": "host-pss",
        "devices": [],
        "used_bytes": used,
        "total_bytes": info["MemTotal"],
        "per_process_bytes": own,
    }


def published_outputs(reading: dict[str, Any]) -> dict[str, list[float]]:
    """The published ``server_metrics`` outputs: one value per GPU, memory in MiB."""
    devices = reading["devices"]
    return {
        "gpu_utilization": [d["gpu_utilization"] or 0.0 for d in devices],
        "gpu_memory_utilization": [d["memory_utilization"] or 0.0 for d in devices],
        "gpu_total_memory": [d["total_bytes"] / MIB for d in devices],
        "gpu_free_memory": [d["free_bytes"] / MIB for d in devices],
        "gpu_used_memory": [d["used_bytes"] / MIB for d in devices],
        "cpu_utilization": [reading["cpu_utilization"] or 0.0],
        "memory_utilization": [round(reading["memory_utilization"], 4)],
    }


class TritonPythonModel:
    """Triton's entry points: each request gets one fresh reading."""

    def initialize(self, args: dict[str, str]) -> None:
        """Remember the Triton server (this stub's parent) and start the CPU meter."""
        self.server_pid = os.getppid()
        self.cpu = CpuMeter()

    def execute(self, requests: list[Any]) -> list[Any]:
        """One reading per request, as the published outputs plus ``mmelocal`` (JSON)."""
        import numpy as np
        import triton_python_backend_utils as pb_utils

        responses = []
        for _ in requests:
            reading = read(self.server_pid, self.cpu)
            tensors = [
                pb_utils.Tensor(name, np.asarray(values, dtype=np.float32))
                for name, values in published_outputs(reading).items()
            ]
            text = json.dumps(reading).encode("utf-8")
            tensors.append(pb_utils.Tensor("mmelocal", np.array([text], dtype=np.object_)))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
