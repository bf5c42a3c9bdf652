"""Memory probes: the host PSS probe on a real process tree, NVML through a stand-in module."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest
from shared_helpers import StandInNvml

from mmelocal.emulator.probes import HostProbe, NvmlProbe, choose_probe
from mmelocal.errors import UserInputError
from mmelocal.runtime import memory
from mmelocal.runtime.memory import (
    TreeMemoryReader,
    process_memory,
    process_tree_memory,
    process_tree_pids,
)

PYTHON_SLEEP = f"{sys.executable} -c 'import time; print(flush=True); time.sleep(30)'"


@pytest.fixture
def tree() -> Any:
    """bash with two Python children (they share libpython's pages), until the test ends."""
    script = f"{PYTHON_SLEEP} & {PYTHON_SLEEP} & wait"
    proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() + proc.stdout.readline() == b"\n\n"  # both asleep
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_host_probe_reads_pss_of_the_process_tree(tree: subprocess.Popen[bytes]) -> None:
    probe = HostProbe(lambda: tree.pid, budget_bytes=10 * 1024**3)
    reading = probe.read()
    assert probe.kind == "host" and probe.name.startswith("host-pss")
    assert reading.total_bytes == 10 * 1024**3 and 0 < reading.used_fraction < 1
    assert reading.server_pid == tree.pid
    assert reading.per_process_bytes is not None
    assert set(reading.per_process_bytes) == set(process_tree_pids(tree.pid))
    # USS <= PSS <= RSS for the tree; shared libpython makes PSS strictly smaller than RSS
    uss = sum(reading.per_process_bytes.values())
    assert reading.rss_bytes is not None
    assert 0 < uss <= reading.used_bytes < reading.rss_bytes


def _smaps_rollup_kib(pid: int) -> dict[str, int]:
    """The kernel's own rollup, read here independently of mmelocal and psutil."""
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        fields = (line.split() for line in fh if line[:1].isupper())
        return {f[0].rstrip(":"): int(f[1]) for f in fields if len(f) >= 2 and f[1].isdigit()}


def test_process_memory_agrees_with_the_kernels_smaps_rollup(
    tree: subprocess.Popen[bytes],
) -> None:
    pids = process_tree_pids(tree.pid)
    assert pids[0] == tree.pid
    for pid in pids:
        got = process_memory(pid)
        kib = _smaps_rollup_kib(pid)
        assert got is not None
        # sleeping processes: the pages move by a few KiB at most between reads
        assert got.pss_bytes == pytest.approx(kib["Pss"] * 1024, rel=0.02, abs=64 * 1024)
        uss = (kib["Private_Clean"] + kib["Private_Dirty"]) * 1024
        assert got.uss_bytes == pytest.approx(uss, rel=0.02, abs=64 * 1024)
        assert got.rss_bytes == pytest.approx(kib["Rss"] * 1024, rel=0.02, abs=64 * 1024)


def test_the_reader_reads_smaps_again_only_when_the_tree_changed() -> None:
    grow = (
        "import sys, time; print('ready', flush=True); sys.stdin.readline(); "
        "x = bytearray(64 << 20); print('grown', flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", grow], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == b"ready\n"
        reader = TreeMemoryReader(max_age_s=60, tolerance_bytes=1 << 20)
        first = reader.read(proc.pid)
        assert reader.read(proc.pid) is first and reader.full_reads == 1  # nothing moved
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"grown\n"
        grown = reader.read(proc.pid)
        assert grown is not first and reader.full_reads == 2
        assert grown.uss_bytes >= first.uss_bytes + (60 << 20)
        assert grown.pss_bytes == pytest.approx(process_tree_memory(proc.pid).pss_bytes, rel=0.02)
        expired = TreeMemoryReader(max_age_s=0)
        expired.read(proc.pid)
        expired.read(proc.pid)
        assert expired.full_reads == 2  # too old: read again
    finally:
        proc.kill()
        proc.wait()
    assert reader.read(proc.pid).processes == ()  # gone: the set changed


def test_a_gone_process_reads_empty_and_budget_is_checked() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert process_tree_memory(proc.pid).processes == ()
    assert process_tree_memory(None).pss_bytes == 0
    assert HostProbe(lambda: proc.pid, budget_bytes=1).read().used_bytes == 0
    with pytest.raises(UserInputError, match="budget_bytes"):
        HostProbe(lambda: None, budget_bytes=0)


def _Fake() -> StandInNvml:
    """Two devices of 16 GiB, 6 GiB in use on each (two A10Gs)."""
    return StandInNvml({0: 6 * 2**30, 1: 6 * 2**30}, names=("NVIDIA A10G",) * 2)


def test_nvml_probe_with_a_stand_in_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _Fake())
    monkeypatch.setattr("mmelocal.emulator.probes.process_tree_pids", lambda pid: [4242, 4243])
    probe = NvmlProbe(1, lambda: 4242)
    reading = probe.read()
    assert probe.name == "nvml:1" and probe.kind == "gpu"
    assert reading.used_bytes == 6 * 2**30 and reading.total_bytes == 16 * 2**30
    assert reading.process_bytes == 2**30  # only the Triton tree's processes
    assert reading.server_pid == 4242 and reading.per_process_bytes == {4242: 2**30, 4243: 0}
    assert reading.utilization_percent == 42
    chosen = choose_probe(lambda: 4242, budget_bytes=1, gpu_index=0)
    assert chosen.kind == "gpu"


def test_nvml_says_when_the_driver_reports_no_per_process_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _Fake()
    fake.nvmlDeviceGetComputeRunningProcesses = lambda handle: [  # type: ignore[method-assign]
        types.SimpleNamespace(pid=4242, usedGpuMemory=None)  # as inside some containers
    ]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr("mmelocal.emulator.probes.process_tree_pids", lambda pid: [4242])
    reading = NvmlProbe(0, lambda: 4242).read()
    assert reading.used_bytes == 6 * 2**30
    assert reading.process_bytes is None and reading.per_process_bytes is None
    assert memory.gpu_count() == 2 and memory.gpu_used_bytes() == 12 * 2**30


def test_nvml_figures_that_name_none_of_the_trees_processes_are_no_figures_of_theirs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inside a container with its own pid namespace the driver still lists the host's
    pids (NVIDIA/nvidia-docker#1483): the tree's pids (4242, 4243 here) are not among
    them, and reading each as holding 0 of the card made every stub model a 0 footprint.
    Such a reading has no per-process figures (the card's growth is used)."""
    monkeypatch.setitem(sys.modules, "pynvml", _Fake())  # lists pids 4242 and 1
    monkeypatch.setattr("mmelocal.emulator.probes.process_tree_pids", lambda pid: [17, 18])
    reading = NvmlProbe(0, lambda: 17).read()
    assert reading.per_process_bytes is None and reading.process_bytes is None
    assert reading.used_bytes == 6 * 2**30


def test_choose_probe_falls_back_to_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert choose_probe(lambda: None, budget_bytes=5, gpu_index=0).kind == "host"
    assert choose_probe(lambda: None, budget_bytes=5).kind == "host"


def _uuid(index: int) -> str:
    return _Fake().nvmlDeviceGetUUID(index)


def _instances(tmp_path: Any, **config: Any) -> list[Any]:
    """The emulator's instances (not started) on the stand-in NVML's two GPUs."""
    from mmelocal.emulator.emulator import Emulator, EmulatorConfig

    (tmp_path / "store").mkdir(exist_ok=True)
    store = str(tmp_path / "store")
    return Emulator(EmulatorConfig(store=store, cache_dir=tmp_path / "c", **config)).instances


def _pinned(instance: Any) -> tuple[str, str | None]:
    """(the GPU its probe reads, the CUDA_VISIBLE_DEVICES its Triton gets)."""
    env = instance.launcher.config.env
    return instance.probe.name, env.get("CUDA_VISIBLE_DEVICES")


def test_an_instances_triton_runs_on_the_gpu_its_probe_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The probe reads NVML's device N (nvidia-smi's numbering, by PCI bus); CUDA numbers
    devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so the instance's Triton is
    given that card's UUID, which names it whatever the order."""
    monkeypatch.setitem(sys.modules, "pynvml", _Fake())
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    [instance] = _instances(tmp_path, gpus=(1,))
    assert _pinned(instance) == ("nvml:1", _uuid(1))
    with pytest.raises(UserInputError, match=r"this machine's are 0\.\.1"):
        _instances(tmp_path, gpus=(2,))


@pytest.mark.parametrize(
    ("visible", "instances", "pinned"),
    [
        ("1", None, [1]),  # one instance per visible GPU: GPU 1's, not GPU 0's
        ("1,0", 3, [1, 0, 1]),  # instance i on the i-th visible GPU, in CUDA's order
        (_uuid(1)[:12], None, [1]),  # a UUID prefix names the card
        ("0,7,1", None, [0]),  # CUDA stops at an index that names no GPU
    ],
)
def test_the_emulator_uses_the_gpus_cuda_visible_devices_names(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    visible: str,
    instances: int | None,
    pinned: list[int],
) -> None:
    """With CUDA_VISIBLE_DEVICES set, an instance measures and runs on a GPU it names (the
    GPUs a Triton started from here would use), never on one it hides."""
    monkeypatch.setitem(sys.modules, "pynvml", _Fake())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    got = [_pinned(i) for i in _instances(tmp_path, instances=instances)]
    assert got == [(f"nvml:{g}", _uuid(g)) for g in pinned]


def test_an_empty_cuda_visible_devices_runs_the_emulator_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Set to nothing, CUDA_VISIBLE_DEVICES hides every GPU from Triton: the instance reads
    host memory, as its server runs on the CPU."""
    monkeypatch.setitem(sys.modules, "pynvml", _Fake())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    [instance] = _instances(tmp_path, memory_budget_bytes=2**30)
    assert instance.probe.kind == "host"
    assert "CUDA_VISIBLE_DEVICES" not in instance.launcher.config.env


@pytest.mark.parametrize(
    ("kind", "options", "probe"),
    [
        ("docker", {"gpus": False}, "host"),
        ("docker", {"gpus": 0}, "host"),
        ("local", {"env": {"CUDA_VISIBLE_DEVICES": ""}}, "host"),
        ("local", {"env": {"CUDA_VISIBLE_DEVICES": "-1"}}, "host"),
        ("docker", {}, "gpu"),  # the GPUs a local server would see: the card is read
        ("docker", {"gpus": True}, "gpu"),
        ("local", {}, "gpu"),
    ],
    ids=[
        "docker-gpus-false",
        "docker-gpus-0",
        "local-no-visible-gpu",
        "local-minus-one",
        "docker",
        "docker-all",
        "local",
    ],
)
def test_a_launcher_factorys_cpu_launcher_is_measured_in_host_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, kind: str, options: dict[str, Any], probe: str
) -> None:
    """On a GPU host the emulator reads the card; a ``launcher_factory`` that gives Triton
    no GPU (``DockerLauncher(gpus=False)``, a config that hides every GPU) runs it on the
    CPU, whose memory the card's readings do not show: host memory is read instead. Its
    models are prepared for the CPU too: a ``KIND_GPU`` group the CPU server cannot place
    becomes ``KIND_CPU``, as for an emulator with no GPU (it stayed ``KIND_GPU``)."""
    from mmelocal.builder.mme_layout import read_layout
    from mmelocal.emulator.emulator import Emulator, EmulatorConfig
    from mmelocal.runtime.docker import DockerLauncher
    from mmelocal.runtime.local import LocalLauncher
    from mmelocal.runtime.server_config import ServerConfig

    monkeypatch.setitem(sys.modules, "pynvml", _Fake())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = options.pop("env", {})
    (tmp_path / "backends" / "python").mkdir(parents=True)  # the wheel's Python-only server

    def factory(index: int, workdir: Any) -> Any:
        config = ServerConfig(
            model_repository=tmp_path,
            sagemaker=True,
            env=env,
            backend_directory=tmp_path / "backends",
        )
        if kind == "docker":
            return DockerLauncher(config, **options)
        return LocalLauncher(config)

    (tmp_path / "store").mkdir()
    config = EmulatorConfig(
        store=str(tmp_path / "store"),
        cache_dir=tmp_path / "c",
        instances=1,
        memory_budget_bytes=2**30,
    )
    [instance] = Emulator(config, launcher_factory=factory).instances
    assert instance.probe.kind == probe
    model = tmp_path / "artifact" / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (model / "config.pbtxt").write_text(
        'name: "m"\nbackend: "python"\ninstance_group {\n  count: 1\n  kind: KIND_GPU\n}\n'
    )
    assert instance.loader.prepare is not None
    out = instance.loader.prepare(read_layout(model.parent), tmp_path / "prepared")
    assert out is not None
    served = (out / "m" / "config.pbtxt").read_text()
    assert ("KIND_CPU" if probe == "host" else "KIND_GPU") in served, served


def test_a_process_whose_smaps_cannot_be_read_counts_its_resident_size(
    tree: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``smaps_rollup`` is readable by the process's owner (and root) alone, ``statm`` by
    anyone: a container's root-owned Triton read by a non-root user. Its processes count
    with their resident size, not as gone (a tree of 0 bytes never evicts)."""
    import psutil

    def denied(self: psutil.Process) -> Any:
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "memory_full_info", denied)
    reading = HostProbe(lambda: tree.pid, budget_bytes=10 * 1024**3).read()
    assert reading.server_pid == tree.pid
    assert reading.per_process_bytes is not None
    assert set(reading.per_process_bytes) == set(process_tree_pids(tree.pid))
    assert reading.rss_bytes is not None and reading.used_bytes == reading.rss_bytes > 0
