"""An instance's short blocking calls (a liveness check, a stop), a ``/metrics`` scrape's
readings and a connection through a namespace bridge do not queue behind the event loop's
default executor, where artifact downloads and extractions run (loading.py) for minutes
with a large artifact: here one default worker, held by a "download"."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from lifecycle_fakes import MIB, Control, Launcher, Machine, fake_instance
from shared_helpers import wait_for_async

from mmelocal.emulator import routes
from mmelocal.emulator.emulator import Emulator, EmulatorConfig
from mmelocal.emulator.instance import TritonInstance
from mmelocal.emulator.model_state import InstanceUnavailableError
from mmelocal.emulator.recovery import Watchdog
from mmelocal.emulator.upstream import UpstreamError, UpstreamPool
from mmelocal.runtime.netns import bridge_argv, isolation_refused, listen_socket


@asynccontextmanager
async def busy_default_executor() -> AsyncIterator[None]:
    """The loop's default executor, its one worker busy until the block ends (the 6 workers
    of a 2-core machine, each on a cold model's download)."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    gate = threading.Event()
    download = loop.run_in_executor(None, gate.wait, 60.0)
    try:
        yield
    finally:
        gate.set()
        await download


async def started() -> TritonInstance:
    machine = Machine(total_bytes=1000 * MIB)
    inst = fake_instance(machine, Control(machine, size=MIB), limit_bytes=500 * MIB)
    await inst.start()
    return inst


async def finished(inst: TritonInstance) -> None:
    await inst.stop()
    inst.close()


def test_the_watchdogs_liveness_check_does_not_wait_behind_downloads() -> None:
    """A Docker container or an external server is polled with ``is_alive``: while the
    downloads held the default workers, a dead server went unnoticed (and its calls hung
    on connections instead of getting the retryable 503) until one of them ended."""

    async def run() -> None:
        inst = await started()
        watchdog = Watchdog([inst], interval_s=0.01)
        async with busy_default_executor():
            watchdog.start()
            try:
                inst.launcher.stop()  # the process dies
                await wait_for_async(
                    lambda: inst.launcher.starts == 2 and inst.up,  # type: ignore[attr-defined]
                    timeout_s=5,
                    what="the dead server noticed and restarted while downloads run",
                )
            finally:
                await watchdog.stop()
        await finished(inst)

    asyncio.run(run())


def test_a_failed_connections_liveness_check_does_not_wait_behind_downloads() -> None:
    async def run() -> None:
        inst = await started()
        launcher: Any = inst.launcher
        async with busy_default_executor():
            launcher.alive = False  # the process died
            inst.connection_error(ConnectionResetError("reset by peer"))
            await wait_for_async(lambda: not inst.up, timeout_s=5, what="the instance marked down")
        await finished(inst)

    asyncio.run(run())


def test_a_retired_instances_restart_stops_its_server_without_waiting_behind_downloads() -> None:
    """A scale-in retired the instance while its restart was starting Triton: the restart
    stops the server it just started, then gives up (that stop ran on the default
    executor: the retired instance's server ran on until a download ended)."""

    async def run() -> None:
        inst = await started()
        launcher: Any = inst.launcher
        start = launcher.start

        def start_during_a_scale_in() -> None:
            inst.retired = True  # a scale-in takes it out while Triton starts
            start()

        launcher.start = start_during_a_scale_in
        launcher.stop()  # the process died
        async with busy_default_executor():
            restart = asyncio.ensure_future(inst.restart())
            with pytest.raises(InstanceUnavailableError, match="retired"):
                await asyncio.wait_for(restart, timeout=5)
            assert not launcher.alive
        await finished(inst)

    asyncio.run(run())


def test_a_metrics_scrape_answers_while_downloads_hold_the_default_executor(
    tmp_path: Path,
) -> None:
    """``GET /metrics`` reads the probes and the Triton processes' CPU (blocking calls):
    on the default executor, a scrape waited for a download to end (a Prometheus scrape
    times out after 10 s by default; a large artifact downloads for minutes)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        config = EmulatorConfig(store=str(tmp_path), cache_dir=tmp_path / "cache", gpus=())
        emulator = Emulator(config, launcher_factory=lambda index, workdir: Launcher(machine))
        async with busy_default_executor():
            answer = await asyncio.wait_for(routes.metrics(emulator), timeout=10.0)
        assert answer.status == 200 and b"\nLoadedModelCount{" in answer.body
        assert b"\nCPUUtilization{" in answer.body  # read_gauges' part came back
        await emulator.stop()

    asyncio.run(run())


@pytest.mark.skipif(isolation_refused() is not None, reason=f"{isolation_refused()}")
def test_a_connection_through_the_namespace_bridge_is_not_made_behind_downloads(
    tmp_path: Path,
) -> None:
    """A server in its own network namespace is reached through its bridge
    (``connect_through``, a blocking Unix-socket exchange): on the default executor, every
    new connection to it (an invocation's, a load's) waited for a download to end."""
    (tmp_path / "hello.txt").write_text("hello")
    control = tmp_path / "bridge.sock"
    with listen_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        server = [sys.executable, "-m", "http.server", str(port), "--bind", "0.0.0.0"]
        argv = bridge_argv(
            host="127.0.0.1", ports=[port], control=control, command=server, fds=[sock.fileno()]
        )
        process = subprocess.Popen(
            argv,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=[sock.fileno()],
        )

    async def run() -> None:
        pool = UpstreamPool(f"http://127.0.0.1:{port}", bridge=str(control))

        async def hello() -> bool:
            try:
                reply = await pool.request("GET", "/hello.txt", [], timeout_s=5.0)
            except UpstreamError:
                return False  # the server inside is still starting
            return reply.status == 200 and reply.body == b"hello"

        deadline = asyncio.get_running_loop().time() + 60.0
        while not await hello():  # the server inside starts after the bridge listens
            assert asyncio.get_running_loop().time() < deadline, "the server behind the bridge"
            await asyncio.sleep(0.05)
        pool.close()  # the next request needs a new connection through the bridge
        async with busy_default_executor():
            reply = await asyncio.wait_for(pool.request("GET", "/hello.txt", []), timeout=10.0)
        assert reply.body == b"hello"
        pool.close()

    try:
        asyncio.run(run())
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
