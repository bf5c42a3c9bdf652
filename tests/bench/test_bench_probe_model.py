"""The endpoint probe model (``model_repo_templates/server_metrics``) outside Triton: its
nvidia-smi parsing on a recorded output, its host reading against psutil, its GPU branches
against mmelocal's own NVML reader (GPU-marked), and its tarball."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from mmelocal.bench.endpoint.remote import (
    PROBE_MODEL_NAME,
    PROBE_TARGET,
    parse_probe_answer,
    probe_template,
    write_probe_tarball,
)

DATA = Path(__file__).parent / "data"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    """The probe's model.py imported as a plain module (Triton's utilities are imported
    only inside ``execute``)."""
    path = probe_template() / "1" / "model.py"
    spec = importlib.util.spec_from_file_location("mmelocal_probe_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nvidia_smi_output_of_four_t4s_is_parsed(probe: ModuleType) -> None:
    devices = probe.parse_nvidia_smi((DATA / "nvidia-smi-g4dn-12xlarge.csv").read_text())
    assert [d["bus_id"] for d in devices] == [f"00000000:00:1{c}.0" for c in "BCDE"]
    assert {d["name"] for d in devices} == {"Tesla T4"}
    assert [d["used_bytes"] // MIB for d in devices] == [6448, 259, 2, 15360]
    assert [d["free_bytes"] // MIB for d in devices] == [8912, 15101, 15358, 0]
    assert all(d["total_bytes"] == 15360 * MIB for d in devices)
    assert [d["gpu_utilization"] for d in devices] == [37.0, 0.0, None, 100.0]
    assert devices[2]["memory_utilization"] is None
    outputs = probe.published_outputs(
        {"devices": devices, "cpu_utilization": None, "memory_utilization": 0.25}
    )
    assert outputs["gpu_used_memory"] == [6448.0, 259.0, 2.0, 15360.0]
    assert outputs["gpu_utilization"][2] == 0.0


def test_nvidia_smi_output_without_devices_or_memory_is_refused(probe: ModuleType) -> None:
    header = (DATA / "nvidia-smi-g4dn-12xlarge.csv").read_text().splitlines()[0]
    with pytest.raises(ValueError, match="no GPU"):
        probe.parse_nvidia_smi(header + "\n")
    with pytest.raises(ValueError, match="without memory"):
        probe.parse_nvidia_smi(header + "\nTesla T4, 0:1B.0, 1 %, 1 %, [N/A], [N/A], [N/A]\n")
    with pytest.raises(ValueError, match="nothing"):
        probe.parse_nvidia_smi("")


#: a process with one child, both waiting on stdin; the child prints its PID once it runs
TWO_LEVELS = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
                          "import os, sys; print(os.getpid(), flush=True); sys.stdin.read()"],
                         stdin=subprocess.PIPE)
sys.stdin.read()
child.communicate(b"")
"""


@pytest.fixture
def two_levels() -> Iterator[tuple[int, int]]:
    """``(parent PID, child PID)`` of a process tree of its own (not this test process's,
    whose other children may come and go)."""
    parent = subprocess.Popen([sys.executable, "-c", TWO_LEVELS], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert parent.stdout is not None
    try:
        yield parent.pid, int(parent.stdout.readline())
    finally:
        parent.communicate("")


def test_host_reading_is_the_tree_pss_psutil_measures(
    probe: ModuleType, two_levels: tuple[int, int]
) -> None:
    import psutil

    root, child = two_levels
    pss, own = probe.host_tree(root)
    assert probe.tree_pids(root) == [root, child] and set(own) == {root, child}
    expected = sum(psutil.Process(pid).memory_full_info().pss for pid in (root, child))
    assert abs(pss - expected) <= max(MIB, expected // 20)
    for pid in (root, child):
        uss = psutil.Process(pid).memory_full_info().uss
        assert abs(own[pid] - uss) <= max(256 * 1024, uss // 20)
    info = probe.meminfo()
    assert info["MemTotal"] == psutil.virtual_memory().total


def test_the_tree_is_found_from_parents_where_the_kernel_lists_no_children(
    probe: ModuleType, two_levels: tuple[int, int]
) -> None:
    root, child = two_levels
    assert probe._tree_from_parents(root, Path("/proc")) == [root, child]
    assert probe._tree_from_parents(2**22 + 7, Path("/proc")) == []  # no such process


def test_probe_tarball_holds_the_published_layout(tmp_path: Path) -> None:
    tarball = write_probe_tarball(tmp_path / PROBE_TARGET)
    with tarfile.open(tarball) as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names == [f"{PROBE_MODEL_NAME}/1/model.py", f"{PROBE_MODEL_NAME}/config.pbtxt"]
    from mmelocal.builder.model_config import read_config

    cfg = read_config(probe_template() / "config.pbtxt")
    assert cfg.name == PROBE_MODEL_NAME and cfg.backend == "python"
    assert [o.name for o in cfg.output][:5] == [
        "gpu_utilization",
        "gpu_memory_utilization",
        "gpu_total_memory",
        "gpu_free_memory",
        "gpu_used_memory",
    ]


def test_an_answer_that_is_not_the_probe_is_refused() -> None:
    from mmelocal.errors import BenchError

    with pytest.raises(BenchError, match="not mmelocal's probe"):
        parse_probe_answer(b'{"outputs": [{"name": "gpu_used_memory", "data": [1.0]}]}')
    with pytest.raises(BenchError, match="not mmelocal's probe"):
        parse_probe_answer(b"<html>busy</html>")


def test_the_published_server_metrics_answer_is_read_from_its_mib(probe: ModuleType) -> None:
    """What the published model answers on a g4dn.12xlarge (its outputs, MiB per GPU)."""
    import json

    devices = probe.parse_nvidia_smi((DATA / "nvidia-smi-g4dn-12xlarge.csv").read_text())
    outputs = probe.published_outputs(
        {"devices": devices, "cpu_utilization": 3.0, "memory_utilization": 0.2}
    )
    body = json.dumps(
        {
            "outputs": [
                {"name": k, "datatype": "FP32", "shape": [len(v)], "data": v}
                for k, v in outputs.items()
            ]
        }
    ).encode()
    reading = parse_probe_answer(body)
    assert reading.used_bytes == (6448 + 259 + 2 + 15360) * MIB
    assert reading.total_bytes == 4 * 15360 * MIB
    assert reading.kind == "gpu" and reading.per_process_bytes is None
    assert "published" in reading.problems[0]
    assert reading.describe() == "nvidia-smi: 4 x GPU"


@pytest.mark.mmelocal_gpu
def test_gpu_branches_agree_with_mmelocal_nvml(probe: ModuleType) -> None:
    from mmelocal.runtime.memory import Nvml

    nvml = Nvml()
    devices, per_process = probe.read_nvml([os.getpid()])
    assert len(devices) == nvml.device_count()
    used, total = nvml.memory(0)
    assert devices[0]["total_bytes"] == total
    assert abs(devices[0]["used_bytes"] - used) <= 64 * MIB  # other processes may allocate
    assert per_process is None or set(per_process) == {os.getpid()}
    smi = probe.read_nvidia_smi()
    assert [d["bus_id"][-7:].lower() for d in smi] == [d["bus_id"][-7:].lower() for d in devices]
    # nvidia-smi rounds to MiB (and some drivers leave their reserve out of its total)
    assert abs(smi[0]["total_bytes"] - total) <= max(MIB, total // 100)
    reading = probe.read(os.getpid())
    assert reading["source"] == "nvml" and reading["total_bytes"] == sum(
        d["total_bytes"] for d in devices
    )


def test_probe_tarball_bytes_do_not_change_between_runs(tmp_path: Path) -> None:
    first = write_probe_tarball(tmp_path / "a" / PROBE_TARGET).read_bytes()
    second = write_probe_tarball(tmp_path / "b" / PROBE_TARGET).read_bytes()
    assert first == second
    assert first[4:8] == bytes(4)  # gzip header: no time stamp
    with tarfile.open(tmp_path / "a" / PROBE_TARGET) as tar:
        assert {(m.mtime, m.uid, m.uname) for m in tar.getmembers()} == {(0, 0, "")}
