"""The simulated callers: each request's outcome (latency, ModelCacheHit, error class), the
callers waiting for a load, and the calls in flight until they end (:class:`Callers`)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

import numpy as np

from mmelocal.errors import ModelLoadError, ModelNotReadyError, OutOfMemoryError
from mmelocal.facts.invoke_errors import error_kind
from mmelocal.traffic.simulate.fleet import _Instance

#: the error class a caller gets when a cold load outlasts MODEL_NOT_READY_AFTER_S
MODEL_NOT_READY = error_kind(ModelNotReadyError("", target_model="")).error_type
#: the error class a caller still waiting gets when its load fails (past ``load_limit_s``):
#: the emulator's answer to a load past its limit (the service documents none)
LOAD_FAILED = error_kind(ModelLoadError("", model_name="")).error_type
#: the error class of the callers of a load that found no room while other models stayed
#: busy for ``busy_wait_s`` (the emulator's OutOfMemoryError: 507)
NO_ROOM = error_kind(OutOfMemoryError("")).error_type


class Callers:
    """The requests of a trace as callers: their outcomes, the callers of loads (served,
    a slot each, once the load is ready) and the calls in flight."""

    def __init__(self, times: Sequence[float], *, wait_timeout_s: float, service_s: float) -> None:
        n = len(times)
        self.times = times
        self.wait_timeout_s = wait_timeout_s
        self.service_s = service_s
        self.latency = np.empty(n, dtype=np.float64)
        self.hit = np.zeros(n, dtype=np.bool_)
        self.ok = np.ones(n, dtype=np.bool_)
        self.errors: dict[str, int] = {}  # by class, in the order first seen
        #: callers of a load, served once it is ready: (ready, request, where, model)
        self.waiting: list[tuple[float, int, _Instance, int]] = []
        #: calls in flight: (finish time, request, where, model)
        self.done: list[tuple[float, int, _Instance, int]] = []
        #: a model going idle on an instance whose load waits for room: try it again (the
        #: load queue's ``make_room``, set by the engine)
        self.make_room: Callable[[_Instance, float], None] = lambda inst, at: None

    def fail(self, k: int, failed_at: float, kind: str = LOAD_FAILED) -> None:
        """Request ``k`` waited for a load that fails at ``failed_at`` (its callers get
        ``kind``, or ModelNotReadyException when they waited longer first)."""
        self.ok[k] = False
        times = self.times
        if failed_at - times[k] > self.wait_timeout_s:
            kind, self.latency[k] = MODEL_NOT_READY, self.wait_timeout_s
        else:
            self.latency[k] = failed_at - times[k]
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def after_load(self, k: int, inst: _Instance, m: int, ready: float) -> None:
        """Request ``k`` waited for ``m``'s load on ``inst``: a miss, served when ready (in
        flight from now: a waiting caller keeps the model from eviction)."""
        t = self.times[k]
        failed_at = inst.failing.get(m)
        if failed_at is not None:
            self.fail(k, failed_at)
            return
        if ready - t > self.wait_timeout_s:
            # the caller gets ModelNotReadyException at the timeout; the load goes on
            self.ok[k] = False
            self.errors[MODEL_NOT_READY] = self.errors.get(MODEL_NOT_READY, 0) + 1
            self.latency[k] = self.wait_timeout_s
            return
        inst.inflight[m] = inst.inflight.get(m, 0) + 1
        heapq.heappush(self.waiting, (ready, k, inst, m))

    def serve_ready(self, until: float) -> None:
        """The callers whose load was ready by ``until``, in that order: each takes a slot."""
        waiting, done, latency, times = self.waiting, self.done, self.latency, self.times
        service = self.service_s
        while waiting and waiting[0][0] <= until:
            ready, k, inst, m = heapq.heappop(waiting)
            slots = inst.slots
            end = max(ready, slots[0]) + service
            heapq.heapreplace(slots, end)
            heapq.heappush(done, (end, k, inst, m))
            latency[k] = end - times[k]

    def settle(self, until: float) -> None:
        """Everything up to ``until`` on the calls: the callers of loads ready by then take
        their slots, and the calls that ended leave. A call's end is a use of its model, as
        the emulator's ``release`` sets its last use: least recently used is by the last
        call to end (a call's start, which the emulator counts too, is earlier, and a model
        in flight is not evicted)."""
        waiting, done = self.waiting, self.done
        if waiting and waiting[0][0] <= until:
            self.serve_ready(until)
        while done and done[0][0] <= until:
            end, _, di, dm = heapq.heappop(done)
            di.inflight[dm] -= 1
            if dm in di.lru:
                di.lru.touch(dm)
            if di.making is not None:  # a model going idle may make that load's room
                self.make_room(di, end)


__all__ = ["LOAD_FAILED", "MODEL_NOT_READY", "NO_ROOM", "Callers"]
