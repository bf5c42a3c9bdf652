"""LocalLauncher lifecycle on the real pip tritonserver: start, death, stop, failures."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from typing import Any

import numpy as np
import psutil
import pytest
from runtime_models import write_python_model
from shared_helpers import InBackground, wait_for

from mmelocal.errors import ServerDiedError, ServerStartError
from mmelocal.runtime.client import TritonClient
from mmelocal.runtime.local import LocalLauncher
from mmelocal.runtime.server_config import ServerConfig
from mmelocal.testing.sagemaker_client import SageMakerClient

pytestmark = pytest.mark.triton


def _pid(launcher: LocalLauncher) -> int:
    """The running server's pid."""
    pid = launcher.pid()
    assert pid is not None, "the launcher is not started"
    return pid


def _stub_pids(pid: int) -> list[int]:
    return [
        p.pid
        for p in psutil.Process(pid).children(recursive=True)
        if "triton_python_backend_stub" in " ".join(p.cmdline())
    ]


def test_sigkill_is_seen_quickly_and_stubs_are_reaped(tmp_path):
    write_python_model(tmp_path, "victim")
    launcher = LocalLauncher(ServerConfig(model_repository=tmp_path))
    with launcher:
        client = TritonClient.for_launcher(launcher)
        client.load("victim")
        stubs = _stub_pids(_pid(launcher))
        assert stubs
        os.kill(_pid(launcher), signal.SIGKILL)
        wait_for(lambda: not launcher.is_alive(), timeout_s=30, interval_s=0.02, what="death")
        started = time.monotonic()
        with pytest.raises(ServerDiedError) as info:
            client.infer("victim", {"INPUT0": np.zeros((1, 4), np.float32)})
        # seen within the death grace (1 s), not after the 60 s call timeout; generous for
        # a loaded 2-core CI machine
        assert time.monotonic() - started < 20
        assert "not running" in str(info.value)
        with pytest.raises(ServerDiedError):
            client.load("victim")
        sm = SageMakerClient("http://127.0.0.1:1", is_alive=launcher.is_alive, timeout_s=2)
        with pytest.raises(ServerDiedError):
            sm.invoke("victim", b"{}")
    # stop() returns only once the stubs left in the group are gone, even though the
    # server's death had already made them orphans
    assert not [pid for pid in stubs if psutil.pid_exists(pid) and _is_running(pid)]


def _is_running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_stop_is_idempotent_and_context_manager_cleans_up(tmp_path):
    # the emulator's case: a model loaded through the SageMaker front end (model namespacing on)
    write_python_model(tmp_path / "model-hash-1", "loaded")
    (tmp_path / "repo").mkdir()
    launcher = LocalLauncher(ServerConfig(model_repository=tmp_path / "repo", sagemaker=True))
    launcher.stop()  # never started: no-op
    with launcher as running:
        pid = _pid(running)
        assert running.is_alive()
        assert running.ready_after_s is not None and running.start_overhead_s is not None
        url = running.endpoints.http_url
        assert url.startswith("http://127.0.0.1:")
        sagemaker_url = running.endpoints.sagemaker_url
        assert sagemaker_url is not None
        with SageMakerClient(sagemaker_url, is_alive=running.is_alive) as sm:
            sm.load("hash1", tmp_path / "model-hash-1", target_model="model-1.tar.gz")
    assert not launcher.is_alive()
    assert not psutil.pid_exists(pid) or not _is_running(pid)
    launcher.stop()
    launcher.stop()
    assert launcher.log_path is not None and launcher.log_path.is_file()
    # the stop unloaded the model before SIGTERM: Triton's stop (core src/server.cc) found
    # no live model at its first check, instead of checking again once a second until the
    # Python stub had finished (a second or more on every stop with a model loaded)
    log = launcher.log_path.read_text()
    stopping = log[log.index("Signal (15) received") :]
    found = re.findall(r"Found (\d+) live models", stopping)
    assert found == ["0"], found
    before = log[: log.index("Signal (15) received")]
    assert re.search(r"successfully unloaded '(\S+::)?model-1\.tar\.gz'", before)  # namespaced


def test_a_stop_does_not_wait_for_the_metrics_pollers_sleep(tmp_path):
    """In MME mode with the entrypoint's metrics on (SAGEMAKER_TRITON_ALLOW_METRICS, as the
    pytest fixture's server runs), tritonserver's exit joins its CPU/GPU metrics poller,
    which sleeps half of --metrics-interval-ms (core ``src/metrics.cc``): Triton's 2000 ms
    default held a stop right after the start about 0.95 s, against 0.07 s with metrics
    off. The bound is the same server's stop with metrics off (its poller is not started);
    the better of two stops with metrics on is compared, so that one stop slowed by a busy
    machine does not fail it (the poller's sleep slowed every stop)."""

    def stop_after_start_s(env: dict[str, str], repo: str) -> float:
        (tmp_path / repo).mkdir()
        config = ServerConfig(model_repository=tmp_path / repo, sagemaker=True, sagemaker_env=env)
        launcher = LocalLauncher(config)
        launcher.start()
        started = time.monotonic()
        launcher.stop()
        return time.monotonic() - started

    baseline_s = stop_after_start_s({}, "off")
    on = {"SAGEMAKER_TRITON_ALLOW_METRICS": "true"}
    with_metrics_s = min(stop_after_start_s(on, "on"), stop_after_start_s(on, "on-again"))
    # the poller's sleep is 0.1 s now, 1 s before: twice the baseline and 0.5 s of slack
    assert with_metrics_s < 2 * baseline_s + 0.5, (baseline_s, with_metrics_s)


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [("--no-such-flag-mmelocal=1", "no-such-flag-mmelocal"), ("--log-verbose=loud", "Got loud")],
    ids=["unknown-option", "bad-value"],
)
def test_start_failure_names_url_seconds_and_log_tail(tmp_path, flag, complaint):
    config = ServerConfig(model_repository=tmp_path, extra_args=(flag,))
    launcher = LocalLauncher(config, start_timeout_s=600)
    started = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        launcher.start()
    assert time.monotonic() - started < 120  # the exit is seen at once, no 600 s timeout wait
    message = str(info.value)
    assert "http://127.0.0.1:" in message and "exited" in message
    assert complaint in message  # tritonserver's own complaint, from the log
    assert not launcher.is_alive()


def test_start_failure_shows_this_starts_lines_not_an_earlier_runs(tmp_path):
    """A log kept across runs (a detached server's, an emulator's cache folder) is appended
    to: the error shows what this start wrote, not an earlier run's complaint."""
    log = tmp_path / "kept" / "tritonserver.log"
    log.parent.mkdir()
    log.write_text(
        "E1126 10:00:00.000 1 server.cc:1] an earlier run failed here\n"
        "tritonserver: unrecognized option '--earlier-flag'\n"
        "Usage: tritonserver [options]\n  --help\n\tPrint usage\n\n"
    )
    config = ServerConfig(model_repository=tmp_path, extra_args=("--log-verbose=loud",))
    with pytest.raises(ServerStartError) as info:
        LocalLauncher(config, log_path=log).start()
    message = str(info.value)
    assert "Got loud" in message
    assert "earlier" not in message, message


def test_exception_inside_context_stops_the_server(tmp_path):
    launcher = LocalLauncher(ServerConfig(model_repository=tmp_path))
    with pytest.raises(RuntimeError), launcher:
        pid = _pid(launcher)
        raise RuntimeError("test body failed")
    assert not launcher.is_alive()
    assert not psutil.pid_exists(pid) or not _is_running(pid)


def test_a_hanging_load_times_out_instead_of_hanging(tmp_path):
    from mmelocal.errors import RuntimeLayerError

    write_python_model(tmp_path, "sleeper", init="import time; time.sleep(60)")
    config = ServerConfig(model_repository=tmp_path, exit_timeout_s=1)
    with LocalLauncher(config, stop_timeout_s=2) as launcher:
        client = TritonClient.for_launcher(launcher)
        started = time.monotonic()
        with pytest.raises(RuntimeLayerError, match="no answer") as info:
            client.load("sleeper", timeout_s=3)
        assert 2.5 < time.monotonic() - started < 40  # the 3 s timeout, not the 60 s sleep
        assert not isinstance(info.value, ServerDiedError)
        stubs = _stub_pids(_pid(launcher))
        client.close()
    assert not launcher.is_alive()
    assert stubs and not [pid for pid in stubs if _is_running(pid)]  # the group was killed


def test_server_dies_with_the_process_that_started_it(tmp_path):
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from mmelocal.runtime.server_config import ServerConfig\n"
        "from mmelocal.runtime.local import LocalLauncher\n"
        f"launcher = LocalLauncher(ServerConfig(model_repository={str(tmp_path)!r}))\n"
        "launcher.start()\n"
        "print(launcher.pid(), flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = None
    try:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(server_pid)
        parent.kill()  # SIGKILL: no cleanup code runs in the parent
        parent.wait(timeout=60)
        # SIGTERM, then Triton's own exit timeout: poll with a bound generous for loaded CI
        wait_for(lambda: not _is_running(server_pid), timeout_s=60, interval_s=0.1, what="exit")
    finally:
        if parent.poll() is None:
            parent.kill()
        if server_pid is not None and _is_running(server_pid):  # never leak a server
            os.killpg(server_pid, signal.SIGKILL)


def test_a_free_port_taken_before_tritonserver_binds_it_is_replaced(
    tmp_path, monkeypatch, held_port
):
    """The race of pick-then-bind, forced: the picker hands out a port another process
    holds, once as HTTP (tritonserver exits) and once as metrics (tritonserver runs on
    without metrics); the launcher starts again on other ports and serves on all three."""
    from mmelocal.runtime import server_config

    picks = []
    real = server_config.pick_free_port

    def picker(host="127.0.0.1"):
        picks.append(host)
        # calls 1-3: http, grpc, metrics of the first start; 4-6 of the second
        return held_port if len(picks) in (1, 6) else real(host)

    monkeypatch.setattr(server_config, "pick_free_port", picker)
    with LocalLauncher(ServerConfig(model_repository=tmp_path)) as launcher:
        assert len(picks) == 9  # three starts
        config = launcher.config
        assert held_port not in (config.http_port, config.grpc_port, config.metrics_port)
        with TritonClient.for_launcher(launcher) as client:
            assert client.server_ready()
        with urllib.request.urlopen(f"{launcher.endpoints.metrics_url}/metrics", timeout=10) as r:
            assert b"nv_" in r.read()  # Triton's own metrics, not the holder's silence
        assert launcher.log_path is not None
        taken = [line for line in launcher.log_path.read_text().splitlines() if "in use" in line]
    assert [("HTTP" in line, "Metrics" in line) for line in taken if "main.cc" in line] == [
        (True, False),
        (False, True),
    ]
    assert all(f":{held_port}'" in line for line in taken if "main.cc" in line)


def test_a_server_that_never_answered_ready_is_not_asked_to_unload(tmp_path, held_port):
    """The stop after a failed start signals at once: what holds the port the server was
    to answer on never answers, and asking it for the models to unload would wait out half
    the stop timeout (30 s here)."""
    never_ready = tmp_path / "tritonserver"
    never_ready.write_text("#!/bin/sh\nexec sleep 60\n")
    never_ready.chmod(0o755)
    config = ServerConfig(model_repository=tmp_path, http_port=held_port)
    launcher = LocalLauncher(config, tritonserver=never_ready, start_timeout_s=1, stop_timeout_s=60)
    started = time.monotonic()
    with pytest.raises(ServerStartError, match="not ready"):
        launcher.start()
    assert time.monotonic() - started < 20
    assert not launcher.is_alive()


def test_a_stop_before_the_spawn_returns_ends_the_start(tmp_path, monkeypatch):
    """A stop from another thread while ``Popen`` has not returned finds no process to
    stop: the start stops the one it spawned as soon as ``Popen`` returns and raises,
    rather than waiting for a server nobody wants (failed before: the start went on
    waiting for it to answer, up to its start timeout, "not ready")."""
    from mmelocal.runtime import local

    never_ready = tmp_path / "tritonserver"
    never_ready.write_text("#!/bin/sh\nexec sleep 60\n")
    never_ready.chmod(0o755)
    launcher = LocalLauncher(
        ServerConfig(model_repository=tmp_path), tritonserver=never_ready, start_timeout_s=30
    )
    entered, release = threading.Event(), threading.Event()
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def gated_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        entered.set()
        assert release.wait(timeout=30)
        spawned.append(real_popen(*args, **kwargs))
        return spawned[-1]

    monkeypatch.setattr(local.subprocess, "Popen", gated_popen)
    starting = InBackground(launcher.start)
    try:
        assert entered.wait(timeout=30)
        launcher.stop()  # no process yet: it returns at once
    finally:
        release.set()
        assert starting.join(timeout_s=60)
    assert [type(f) for f in starting.failures] == [ServerStartError]
    assert "stopped while it was starting" in str(starting.failures[0])
    (process,) = spawned
    assert process.poll() is not None and not launcher.is_alive()


def test_a_fixed_port_in_use_fails_at_once_naming_it(tmp_path, held_port):
    launcher = LocalLauncher(ServerConfig(model_repository=tmp_path, http_port=held_port))
    with pytest.raises(ServerStartError) as info:
        launcher.start()
    message = str(info.value)
    assert f"127.0.0.1:{held_port}" in message and "another process uses it" in message
    assert "choose another http_port (0: a free one)" in message
    assert launcher.log_path is not None
    assert launcher.log_path.read_text().count("already in use") == 1  # not tried again
    assert not launcher.is_alive()


def test_the_platforms_safe_port_range_does_not_stop_the_start(tmp_path):
    """``SAGEMAKER_SAFE_PORT_RANGE`` is SageMaker's own (a warning says mmelocal sets its own
    ports): passed on, tritonserver refuses every port outside it that shares the SageMaker
    front end's address, as the HTTP port does on 0.0.0.0 (in a container, or here)."""
    config = ServerConfig(
        model_repository=tmp_path,
        sagemaker=True,
        host="0.0.0.0",
        sagemaker_env={"SAGEMAKER_SAFE_PORT_RANGE": "1-2"},
    )
    with LocalLauncher(config, isolate_network=False, start_timeout_s=60) as launcher:
        assert launcher.is_alive()


def test_a_negative_sagemaker_log_verbose_starts_a_quiet_server(tmp_path):
    """``SAGEMAKER_TRITON_LOG_VERBOSE=-1`` reaches tritonserver as ``--log-verbose=-1``,
    which it takes (the level is clamped to 0): the server starts."""
    config = ServerConfig(
        model_repository=tmp_path,
        sagemaker=True,
        sagemaker_env={"SAGEMAKER_TRITON_LOG_VERBOSE": "-1"},
    )
    with LocalLauncher(config, start_timeout_s=60) as launcher:
        assert launcher.is_alive()
        assert "--log-verbose=-1" in " ".join(psutil.Process(_pid(launcher)).cmdline())


def test_a_long_temporary_folder_still_starts_the_isolated_server(tmp_path, monkeypatch):
    """The network-namespace bridge listens on a Unix socket in a new temporary folder; a
    socket's address holds at most 107 bytes on Linux (``sun_path``), so under a deep
    ``TMPDIR`` (a CI runner's, pytest's under xdist) the bridge died at start-up with
    "AF_UNIX path too long". The socket goes where its address fits."""
    from mmelocal.runtime import netns

    if netns.isolation_refused() is not None:
        pytest.skip(f"no network namespace here: {netns.isolation_refused()}")
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    config = ServerConfig(model_repository=tmp_path, sagemaker=True)
    with LocalLauncher(config, start_timeout_s=60) as launcher:
        assert launcher.isolated and launcher.is_alive()
        assert launcher.ready_after_s is not None
