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
from collections.abc import Coroutine, Sequence
from typing import Any

from mmelocal.emulator.instance import TritonInstance

logger = logging.getLogger(__name__)


class Watchdog:
    """Polls every instance's process and restarts the dead ones.

    The restart (or trim) of one instance runs as that instance's own job, one at a time
    per instance: a restart that hangs or backs off does not hold up another instance's.
    """

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
        #: per instance, the restart or trim under way
        self._jobs: dict[TritonInstance, asyncio.Task[None]] = {}
        #: per instance, the pause before its next restart (grows while restarts fail)
        self._backoff: dict[TritonInstance, float] = {}
        self._reloads: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Begin watching (on the running loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop watching and cancel the restarts, trims and reloads in progress."""
        tasks = [t for t in [self._task, *self._jobs.values(), *self._reloads] if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_trim = loop.time() + self.trim_interval_s
        while True:
            await asyncio.sleep(self.interval_s)
            trim = loop.time() >= next_trim
            if trim:
                next_trim = loop.time() + self.trim_interval_s
            for inst in list(self.instances):  # scaling adds and removes instances
                if inst in self._jobs:
                    continue  # its restart or trim is under way
                generation = inst.generation
                alive = await loop.run_in_executor(None, inst.launcher.is_alive)
                if inst not in self.instances or inst.generation != generation:
                    continue  # taken out (scale-in), or its process replaced, while we looked
                if alive and inst.up:
                    self._backoff[inst] = 0.0
                    if trim:
                        self._begin(inst, self._trim(inst))
                    continue
                if alive and not inst.up:
                    inst.up = True  # a connection hiccup marked it down; the process is fine
                    continue
                inst.up = False
                self._begin(inst, self._restart(inst))

    def _begin(self, inst: TritonInstance, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(job)
        self._jobs[inst] = task
        task.add_done_callback(lambda _: self._jobs.pop(inst, None))

    async def _restart(self, inst: TritonInstance) -> None:
        pause = self._backoff.get(inst, 0.0)
        await asyncio.sleep(pause)
        if inst.retired or inst not in self.instances:
            return  # taken out (scale-in) while we waited: never restart it
        try:
            previous = await inst.restart()
        except Exception as exc:
            if inst.retired:
                return
            self._backoff[inst] = min(self.max_backoff_s, 2 * pause or 1.0)
            logger.error(
                "instance %d: restart failed (%s); next try in %.0fs",
                inst.index,
                exc,
                self._backoff[inst],
            )
            return
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
