"""Recovery: notice a dead Triton process, restart it, load its models again.

The same watchdog trims every few seconds: when the loaded set's memory grew over the
limit after its loads, idle least recently used models are unloaded.

While an instance is down its requests fail at once with a retryable error (503
``ServiceUnavailable``, which boto3 retries) instead of hanging. The watchdog restarts
the server (with a growing pause after repeated failures) and loads the models that were
loaded before, most recently used first, as far as memory allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from mmelocal.emulator.instance import TritonInstance

logger = logging.getLogger(__name__)


class Watchdog:
    """Polls every instance's process and restarts the dead ones."""

    def __init__(
        self,
        instances: Sequence[TritonInstance],
        *,
        interval_s: float = 0.2,
        max_backoff_s: float = 30.0,
        trim_interval_s: float = 2.0,
    ) -> None:
        self.instances = list(instances)
        self.interval_s = interval_s
        self.trim_interval_s = trim_interval_s
        self.max_backoff_s = max_backoff_s
        self.restarts = 0
        self._task: asyncio.Task[None] | None = None
        self._reloads: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Begin watching (on the running loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop watching and cancel reloads in progress."""
        tasks = [t for t in [self._task, *self._reloads] if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = {inst.index: 0.0 for inst in self.instances}
        next_trim = loop.time() + self.trim_interval_s
        while True:
            await asyncio.sleep(self.interval_s)
            trim = loop.time() >= next_trim
            if trim:
                next_trim = loop.time() + self.trim_interval_s
            for inst in list(self.instances):  # scaling adds and removes instances
                generation = inst.generation
                alive = await loop.run_in_executor(None, inst.launcher.is_alive)
                if inst not in self.instances or inst.generation != generation:
                    continue  # taken out (scale-in), or its process replaced, while we looked
                backoff.setdefault(inst.index, 0.0)
                if alive and inst.up:
                    backoff[inst.index] = 0.0
                    if trim:
                        await self._trim(inst)
                    continue
                if alive and not inst.up:
                    inst.up = True  # a connection hiccup marked it down; the process is fine
                    continue
                inst.up = False
                await asyncio.sleep(backoff[inst.index])
                if inst.retired or inst not in self.instances:
                    continue  # taken out (scale-in) while we waited: never restart it
                try:
                    previous = await inst.restart()
                except Exception as exc:
                    if inst.retired:
                        continue
                    backoff[inst.index] = min(self.max_backoff_s, 2 * backoff[inst.index] or 1.0)
                    logger.error(
                        "instance %d: restart failed (%s); next try in %.0fs",
                        inst.index,
                        exc,
                        backoff[inst.index],
                    )
                    continue
                self.restarts += 1
                task = asyncio.ensure_future(self._reload(inst, previous))
                self._reloads.add(task)
                task.add_done_callback(self._reloads.discard)

    async def _trim(self, inst: TritonInstance) -> None:
        try:
            await inst.trim()
        except Exception as exc:
            logger.warning("instance %d: trimming the loaded set failed: %s", inst.index, exc)

    async def _reload(self, inst: TritonInstance, previous: dict[str, float]) -> None:
        for target, last_used_s in previous.items():
            try:
                await inst.reload(target, last_used_s=last_used_s)
            except Exception as exc:
                logger.warning(
                    "instance %d: could not load %s again after restart: %s",
                    inst.index,
                    target,
                    exc,
                )


__all__ = ["Watchdog"]
