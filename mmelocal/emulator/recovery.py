"""Recovery: notice a dead Triton process, restart it, load its models again.

The same watchdog trims every few seconds: when the loaded set's memory grew over the
limit after its loads, idle least recently used models are unloaded (an instance idle
since the last reading is judged on that reading: see
:meth:`~mmelocal.emulator.instance.TritonInstance.trim`).

While an instance is down its requests fail at once with a retryable error (503
``ServiceUnavailable``, which boto3 retries) instead of hanging. The watchdog restarts
the server (with a growing pause after repeated failures) and loads the models that were
loaded before, most recently used first, as far as memory allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Coroutine, Sequence
from typing import Any

from mmelocal.emulator.instance import TritonInstance

logger = logging.getLogger(__name__)


class Watchdog:
    """Watches every instance's process and restarts the dead ones.

    A process whose launcher offers an exit descriptor (the local launcher's pidfd) is
    watched by the event loop: its exit is noticed at once, with no polling. Others (a
    Docker container, an external server, a system without pidfds) are polled with the
    launcher's ``is_alive`` every ``interval_s``. The restart (or trim) of one instance runs
    as that instance's own job, one at a time per instance: a restart that hangs or backs
    off does not hold up another instance's.
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
        #: per instance, the process generation watched and its exit descriptor (None:
        #: the launcher has none, so that process is polled)
        self._watches: dict[TritonInstance, tuple[int, int | None]] = {}
        #: per instance, the process generation whose exit its descriptor reported
        self._exits: dict[TritonInstance, int] = {}
        #: the loop's pause, which an exit ends early
        self._wake: asyncio.Future[None] | None = None

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
        for inst in list(self._watches):
            self._unwatch(inst)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_trim = loop.time() + self.trim_interval_s
        for inst in self.instances:
            if inst.up:
                self._watch(inst)
        while True:
            await self._pause(loop, next_trim)
            trim = loop.time() >= next_trim
            if trim:
                next_trim = loop.time() + self.trim_interval_s
            self._forget_gone()
            for inst in list(self.instances):  # scaling adds and removes instances
                if inst in self._jobs:
                    continue  # its restart or trim is under way
                alive = await self._alive(inst)
                if alive is None:
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

    async def _pause(self, loop: asyncio.AbstractEventLoop, next_trim: float) -> None:
        """Until the next look: ``interval_s`` while an instance is polled or down, else
        until the next trim; a process's exit ends it at once."""
        polled = any(not inst.up or not self._watched(inst) for inst in self.instances)
        pause = self.interval_s if polled else max(0.0, next_trim - loop.time())
        self._wake = wake = loop.create_future()
        timer = loop.call_later(pause, _resolve, wake)
        try:
            await wake
        finally:
            timer.cancel()
            self._wake = None

    async def _alive(self, inst: TritonInstance) -> bool | None:
        """Whether ``inst``'s current process runs: at once when its exit is watched,
        else the launcher's check (on the instance's check thread: it may be an HTTP or
        Docker API call).
        None when the instance left, or its process was replaced, while the check ran."""
        generation = inst.generation
        if self._exits.get(inst) == generation:
            return False
        if inst.up and self._watches.get(inst, (None,))[0] != generation:
            self._watch(inst)
        if self._watched(inst):
            return True  # its exit would have been reported
        alive = await inst.check_alive()
        if inst not in self.instances or inst.generation != generation:
            return None
        return alive

    def _watched(self, inst: TritonInstance) -> bool:
        watch = self._watches.get(inst)
        return watch is not None and watch[0] == inst.generation and watch[1] is not None

    def _watch(self, inst: TritonInstance) -> None:
        """Watch the exit of ``inst``'s current process where its launcher can say when."""
        self._unwatch(inst)
        exit_fd = getattr(inst.launcher, "exit_fd", None)
        fd = exit_fd() if exit_fd is not None else None
        self._watches[inst] = (inst.generation, fd)
        if fd is not None:
            asyncio.get_running_loop().add_reader(fd, self._exited, inst, inst.generation)

    def _unwatch(self, inst: TritonInstance) -> None:
        _, fd = self._watches.pop(inst, (0, None))
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def _exited(self, inst: TritonInstance, generation: int) -> None:
        """The watched process exited: the instance is down now (its calls get the
        retryable 503 at once) and the loop looks without waiting out its pause."""
        self._unwatch(inst)
        if inst.generation != generation or inst not in self.instances:
            return
        self._exits[inst] = generation
        inst.up = False
        if self._wake is not None:
            _resolve(self._wake)

    def _forget_gone(self) -> None:
        """Drop what is kept for instances a scale-in took out."""
        for inst in [i for i in self._watches if i not in self.instances]:
            self._unwatch(inst)
        for kept in (self._exits, self._backoff):
            for inst in [i for i in kept if i not in self.instances]:
                del kept[inst]

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
        if inst in self.instances:
            self._watch(inst)
        task = asyncio.ensure_future(self._reload(inst, previous))
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _trim(self, inst: TritonInstance) -> None:
        if inst.retired or inst not in self.instances:
            return  # a scale-in took it out: it drains for its stop, nothing is evicted
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


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


__all__ = ["Watchdog"]
