"""Detached servers (``mmelocal triton start/stop``) on the real pip tritonserver."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from runtime_models import write_python_model

from mmelocal.runtime.client import TritonClient
from mmelocal.runtime.detached import start_detached, stop_detached
from mmelocal.runtime.server_config import ServerConfig

pytestmark = pytest.mark.triton


def _flag(cmdline: list[str], name: str) -> str | None:
    for i, arg in enumerate(cmdline):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(cmdline):
            return cmdline[i + 1]
    return None


#: a model whose unload never ends: the server outlives SIGTERM and is killed
STUCK_FINALIZE = """

    def finalize(self):
        import time

        time.sleep(600)
"""


@pytest.mark.parametrize("stuck", [False, True], ids=["clean", "killed"])
def test_stop_leaves_no_shared_memory_and_no_bridge_socket(tmp_path: Path, stuck: bool) -> None:
    """The stop waits for the whole server group to end after SIGTERM (the namespace
    bridge removes its control socket as it exits), kills it only after the timeout, and
    removes the server's Python-backend regions in /dev/shm, which a killed stub leaves."""
    repo = tmp_path / "repo"
    folder = write_python_model(repo, "kept_py")
    if stuck:
        with open(folder / "1" / "model.py", "a") as fh:
            fh.write(STUCK_FINALIZE)
    state = tmp_path / "state"
    kept = start_detached(
        ServerConfig(model_repository=repo, load_models=("kept_py",)), name="t", root=state
    )
    server = psutil.Process(kept.pid)
    marker = "shm-region-prefix-name="
    [prefix] = [a.split(marker)[1] for a in server.cmdline() if marker in a]
    assert prefix.startswith("mmelocal_")
    with TritonClient(kept.http_url) as client:
        assert client.model_ready("kept_py")
    regions = list(Path("/dev/shm").glob(f"{prefix}*"))
    assert regions, "the loaded Python model maps a region"
    leader = psutil.Process(os.getpgid(kept.pid))
    control = _flag(leader.cmdline(), "--control")  # None without the namespace bridge
    members = [leader, *leader.children(recursive=True)]

    assert stop_detached("t", root=state, timeout_s=3.0 if stuck else 30.0) is not None

    assert not list(Path("/dev/shm").glob(f"{prefix}*"))
    if control is not None:
        assert not Path(control).exists() and not Path(control).parent.exists()
    for proc in members:
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    assert not (state / "triton-t.json").exists()
