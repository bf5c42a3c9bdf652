"""Model affinity across several Triton instances (the rules: :mod:`mmelocal.rules.routing`).

A request goes to an instance where its target is loaded (the least busy one when
several are), else to one already loading it, else (cold) to the instance with the most
free memory. A target whose request rate passes ``hot_rps_threshold`` (default
:data:`~mmelocal.facts.sagemaker.HOT_MODEL_RPS` over
:data:`~mmelocal.facts.sagemaker.HOT_MODEL_WINDOW_S`) is also loaded on a second instance
in the background, as SageMaker does for very hot models.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from mmelocal.emulator.instance import InstanceUnavailableError, TritonInstance
from mmelocal.emulator.model_state import LOADING, READY
from mmelocal.errors import UserInputError
from mmelocal.facts.sagemaker import HOT_MODEL_RPS, HOT_MODEL_WINDOW_S
from mmelocal.rules.routing import (
    InstanceView,
    choose_instance,
    choose_ready,
    count_request,
    open_rate_window,
    replica_instance,
)

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
        hot_rps_threshold: float = HOT_MODEL_RPS,
        rate_window_s: float = HOT_MODEL_WINDOW_S,
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
        chosen = choose_instance([self._view(i, target) for i in self.instances])
        if chosen is None:
            raise InstanceUnavailableError("every Triton instance is restarting; retry")
        return self.instances[chosen]

    def pick_ready(self, target: str) -> TritonInstance | None:
        """The instance to serve ``target`` when it is loaded somewhere, else None (no
        error: the caller takes :meth:`pick`'s path)."""
        if len(self.instances) == 1:
            only = self.instances[0]
            return only if only.up and only.is_ready(target) else None
        chosen = choose_ready([self._view(i, target) for i in self.instances])
        if chosen is None:
            return None
        best = self.instances[chosen]
        self._note(target, best)
        return best

    def hold_ready(self, target: str) -> TritonInstance | None:
        """:meth:`pick_ready`'s instance with one request for ``target`` counted in flight
        (:meth:`~mmelocal.emulator.instance.TritonInstance.hold_ready`; pair with its
        ``release``), else None, holding nothing."""
        best = self.pick_ready(target)
        return best if best is not None and best.hold_ready(target) else None

    @contextlib.contextmanager
    def reading(self, target: str) -> Iterator[TritonInstance | None]:
        """An instance where ``target`` is ready (None when it is ready nowhere), held
        against eviction while a read of it goes on (v2 ready, metadata, config, stats).
        A read is no use of the model: its recency and request rate stay as they were
        (only invocations order the least-recently-used eviction and make a model hot)."""
        for inst in self.instances:
            entry = inst.models.get(target)
            if inst.up and entry is not None and entry.state == READY:
                entry.in_flight += 1
                try:
                    yield inst
                finally:
                    if entry.in_flight > 0:
                        entry.in_flight -= 1
                return
        yield None

    @staticmethod
    def _view(inst: TritonInstance, target: str) -> InstanceView:
        entry = inst.models.get(target)
        ready = entry is not None and inst.is_ready(target)
        return InstanceView(
            up=inst.up,
            ready=ready,
            loading=entry is not None and entry.state == LOADING,  # not one being unloaded
            in_flight=entry.in_flight if entry is not None else 0,
            free_bytes=inst.free_bytes,
            model_count=len(inst.models),
        )

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
            start, count = open_rate_window(now)
            self._rates[target] = _Rate(window_start_s=start, count=count)
            return
        rate.window_start_s, rate.count, measured = count_request(
            rate.window_start_s, rate.count, now, self.rate_window_s
        )
        if measured is None:
            return
        rate.rate_rps = measured
        if target in self._replicating:
            return
        second = replica_instance(
            measured,
            self.hot_rps_threshold,
            (i.index for i in self.instances if target in i.models),
            [(i.index, i.up, i.free_bytes) for i in self.instances],
        )
        if second is not None:
            inst = next(i for i in self.instances if i.index == second)
            task = asyncio.ensure_future(self._replicate(target, inst, measured))
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
            # bounded as the platform bounds a load: a load that never ends must not keep
            # the model from ever being copied (the next hot window tries again)
            await inst.acquire(target, wait_timeout_s=inst.options.load_timeout_s)
            inst.release(target)
        except Exception as exc:
            logger.warning(
                "could not load hot model %s on instance %d: %s", target, inst.index, exc
            )
        finally:
            self._replicating.pop(target, None)


__all__ = ["Router"]
