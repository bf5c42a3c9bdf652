"""One instance's loaded set across its lifecycle, with no server (see lifecycle_fakes):
acquire and release, restarts and the models loaded again after them, Triton's 404 and
507 answers to an invoke."""

from __future__ import annotations

import asyncio
import time

from lifecycle_fakes import MIB, Control, Machine, fake_instance

from mmelocal.emulator.recovery import Watchdog


def test_models_loaded_again_after_a_restart_keep_their_recency() -> None:
    """The reload after a restart is no use of the models: the least recently used one
    before the restart is still the first evicted after it (the reload used to count as a
    use, most recent first, so the order came back reversed and the hottest model went
    first)."""

    async def run() -> None:
        machine = Machine(total_bytes=1000 * MIB)
        control = Control(machine, size=100 * MIB)
        inst = fake_instance(machine, control, limit_bytes=250 * MIB)
        await inst.start()
        for target in ("cold", "hot"):
            await inst.acquire(target)
            inst.release(target)
        inst.models["cold"].last_used_s = time.monotonic() - 60.0
        assert inst.loaded() == ["cold", "hot"]

        inst.launcher.stop()  # the process dies
        previous = await inst.restart()
        await Watchdog([inst])._reload(inst, previous)
        assert inst.loaded() == ["cold", "hot"]

        await inst.acquire("new")  # no room for three: the least recently used goes
        inst.release("new")
        assert sorted(inst.loaded()) == ["hot", "new"]
        assert control.calls[-2:] == [("delete", "cold"), ("load", "new")]
        await inst.stop()
        inst.close()

    asyncio.run(run())
