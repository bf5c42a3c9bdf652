"""Memory probes: the host RSS probe on a real process tree, NVML through a stand-in module."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest
from emulator_helpers import wait_for

from mmelocal.emulator.probes import HostProbe, NvmlProbe, choose_probe, process_tree_rss
from mmelocal.errors import UserInputError


def test_host_probe_sums_the_process_tree() -> None:
    proc = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30 & wait"])
    try:

        def tree() -> tuple[int, list[int]] | None:
            found = process_tree_rss(proc.pid)
            return found if len(found[1]) == 3 else None  # bash and its two children

        used, pids = wait_for(tree, timeout_s=30)
        assert proc.pid in pids
        assert used > 0
        probe = HostProbe(lambda: proc.pid, budget_bytes=10 * 1024**3)
        reading = probe.read()
        assert reading.used_bytes > 0 and reading.total_bytes == 10 * 1024**3
        assert 0 < reading.used_fraction < 1
        assert probe.kind == "host" and "host-rss" in probe.name
    finally:
        proc.kill()
        proc.wait()
    assert process_tree_rss(proc.pid) == (0, [])
    assert process_tree_rss(None) == (0, [])
    with pytest.raises(UserInputError, match="budget_bytes"):
        HostProbe(lambda: None, budget_bytes=0)


class _Fake(types.ModuleType):
    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(used=6 * 2**30, total=16 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return types.SimpleNamespace(gpu=42)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [
            types.SimpleNamespace(pid=4242, usedGpuMemory=2**30),
            types.SimpleNamespace(pid=1, usedGpuMemory=5 * 2**30),
        ]


def test_nvml_probe_with_a_stand_in_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _Fake())
    monkeypatch.setattr("mmelocal.emulator.probes.process_tree_rss", lambda pid: (0, [4242, 4243]))
    probe = NvmlProbe(1, lambda: 4242)
    reading = probe.read()
    assert probe.name == "nvml:1" and probe.kind == "gpu"
    assert reading.used_bytes == 6 * 2**30 and reading.total_bytes == 16 * 2**30
    assert reading.process_bytes == 2**30  # only the Triton tree's processes
    assert reading.utilization_percent == 42
    chosen = choose_probe(lambda: 4242, budget_bytes=1, gpu_index=0)
    assert chosen.kind == "gpu"


def test_choose_probe_falls_back_to_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert choose_probe(lambda: None, budget_bytes=5, gpu_index=0).kind == "host"
    assert choose_probe(lambda: None, budget_bytes=5).kind == "host"
