"""An instance's short blocking calls (a liveness check, a stop) do not queue behind the
event loop's default executor, where artifact downloads and extractions run (loading.py)
for minutes with a large artifact: here one default worker, held by a "download"."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import pytest
from lifecycle_fakes import MIB, Control, Machine, fake_instance
from shared_helpers import wait_for_async

from mmelocal.emulator.instance import TritonInstance
from mmelocal.emulator.model_state import InstanceUnavailableError
from mmelocal.emulator.recovery import Watchdog


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
