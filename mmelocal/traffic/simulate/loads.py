"""The simulated loads (:class:`LoadQueue`): each instance's load queue and load slots, the
downloads and the disk they fill, the room a load makes (eviction, the wait for a busy
model), and the loads that fail (past the load limit, or no room)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from mmelocal.traffic.simulate.callers import NO_ROOM, Callers
from mmelocal.traffic.simulate.fleet import _Instance


class LoadQueue:
    """The loads of a fleet, as events in time order (each ``run_*`` runs those due by a
    time); the counts the result reports (``counts``, ``load_times``)."""

    def __init__(
        self,
        *,
        fleet: list[_Instance],
        holders: dict[int, list[int]],
        callers: Callers,
        sizes: Sequence[int],
        needs: Sequence[int],
        artifact_sizes: Sequence[int],
        draw_load: Callable[[], float],
        draw_download: Callable[[], float] | None,
        load_limit_s: float,
        unload_s: float,
        busy_wait_s: float,
    ) -> None:
        self.fleet = fleet
        self.holders = holders
        self.callers = callers
        #: what each model holds loaded, and what its load plans for (by model index)
        self.sizes = sizes
        self.needs = needs
        self.artifact_sizes = artifact_sizes
        self.draw_load = draw_load
        self.draw_download = draw_download
        self.load_limit_s = load_limit_s
        self.unload_s = unload_s
        self.busy_wait_s = busy_wait_s
        self.counts = {
            "loads": 0,
            "loaded": 0,
            "seq": 0,
            "over": 0,
            "failed_loads": 0,
            "downloads": 0,
            "deleted": 0,
        }
        self.load_times: list[float] = []
        self.starts: list[tuple[float, int, _Instance]] = []  # (a queued load starts, seq, where)
        self.failures: list[tuple[float, int, _Instance, int]] = []  # (fails, seq, where, m)
        #: loads still queued at their deadline fail then, never started: (deadline, seq,
        #: where, model)
        self.expiries: list[tuple[float, int, _Instance, int]] = []
        #: loads waiting for room give up then: (when, seq, where, model)
        self.room_waits: list[tuple[float, int, _Instance, int]] = []

    def _seq(self) -> int:
        self.counts["seq"] += 1
        return self.counts["seq"]

    def index_of(self, inst: _Instance) -> int:
        """Where ``inst`` is in the fleet (-1: it went, a scale-in)."""
        for j, x in enumerate(self.fleet):
            if x is inst:
                return j
        return -1

    def drop_holder(self, inst: _Instance, m: int) -> None:
        """``m`` is no longer held (ready, loading or queued) on ``inst``."""
        del inst.ready_at[m]
        i = self.index_of(inst)
        if i < 0:  # the instance went (scale-in): its holders went with it
            return
        hs = self.holders[m]
        hs.remove(i)
        if not hs:
            del self.holders[m]

    def expire(self, inst: _Instance, m: int, deadline: float) -> None:
        """``m``'s load was still queued at its deadline: it fails then, never started (no
        slot, no memory), as the emulator's load still downloading or waiting for the loads
        before it past the limit; its callers get their error."""
        inst.queue.remove(m)
        waiters = inst.pending.pop(m)
        del inst.deadline[m], inst.fetched[m]
        self.drop_holder(inst, m)
        self.counts["failed_loads"] += 1
        for k in waiters:
            self.callers.fail(k, deadline)

    def run_expiries(self, until: float) -> None:
        """The queued loads whose deadline passed by ``until`` fail."""
        expiries = self.expiries
        while expiries and expiries[0][0] <= until:
            deadline, _, inst, m = heapq.heappop(expiries)
            if inst.deadline.get(m) == deadline and m in inst.queue:  # still queued
                self.expire(inst, m, deadline)

    @staticmethod
    def next_fetched(inst: _Instance) -> float:
        """When the first of the instance's queued loads has its artifact on the disk."""
        return min(inst.fetched[v] for v in inst.queue)

    def start_next(self, inst: _Instance, now: float) -> None:
        """Start the instance's next queued load at ``now``: the one whose download ended
        first (the emulator's loads take the load lock as their downloads end; in the
        order asked on a tie). It holds a load slot from now, makes room, then loads."""
        fetched = inst.fetched
        m = min(inst.queue, key=fetched.__getitem__)  # the first asked among equals
        if fetched[m] > now:  # every queued download is still running: start when one ends
            heapq.heappush(self.starts, (fetched[m], self._seq(), inst))
            return
        deadline = inst.deadline[m]
        if deadline <= now:  # a scale-in runs a queue out at once: one past its limit fails
            self.expire(inst, m, deadline)
            return
        inst.queue.remove(m)
        del fetched[m]
        heapq.heapreplace(inst.loaders, math.inf)  # the slot, until the load ends
        inst.making = [m, now + self.busy_wait_s, now]  # its callers stay in pending meanwhile
        heapq.heappush(self.room_waits, (now + self.busy_wait_s, self._seq(), inst, m))
        self.make_room(inst, now)

    def make_room(self, inst: _Instance, now: float, *, force: bool = False) -> None:
        """The load of ``inst.making`` at ``now``: unload the least recently used idle
        models it needs, one after the other (``unload_s`` each), then load when it fits,
        when no other model is loaded (alone, it is tried), or when ``force``d; else it
        waits, holding its slot, for a call to end (:meth:`Callers.settle` tries again) or
        gives up at ``busy_wait_s`` (:meth:`give_up`): the emulator's
        ``Evictor.make_room``."""
        assert inst.making is not None
        m, _, unloaded_at = inst.making

        def busy(v: int) -> bool:
            return inst.inflight.get(v, 0) > 0 or inst.ready_at[v] > now

        victims, fits = inst.lru.plan(self.needs[m], busy)
        for v in victims:
            inst.lru.remove(v)
            self.drop_holder(inst, v)
        self.counts["loaded"] -= len(victims)
        unloaded_at = max(unloaded_at, now) + self.unload_s * len(victims)
        if victims:
            self.trim_disk(inst)
        if not fits and not force and any(inst.ready_at[v] <= now for v in inst.lru.footprints):
            inst.making[2] = unloaded_at  # loaded models stay busy: wait for one
            return
        if not fits:
            self.counts["over"] += 1  # alone (the emulator tries it) or forced
        inst.making = None
        self.load(inst, m, unloaded_at)

    def give_up(self, inst: _Instance, m: int, at: float) -> None:
        """The load of ``m`` found no room for ``busy_wait_s``: it fails (the emulator's
        OutOfMemoryError, 507 InsufficientMemory), freeing its slot."""
        inst.making = None
        waiters = inst.pending.pop(m)
        del inst.deadline[m]
        self.drop_holder(inst, m)
        self.counts["failed_loads"] += 1
        for k in waiters:
            self.callers.fail(k, at, NO_ROOM)
        self.free_slot(inst, at)

    def run_room_waits(self, until: float) -> None:
        """The loads that waited for room until ``until`` give up."""
        room_waits = self.room_waits
        while room_waits and room_waits[0][0] <= until:
            at, _, inst, m = heapq.heappop(room_waits)
            making = inst.making
            if making is not None and making[0] == m and making[1] == at:
                self.give_up(inst, m, at)

    def free_slot(self, inst: _Instance, until: float) -> None:
        """The load slot held since the load started is busy until ``until``; the next
        queued load may start when a slot is free."""
        loaders = inst.loaders
        loaders[loaders.index(math.inf)] = until
        heapq.heapify(loaders)
        if inst.queue:
            heapq.heappush(self.starts, (loaders[0], self._seq(), inst))

    def load(self, inst: _Instance, m: int, begin: float) -> None:
        """Load ``m`` on ``inst`` from ``begin`` (its room made)."""
        waiters = inst.pending.pop(m)
        deadline = inst.deadline.pop(m)
        seconds = self.draw_load()
        inst.lru.add(m, self.sizes[m])
        self.counts["loaded"] += 1
        if begin + seconds > deadline:
            # the platform gives up at the limit, counted from the load's start (the call
            # that asked for it): the download, the wait for the loads before it and the
            # load together, as the emulator's deadline (a load whose room came after it
            # fails at once). The model never serves, its memory is held until then, and
            # the load slot too
            failed_at = max(deadline, begin)
            self.free_slot(inst, failed_at)
            inst.ready_at[m] = math.inf
            inst.failing[m] = failed_at
            self.counts["failed_loads"] += 1
            heapq.heappush(self.failures, (failed_at, self._seq(), inst, m))
            for k in waiters:
                self.callers.fail(k, failed_at)
        else:
            ready = begin + seconds
            self.free_slot(inst, ready)
            inst.ready_at[m] = ready
            self.counts["loads"] += 1
            self.load_times.append(seconds)
            for k in waiters:
                self.callers.after_load(k, inst, m, ready)

    def fetch(self, inst: _Instance, m: int) -> float:
        """The download ``m``'s load needs on ``inst``, begun when the load is asked for
        (the emulator downloads before it waits for the load lock, each download in its
        own thread): none when its artifact is on the disk, else a drawn time, after
        deleting least recently used artifacts whose models are neither in memory there
        nor waiting to load until it fits (over the budget when all are)."""
        assert self.draw_download is not None
        disk = inst.disk
        if m in disk:
            disk.touch(m)
            return 0.0

        deleted, _ = disk.plan(self.artifact_sizes[m], lambda v: self.held(inst, v))
        for v in deleted:
            disk.remove(v)
        disk.add(m, self.artifact_sizes[m])
        self.counts["deleted"] += len(deleted)
        self.counts["downloads"] += 1
        return self.draw_download()

    @staticmethod
    def held(inst: _Instance, v: int) -> bool:
        """``v``'s artifact is in use on ``inst``: its model is in memory there (the
        emulator's pin) or waits to load (its claim)."""
        return v in inst.lru or v in inst.pending

    def trim_disk(self, inst: _Instance) -> None:
        """A disk over its budget (every artifact was in use when one more came) deletes
        least recently used artifacts no longer in use until it is within it, as the
        emulator's cache does the moment an artifact is unpinned (its model unloaded)."""
        disk = inst.disk
        if disk.used_bytes <= disk.limit_bytes:
            return
        for v in [v for v in disk.footprints if not self.held(inst, v)]:  # least recent first
            if disk.used_bytes <= disk.limit_bytes:
                break
            disk.remove(v)
            self.counts["deleted"] += 1

    def run_failures(self, until: float) -> None:
        """Loads that failed by ``until`` leave their instance (memory and holders)."""
        failures = self.failures
        while failures and failures[0][0] <= until:
            _, _, inst, m = heapq.heappop(failures)
            del inst.failing[m]
            if self.index_of(inst) < 0:  # the instance went (scale-in): its holders too
                continue
            inst.lru.remove(m)
            self.drop_holder(inst, m)
            self.counts["loaded"] -= 1
            self.trim_disk(inst)
            if inst.making is not None:  # its memory may make that load's room
                self.make_room(inst, until)

    def enqueue(self, i: int, m: int, now: float, waiter: int | None) -> None:
        """Queue a load of ``m`` on instance ``i`` at ``now`` (for request ``waiter``, or
        for none: a hot model's replica); its download begins now."""
        inst = self.fleet[i]
        inst.queue.append(m)
        inst.pending[m] = [] if waiter is None else [waiter]
        inst.ready_at[m] = math.inf
        inst.deadline[m] = deadline = now + self.load_limit_s
        fetched = now + (self.fetch(inst, m) if self.draw_download is not None else 0.0)
        inst.fetched[m] = fetched
        self.holders.setdefault(m, []).append(i)
        heapq.heappush(self.expiries, (deadline, self._seq(), inst, m))
        # a start when this one may load (one already scheduled finds no slot, or starts
        # whichever download ended first)
        heapq.heappush(self.starts, (max(fetched, inst.loaders[0]), self._seq(), inst))

    def run_starts(self, until: float) -> None:
        """The queued loads that may start by ``until`` start, in time order."""
        starts, failures, expiries = self.starts, self.failures, self.expiries
        while starts and starts[0][0] <= until:
            at, _, inst = heapq.heappop(starts)
            if failures and failures[0][0] <= at:
                self.run_failures(at)
            if expiries and expiries[0][0] <= at:
                self.run_expiries(at)
            # a queue that a load's expiry emptied may have two starts scheduled: one
            # finding no free load slot is spare (the load that took the slot scheduled
            # the next)
            if inst.queue and at >= inst.loaders[0] and inst.making is None:
                self.callers.settle(at)  # the models idle when the load starts may make room
                if inst.making is None:
                    self.start_next(inst, at)


__all__ = ["LoadQueue"]
