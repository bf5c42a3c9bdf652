"""A Docker engine of this machine whose containers' processes are not (Docker Desktop's VM).

The engine's answers for Docker Desktop cannot be produced here: ``docker info`` and the
container's stats come from a stand-in client (what the engine says), everything else is
real (the launcher, the emulator, its host probe, this machine's /proc).
"""

from __future__ import annotations

import asyncio
import os
import platform
from pathlib import Path
from typing import Any

import pytest

from mmelocal.docker_host import processes_elsewhere, stats_memory_bytes
from mmelocal.runtime.docker import DockerLauncher
from mmelocal.runtime.server_config import ServerConfig

HERE = platform.release()
#: what ``docker info`` says under Docker Desktop for Mac (the VM's LinuxKit kernel) ...
DESKTOP_MAC = {"OperatingSystem": "Docker Desktop", "KernelVersion": "6.10.14-linuxkit"}
#: ... and on this machine's Linux dockerd, rootful or rootless: this machine's kernel
LINUX_ENGINE = {"OperatingSystem": "Debian GNU/Linux 12 (bookworm)", "KernelVersion": HERE}
#: a cgroup v2 answer of ``GET /containers/ID/stats`` (the parts read)
STATS_V2 = {
    "memory_stats": {
        "usage": 300 * 2**20,
        "limit": 8 * 2**30,
        "stats": {"anon": 200 * 2**20, "file": 90 * 2**20, "inactive_file": 60 * 2**20},
    }
}


@pytest.mark.parametrize(
    ("info", "release", "where"),
    [
        (DESKTOP_MAC, "24.6.0", "Docker Desktop's VM (Docker Desktop)"),
        # WSL 2: one kernel for every distribution, the engine in a pid namespace of its own
        (
            {"OperatingSystem": "Docker Desktop", "KernelVersion": "5.15.167.4-microsoft-WSL2"},
            "5.15.167.4-microsoft-WSL2",
            "Docker Desktop's VM (Docker Desktop)",
        ),
        # another VM (Colima, Lima, Rancher Desktop): its own kernel
        (
            {"OperatingSystem": "Ubuntu 24.04.1 LTS", "KernelVersion": "6.8.0-50-generic"},
            "24.1.0",
            "another kernel than this machine's (the engine's 6.8.0-50-generic, "
            "this machine's 24.1.0)",
        ),
        (LINUX_ENGINE, HERE, None),
        ({}, HERE, None),  # no answer (docker info failed): no evidence
    ],
    ids=["desktop-mac", "desktop-wsl2-same-kernel", "other-vm", "linux-engine", "no-answer"],
)
def test_docker_info_tells_an_engine_whose_processes_are_not_this_machines(
    info: dict[str, str], release: str, where: str | None
) -> None:
    assert processes_elsewhere(info, kernel_release=release) == where


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        (STATS_V2["memory_stats"], 240 * 2**20),  # cgroup v2: usage - inactive_file
        # cgroup v1: usage - total_inactive_file (the hierarchy's), not inactive_file
        ({"usage": 500, "stats": {"total_inactive_file": 120, "inactive_file": 20}}, 380),
        ({"usage": 500, "stats": {"inactive_file": 600}}, 500),  # never below zero
        ({"usage": 500}, 500),
        ({}, None),  # a container that is not running
    ],
    ids=["cgroup-v2", "cgroup-v1", "inactive-over-usage", "no-stats", "not-running"],
)
def test_the_containers_memory_is_what_docker_stats_shows(
    memory: dict[str, Any], expected: int | None
) -> None:
    assert stats_memory_bytes({"memory_stats": memory}) == expected


class _Engine:
    """A stand-in Docker client that answers ``docker info`` with ``info`` (counting the
    requests); its container runs, with ``pid`` as its ``State.Pid`` and ``stats`` as its
    stats answer."""

    def __init__(self, info: dict[str, str], pid: int, stats: dict[str, Any]) -> None:
        self._info = info
        self.info_requests = 0
        self.api = type("Api", (), {"base_url": "http+docker://localhost"})()
        self.stats_asked: list[dict[str, Any]] = []
        engine = self

        class Container:
            id = "c0ffee"
            status = "running"

            def __init__(self) -> None:
                self.attrs = {"State": {"Status": "running", "Pid": pid}}

            def reload(self) -> None:
                pass

            def stats(self, **kwargs: Any) -> dict[str, Any]:
                engine.stats_asked.append(kwargs)
                return stats

        self.container = Container()

    def info(self) -> dict[str, str]:
        self.info_requests += 1
        return self._info


def _running_on(engine: _Engine, repo: Path) -> DockerLauncher:
    """A Docker launcher whose container runs on ``engine`` (as its start leaves it)."""
    launcher = DockerLauncher(ServerConfig(model_repository=repo), client=engine)
    launcher._container = engine.container
    return launcher


def test_on_docker_desktop_the_launcher_gives_no_pid_of_the_vm(tmp_path: Path) -> None:
    """The container's ``State.Pid`` is a pid of Docker Desktop's VM: here it names no
    process, or an unrelated one (this test's own, the worst case). The launcher says it
    has no host pid, asking the engine once; on a Linux engine the pid is the host's."""
    vm = _Engine(DESKTOP_MAC, pid=os.getpid(), stats=STATS_V2)
    launcher = _running_on(vm, tmp_path)
    assert launcher.pid() is None
    assert launcher.pid() is None
    assert launcher.processes_elsewhere() == "Docker Desktop's VM (Docker Desktop)"
    assert vm.info_requests == 1
    local = _Engine(LINUX_ENGINE, pid=os.getpid(), stats=STATS_V2)
    assert _running_on(local, tmp_path).pid() == os.getpid()


@pytest.mark.parametrize(
    ("info", "source"), [(DESKTOP_MAC, "engine"), (LINUX_ENGINE, "pss")], ids=["desktop", "linux"]
)
def test_on_docker_desktop_the_emulators_host_memory_is_the_engines_figure(
    tmp_path: Path, info: dict[str, str], source: str
) -> None:
    """On a CPU the emulator budgets host memory: with the processes in the VM it is the
    container's memory as the engine counts it (``docker stats``), not the PSS of this
    machine's process that has the VM's pid; on a Linux engine the process tree's PSS."""
    from mmelocal.emulator.emulator import Emulator
    from mmelocal.emulator.emulator_config import EmulatorConfig

    (tmp_path / "store").mkdir()
    config = EmulatorConfig(
        store=str(tmp_path / "store"), cache_dir=tmp_path / "cache", launcher="docker", gpus=()
    )
    engine = _Engine(info, pid=os.getpid(), stats=STATS_V2)
    launchers: list[DockerLauncher] = []

    def factory(index: int, workdir: Path) -> DockerLauncher:
        launchers.append(_running_on(engine, tmp_path))
        return launchers[-1]

    emulator = Emulator(config, launcher_factory=factory)
    try:
        probe = emulator.instances[0].probe
        reading = probe.read()
        if source == "engine":
            assert reading.used_bytes == 240 * 2**20
            assert engine.stats_asked == [{"stream": False, "one_shot": True}]
        else:  # this process's own tree, read from /proc
            assert reading.server_pid == os.getpid() and engine.stats_asked == []
        assert probe.name.startswith(f"host-{source}(budget"), probe.name
    finally:
        launchers[0]._container = None  # nothing to stop: no container ran
        asyncio.run(emulator.stop())


def test_on_docker_desktop_check_reads_the_containers_memory_from_the_engine(
    tmp_path: Path,
) -> None:
    """``mmelocal check`` measures each model's memory on a CPU from the server's process
    tree: with the processes in the VM, from the engine's figure for the container."""
    from mmelocal.runtime.check import _memory

    launcher = _running_on(_Engine(DESKTOP_MAC, pid=os.getpid(), stats=STATS_V2), tmp_path)
    assert _memory(launcher, None) == (240 * 2**20, "container")
