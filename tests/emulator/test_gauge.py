"""One instance's memory gauge (no server): its readings, and when they come."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from lifecycle_fakes import MIB, Machine

from mmelocal.emulator.gauge import MemoryGauge


def test_a_reading_does_not_wait_behind_the_default_executors_work() -> None:
    """Downloads and extractions run on the event loop's default executor (loading.py),
    for minutes with a large artifact: with every worker busy, a load's or an eviction's
    memory reading (milliseconds) waited for one of them to end."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(1))
        gate = threading.Event()
        download = loop.run_in_executor(None, gate.wait, 30.0)
        gauge = MemoryGauge(Machine(total_bytes=1000 * MIB, base_bytes=100 * MIB), threshold=0.9)
        try:
            reading = await asyncio.wait_for(gauge.read(), timeout=5.0)
        finally:
            gate.set()
        await download
        assert reading.used_bytes == 100 * MIB and gauge.last_reading is reading
        assert gauge.free_bytes == 800 * MIB

    asyncio.run(run())
