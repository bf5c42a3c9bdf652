"""Model affinity across several Triton instances.

A request goes to an instance where its target is loaded (the least busy one when
several are), else to one already loading it, else (cold) to the instance with the most
free memory. A target whose request rate passes ``hot_rps_threshold`` is also loaded on
a second instance in the background, as SageMaker does for very hot models.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mmelocal.emulator.instance import InstanceUnavailableError, TritonInstance
from mmelocal.errors import UserInputError

logger = logging.getLogger(__name__)


@dataclass
class _Rate:
    window_start_s: float
    count: int = 0
    rate_rps: float = 0.0


class Router:
    """Chooses the instance for each request (see the module docstring)."""

    def __init__(
        self,
        instances: Sequence[TritonInstance],
        *,
        hot_rps_threshold: float = 50.0,
        rate_window_s: float = 1.0,
    ) -> None:
        if not instances:
            raise UserInputError("a router needs at least one instance")
        if hot_rps_threshold <= 0 or rate_window_s <= 0:
            raise UserInputError("hot_rps_threshold and rate_window_s must be > 0")
        self.instances = list(instances)
        self.hot_rps_threshold = hot_rps_threshold
        self.rate_window_s = rate_window_s
        self._rates: dict[str, _Rate] = {}
        self._replicating: dict[str, asyncio.Task[None]] = {}

    def pick(self, target: str) -> TritonInstance:
        """The instance that should serve ``target`` now."""
        if len(self.instances) == 1:
            only = self.instances[0]
            if not only.up:
                raise InstanceUnavailableError("the Triton instance is restarting; retry")
            return only
        best = self.pick_ready(target)
        if best is not None:
            return best
        loading = next(
            (i for i in self.instances if i.up and target in i.models and not i.is_ready(target)),
            None,
        )
        if loading is not None:
            return loading
        up = [i for i in self.instances if i.up]
        if not up:
            raise InstanceUnavailableError("every Triton instance is restarting; retry")
        return max(up, key=lambda i: (i.free_bytes, -len(i.models)))

    def pick_ready(self, target: str) -> TritonInstance | None:
        """The instance to serve ``target`` when it is loaded somewhere, else None (no
        error: the caller takes :meth:`pick`'s path)."""
        if len(self.instances) == 1:
            only = self.instances[0]
            return only if only.up and only.is_ready(target) else None
        best: TritonInstance | None = None
        best_busy = 0
        for inst in self.instances:
            entry = inst.models.get(target)
            if entry is None or not inst.up or not inst.is_ready(target):
                continue
            if best is None or entry.in_flight < best_busy:
                best, best_busy = inst, entry.in_flight
        if best is not None:
            self._note(target, best)
        return best

    async def stop(self) -> None:
        """Cancel hot-model replications in progress."""
        tasks = list(self._replicating.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def rate_rps(self, target: str) -> float:
        """The target's request rate over the last full window."""
        rate = self._rates.get(target)
        return rate.rate_rps if rate else 0.0

    def _note(self, target: str, serving: TritonInstance) -> None:
        now = time.monotonic()
        rate = self._rates.get(target)
        if rate is None:
            self._rates[target] = _Rate(window_start_s=now, count=1)
            return
        rate.count += 1
        elapsed = now - rate.window_start_s
        if elapsed < self.rate_window_s:
            return
        rate.rate_rps = rate.count / elapsed
        rate.window_start_s, rate.count = now, 0
        if rate.rate_rps >= self.hot_rps_threshold and target not in self._replicating:
            holders = [i for i in self.instances if target in i.models]
            others = [i for i in self.instances if i.up and i not in holders]
            if len(holders) == 1 and others:
                second = max(others, key=lambda i: i.free_bytes)
                task = asyncio.ensure_future(self._replicate(target, second, rate.rate_rps))
                self._replicating[target] = task

    async def _replicate(self, target: str, inst: TritonInstance, rate_rps: float) -> None:
        try:
            logger.info(
                "%s is hot (%.0f req/s >= %.0f): loading it on instance %d too",
                target,
                rate_rps,
                self.hot_rps_threshold,
                inst.index,
            )
            await inst.acquire(target)
            inst.release(target)
        except Exception as exc:
            logger.warning(
                "could not load hot model %s on instance %d: %s", target, inst.index, exc
            )
        finally:
            self._replicating.pop(target, None)


__all__ = ["Router"]
