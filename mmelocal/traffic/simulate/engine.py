"""The event engine: :func:`simulate` runs a trace through the fleet request by request, in
time order (the steps are in :mod:`mmelocal.traffic.simulate`'s docstring)."""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable

import numpy as np

from mmelocal.errors import ModelLoadError, ModelNotReadyError, OutOfMemoryError, UserInputError
from mmelocal.facts.invoke_errors import error_kind
from mmelocal.rules.routing import (
    InstanceView,
    choose_cold,
    count_request,
    open_rate_window,
    replica_instance,
)
from mmelocal.traffic.results import TrafficResult, summarize
from mmelocal.traffic.simulate.config import SimConfig
from mmelocal.traffic.simulate.fleet import (
    _UNLIMITED_BYTES,
    _Instance,
    _instance_hours,
    _resize,
    _Scaler,
    pick_holder,
)
from mmelocal.traffic.trace import Trace

#: the error class a caller gets when a cold load outlasts MODEL_NOT_READY_AFTER_S
MODEL_NOT_READY = error_kind(ModelNotReadyError("", target_model="")).error_type
#: the error class a caller still waiting gets when its load fails (past ``load_limit_s``):
#: the emulator's answer to a load past its limit (the service documents none)
LOAD_FAILED = error_kind(ModelLoadError("", model_name="")).error_type
#: the error class of the callers of a load that found no room while other models stayed
#: busy for ``busy_wait_s`` (the emulator's OutOfMemoryError: 507)
NO_ROOM = error_kind(OutOfMemoryError("")).error_type


def simulate(
    trace: Trace,
    config: SimConfig,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> TrafficResult:
    """Run ``trace`` through the simulated fleet."""
    n = len(trace)
    if config.models_per_instance is not None:
        limit = config.models_per_instance
        sizes = [1] * len(trace.models)
    else:
        assert config.memory_limit_bytes is not None and config.default_footprint_bytes
        limit = config.memory_limit_bytes
        sizes = [
            config.footprint_bytes.get(m, config.default_footprint_bytes) for m in trace.models
        ]
        too_big = [m for m, s in zip(trace.models, sizes, strict=True) if s > limit]
        if too_big:
            raise UserInputError(
                f"{too_big[0]} needs {sizes[trace.models.index(too_big[0])]:,} bytes, more than "
                f"an instance's limit of {limit:,}: choose a larger instance type"
            )
    disk_limit = config.disk_bytes or _UNLIMITED_BYTES
    artifact_sizes = [
        config.artifact_bytes.get(m, config.default_artifact_bytes or 0) for m in trace.models
    ]
    too_big = [m for m, s in zip(trace.models, artifact_sizes, strict=True) if s > disk_limit]
    if too_big:
        raise UserInputError(
            f"{too_big[0]}'s artifact needs {artifact_sizes[trace.models.index(too_big[0])]:,} "
            f"bytes, more than an instance's disk of {disk_limit:,}: raise --disk-budget"
        )
    rng = np.random.default_rng(config.seed)
    draw_load = config.load.sampler(rng)
    draw_download = config.download.sampler(rng) if config.download is not None else None
    load_limit = config.load_limit_s
    service = config.service_s or 0.0
    unload_s = config.unload_s
    concurrency = config.concurrency
    scaling = config.autoscaling
    count0 = (
        config.instances
        if scaling is None
        else max(scaling.min_instances, min(config.instances, scaling.max_instances))
    )
    fleet: list[_Instance] = [
        _Instance(limit, concurrency, 0.0, config.parallel_loads, disk_limit) for _ in range(count0)
    ]
    holders: dict[int, list[int]] = {}
    rates: dict[int, tuple[float, int]] = {}
    threshold, window = config.hot_rps_threshold, config.rate_window_s
    done: list[tuple[float, int, _Instance, int]] = []  # (finish time, request, where, model)
    # callers of a load, served (a slot each) once it is ready: (ready, request, where, model)
    waiting: list[tuple[float, int, _Instance, int]] = []
    starts: list[tuple[float, int, _Instance]] = []  # (time a queued load starts, seq, where)
    failures: list[tuple[float, int, _Instance, int]] = []  # (when a load fails, seq, where, m)
    # loads still queued at their deadline fail then, never started: (deadline, seq, where, m)
    expiries: list[tuple[float, int, _Instance, int]] = []
    latency = np.empty(n, dtype=np.float64)
    hit = np.zeros(n, dtype=np.bool_)
    ok = np.ones(n, dtype=np.bool_)
    wait_timeout = config.load_wait_timeout_s
    loaded_now = np.empty(n, dtype=np.int32)
    load_times: list[float] = []
    counts = {
        "loads": 0,
        "loaded": 0,
        "seq": 0,
        "over": 0,
        "failed_loads": 0,
        "downloads": 0,
        "deleted": 0,
    }
    errors: dict[str, int] = {}  # by class, in the order first seen
    busy_wait = config.busy_wait_s
    # loads waiting for room give up then: (when, seq, where, model)
    room_waits: list[tuple[float, int, _Instance, int]] = []
    times = trace.times_s.tolist()
    ids = trace.model_ids.tolist()
    # billing: (time, instances billed from then)
    billed: list[tuple[float, int]] = [(0.0, count0)]
    scaler = _Scaler(scaling, count0) if scaling is not None else None

    def index_of(inst: _Instance) -> int:
        for j, x in enumerate(fleet):
            if x is inst:
                return j
        return -1

    def fail_caller(k: int, failed_at: float, kind: str = LOAD_FAILED) -> None:
        """Request ``k`` waited for a load that fails at ``failed_at`` (its callers get
        ``kind``, or ModelNotReadyException when they waited longer first)."""
        ok[k] = False
        if failed_at - times[k] > wait_timeout:
            kind, latency[k] = MODEL_NOT_READY, wait_timeout
        else:
            latency[k] = failed_at - times[k]
        errors[kind] = errors.get(kind, 0) + 1

    def serve_after_load(k: int, inst: _Instance, m: int, ready: float) -> None:
        """Request ``k`` waited for ``m``'s load on ``inst``: a miss, served when ready (in
        flight from now: a waiting caller keeps the model from eviction)."""
        t = times[k]
        failed_at = inst.failing.get(m)
        if failed_at is not None:
            fail_caller(k, failed_at)
            return
        if ready - t > wait_timeout:
            # the caller gets ModelNotReadyException at the timeout; the load goes on
            ok[k] = False
            errors[MODEL_NOT_READY] = errors.get(MODEL_NOT_READY, 0) + 1
            latency[k] = wait_timeout
            return
        inst.inflight[m] = inst.inflight.get(m, 0) + 1
        heapq.heappush(waiting, (ready, k, inst, m))

    def serve_ready(until: float) -> None:
        """The callers whose load was ready by ``until``, in that order: each takes a slot."""
        while waiting and waiting[0][0] <= until:
            ready, k, inst, m = heapq.heappop(waiting)
            slots = inst.slots
            end = max(ready, slots[0]) + service
            heapq.heapreplace(slots, end)
            heapq.heappush(done, (end, k, inst, m))
            latency[k] = end - times[k]

    def settle(until: float) -> None:
        """Everything up to ``until`` on the calls: the callers of loads ready by then take
        their slots, and the calls that ended leave. A call's end is a use of its model, as
        the emulator's ``release`` sets its last use: least recently used is by the last
        call to end (a call's start, which the emulator counts too, is earlier, and a model
        in flight is not evicted)."""
        if waiting and waiting[0][0] <= until:
            serve_ready(until)
        while done and done[0][0] <= until:
            end, _, di, dm = heapq.heappop(done)
            di.inflight[dm] -= 1
            if dm in di.lru:
                di.lru.touch(dm)
            if di.making is not None:  # a model going idle may make that load's room
                make_room(di, end)

    def drop_holder(inst: _Instance, m: int) -> None:
        """``m`` is no longer held (ready, loading or queued) on ``inst``."""
        del inst.ready_at[m]
        i = index_of(inst)
        if i < 0:  # the instance went (scale-in): its holders went with it
            return
        hs = holders[m]
        hs.remove(i)
        if not hs:
            del holders[m]

    def expire(inst: _Instance, m: int, deadline: float) -> None:
        """``m``'s load was still queued at its deadline: it fails then, never started (no
        slot, no memory), as the emulator's load still downloading or waiting for the loads
        before it past the limit; its callers get their error."""
        inst.queue.remove(m)
        waiters = inst.pending.pop(m)
        del inst.deadline[m], inst.fetched[m]
        drop_holder(inst, m)
        counts["failed_loads"] += 1
        for k in waiters:
            fail_caller(k, deadline)

    def run_expiries(until: float) -> None:
        while expiries and expiries[0][0] <= until:
            deadline, _, inst, m = heapq.heappop(expiries)
            if inst.deadline.get(m) == deadline and m in inst.queue:  # still queued
                expire(inst, m, deadline)

    def next_fetched(inst: _Instance) -> float:
        """When the first of the instance's queued loads has its artifact on the disk."""
        return min(inst.fetched[v] for v in inst.queue)

    def start_next(inst: _Instance, now: float) -> None:
        """Start the instance's next queued load at ``now``: the one whose download ended
        first (the emulator's loads take the load lock as their downloads end; in the
        order asked on a tie). It holds a load slot from now, makes room, then loads."""
        fetched = inst.fetched
        m = min(inst.queue, key=fetched.__getitem__)  # the first asked among equals
        if fetched[m] > now:  # every queued download is still running: start when one ends
            counts["seq"] += 1
            heapq.heappush(starts, (fetched[m], counts["seq"], inst))
            return
        deadline = inst.deadline[m]
        if deadline <= now:  # a scale-in runs a queue out at once: one past its limit fails
            expire(inst, m, deadline)
            return
        inst.queue.remove(m)
        del fetched[m]
        heapq.heapreplace(inst.loaders, math.inf)  # the slot, until the load ends
        inst.making = [m, now + busy_wait, now]  # its callers stay in pending meanwhile
        counts["seq"] += 1
        heapq.heappush(room_waits, (now + busy_wait, counts["seq"], inst, m))
        make_room(inst, now)

    def make_room(inst: _Instance, now: float, *, force: bool = False) -> None:
        """The load of ``inst.making`` at ``now``: unload the least recently used idle
        models it needs, one after the other (``unload_s`` each), then load when it fits,
        when no other model is loaded (alone, it is tried), or when ``force``d; else it
        waits, holding its slot, for a call to end (:func:`settle` tries again) or gives up
        at ``busy_wait_s`` (:func:`give_up`): the emulator's ``Evictor.make_room``."""
        assert inst.making is not None
        m, _, unloaded_at = inst.making

        def busy(v: int) -> bool:
            return inst.inflight.get(v, 0) > 0 or inst.ready_at[v] > now

        victims, fits = inst.lru.plan(sizes[m], busy)
        for v in victims:
            inst.lru.remove(v)
            drop_holder(inst, v)
        counts["loaded"] -= len(victims)
        unloaded_at = max(unloaded_at, now) + unload_s * len(victims)
        if victims:
            trim_disk(inst)
        if not fits and not force and any(inst.ready_at[v] <= now for v in inst.lru.footprints):
            inst.making[2] = unloaded_at  # loaded models stay busy: wait for one
            return
        if not fits:
            counts["over"] += 1  # alone (the emulator tries it) or forced
        inst.making = None
        load(inst, m, unloaded_at)

    def give_up(inst: _Instance, m: int, at: float) -> None:
        """The load of ``m`` found no room for ``busy_wait_s``: it fails (the emulator's
        OutOfMemoryError, 507 InsufficientMemory), freeing its slot."""
        inst.making = None
        waiters = inst.pending.pop(m)
        del inst.deadline[m]
        drop_holder(inst, m)
        counts["failed_loads"] += 1
        for k in waiters:
            fail_caller(k, at, NO_ROOM)
        free_slot(inst, at)

    def run_room_waits(until: float) -> None:
        while room_waits and room_waits[0][0] <= until:
            at, _, inst, m = heapq.heappop(room_waits)
            making = inst.making
            if making is not None and making[0] == m and making[1] == at:
                give_up(inst, m, at)

    def free_slot(inst: _Instance, until: float) -> None:
        """The load slot held since the load started is busy until ``until``; the next
        queued load may start when a slot is free."""
        loaders = inst.loaders
        loaders[loaders.index(math.inf)] = until
        heapq.heapify(loaders)
        if inst.queue:
            counts["seq"] += 1
            heapq.heappush(starts, (loaders[0], counts["seq"], inst))

    def load(inst: _Instance, m: int, begin: float) -> None:
        """Load ``m`` on ``inst`` from ``begin`` (its room made)."""
        waiters = inst.pending.pop(m)
        deadline = inst.deadline.pop(m)
        seconds = draw_load()
        inst.lru.add(m, sizes[m])
        counts["loaded"] += 1
        if begin + seconds > deadline:
            # the platform gives up at the limit, counted from the load's start (the call
            # that asked for it): the download, the wait for the loads before it and the
            # load together, as the emulator's deadline (a load whose room came after it
            # fails at once). The model never serves, its memory is held until then, and
            # the load slot too
            failed_at = max(deadline, begin)
            free_slot(inst, failed_at)
            inst.ready_at[m] = math.inf
            inst.failing[m] = failed_at
            counts["failed_loads"] += 1
            counts["seq"] += 1
            heapq.heappush(failures, (failed_at, counts["seq"], inst, m))
            for k in waiters:
                fail_caller(k, failed_at)
        else:
            ready = begin + seconds
            free_slot(inst, ready)
            inst.ready_at[m] = ready
            counts["loads"] += 1
            load_times.append(seconds)
            for k in waiters:
                serve_after_load(k, inst, m, ready)

    def fetch(inst: _Instance, m: int) -> float:
        """The download ``m``'s load needs on ``inst``, begun when the load is asked for
        (the emulator downloads before it waits for the load lock, each download in its
        own thread): none when its artifact is on the disk, else a drawn time, after
        deleting least recently used artifacts whose models are neither in memory there
        nor waiting to load until it fits (over the budget when all are)."""
        assert draw_download is not None
        disk = inst.disk
        if m in disk:
            disk.touch(m)
            return 0.0

        deleted, _ = disk.plan(artifact_sizes[m], lambda v: held(inst, v))
        for v in deleted:
            disk.remove(v)
        disk.add(m, artifact_sizes[m])
        counts["deleted"] += len(deleted)
        counts["downloads"] += 1
        return draw_download()

    def held(inst: _Instance, v: int) -> bool:
        """``v``'s artifact is in use on ``inst``: its model is in memory there (the
        emulator's pin) or waits to load (its claim)."""
        return v in inst.lru or v in inst.pending

    def trim_disk(inst: _Instance) -> None:
        """A disk over its budget (every artifact was in use when one more came) deletes
        least recently used artifacts no longer in use until it is within it, as the
        emulator's cache does the moment an artifact is unpinned (its model unloaded)."""
        disk = inst.disk
        if disk.used_bytes <= disk.limit_bytes:
            return
        for v in [v for v in disk.footprints if not held(inst, v)]:  # least recent first
            if disk.used_bytes <= disk.limit_bytes:
                break
            disk.remove(v)
            counts["deleted"] += 1

    def run_failures(until: float) -> None:
        """Loads that failed by ``until`` leave their instance (memory and holders)."""
        while failures and failures[0][0] <= until:
            _, _, inst, m = heapq.heappop(failures)
            del inst.failing[m]
            if index_of(inst) < 0:  # the instance went (scale-in): its holders went with it
                continue
            inst.lru.remove(m)
            drop_holder(inst, m)
            counts["loaded"] -= 1
            trim_disk(inst)
            if inst.making is not None:  # its memory may make that load's room
                make_room(inst, until)

    def enqueue(i: int, m: int, now: float, waiter: int | None) -> None:
        inst = fleet[i]
        inst.queue.append(m)
        inst.pending[m] = [] if waiter is None else [waiter]
        inst.ready_at[m] = math.inf
        inst.deadline[m] = deadline = now + load_limit
        inst.fetched[m] = fetched = now + (fetch(inst, m) if draw_download is not None else 0.0)
        holders.setdefault(m, []).append(i)
        counts["seq"] += 1
        heapq.heappush(expiries, (deadline, counts["seq"], inst, m))
        # a start when this one may load (one already scheduled finds no slot, or starts
        # whichever download ended first)
        counts["seq"] += 1
        heapq.heappush(starts, (max(fetched, inst.loaders[0]), counts["seq"], inst))

    def run_starts(until: float) -> None:
        while starts and starts[0][0] <= until:
            at, _, inst = heapq.heappop(starts)
            if failures and failures[0][0] <= at:
                run_failures(at)
            if expiries and expiries[0][0] <= at:
                run_expiries(at)
            # a queue that a load's expiry emptied may have two starts scheduled: one
            # finding no free load slot is spare (the load that took the slot scheduled
            # the next)
            if inst.queue and at >= inst.loaders[0] and inst.making is None:
                settle(at)  # the models idle when the load starts may make its room
                if inst.making is None:
                    start_next(inst, at)

    def cold_choice(now: float) -> int:
        # the emulator's rule (a miss, so not per request); the models an instance holds
        # are its loaded ones and those queued to load, as the emulator's entries are
        views = [
            InstanceView(
                up=inst.up_at <= now,
                free_bytes=inst.lru.limit_bytes - inst.lru.used_bytes,
                model_count=len(inst.lru) + len(inst.queue) + (inst.making is not None),
            )
            for inst in fleet
        ]
        chosen = choose_cold(views)
        if chosen is None:  # none is up yet: the same rule among those starting
            chosen = choose_cold([dataclasses.replace(v, up=True) for v in views])
        assert chosen is not None
        return chosen

    step = max(1, n // 200)
    for k in range(n):
        t = times[k]
        m = ids[k]
        if failures and failures[0][0] <= t:
            run_failures(t)
        if starts and starts[0][0] <= t:
            run_starts(t)
        if failures and failures[0][0] <= t:
            run_failures(t)
        if expiries and expiries[0][0] <= t:
            run_expiries(t)
        if waiting and waiting[0][0] <= t:
            serve_ready(t)
        while done and done[0][0] <= t:  # settle(t), inline: once per request
            end, _, di, dm = heapq.heappop(done)
            di.inflight[dm] -= 1
            if dm in di.lru:
                di.lru.touch(dm)
            if di.making is not None:
                make_room(di, end)
        if room_waits and room_waits[0][0] <= t:
            run_room_waits(t)
            if starts and starts[0][0] <= t:
                run_starts(t)
        if scaler is not None and scaling is not None and t >= scaler.next_eval_s:
            # each change takes effect when it was decided (a quiet spell may hold several)
            for at, change in scaler.evaluate(t, len(fleet)):
                for gone in fleet[change:]:  # every instance that goes: its loads finish
                    while gone.queue or gone.making is not None:
                        if gone.making is not None:  # it goes: the load is tried
                            make_room(gone, max(at, gone.making[2]), force=True)
                        else:
                            start_next(gone, max(at, gone.loaders[0], next_fetched(gone)))
                _resize(
                    fleet,
                    holders,
                    change,
                    at,
                    limit,
                    concurrency,
                    scaling,
                    config.parallel_loads,
                    disk_limit,
                )
                counts["loaded"] = sum(len(x.lru) for x in fleet)
                billed.append((at, len(fleet)))
        if scaler is not None:
            scaler.count += 1
        hs = holders.get(m)
        i = -1
        loading = -1
        if hs is not None and len(hs) == 1:
            # the rule on one holder, inline (the common case, per request)
            j = hs[0]
            inst = fleet[j]
            if inst.ready_at[m] <= t and inst.up_at <= t:
                i = j
            else:
                loading = j
        elif hs:
            i, loading = pick_holder(fleet, hs, m, t)  # a replicated model
        if i < 0:
            # a miss: join the load in progress (or queued), else queue a new one
            if loading < 0:
                loading = cold_choice(t)
                enqueue(loading, m, t, k)
                if starts and starts[0][0] <= t:
                    run_starts(t)
            else:
                inst = fleet[loading]
                if m in inst.pending:
                    inst.pending[m].append(k)
                else:
                    serve_after_load(k, inst, m, inst.ready_at[m])
            # no use of the model yet: a caller's wait for a load is not (its end is)
            loaded_now[k] = counts["loaded"]
            if progress is not None and k % step == 0:
                progress(k, n)
            continue
        inst = fleet[i]
        # its use: the call's end (settle), after which a model is idle again: while in
        # flight it is not evicted, so the end decides its place in the recency order
        # hot-model replication, the emulator's rule (counted on served requests)
        r = rates.get(m)
        if r is None:
            rates[m] = open_rate_window(t)
        else:
            w0, c, measured = count_request(r[0], r[1], t, window)
            rates[m] = (w0, c)
            if measured is not None and len(fleet) > 1:
                second = replica_instance(
                    measured,
                    threshold,
                    holders[m],
                    [
                        (j, x.up_at <= t, x.lru.limit_bytes - x.lru.used_bytes)
                        for j, x in enumerate(fleet)
                    ],
                )
                if second is not None:
                    enqueue(second, m, t, None)
        slots = inst.slots
        start = slots[0]
        if start < t:
            start = t
        end = start + service
        heapq.heapreplace(slots, end)
        inst.inflight[m] = inst.inflight.get(m, 0) + 1
        heapq.heappush(done, (end, k, inst, m))
        latency[k] = end - t
        hit[k] = True
        loaded_now[k] = counts["loaded"]
        if progress is not None and k % step == 0:
            progress(k, n)
    # after the last request, the events left in time order: the loads still queued or
    # waiting for room, so that their callers get their answers
    while True:
        heads = [h[0][0] for h in (starts, waiting, done, room_waits, failures, expiries) if h]
        if not heads:
            break
        at = min(heads)
        run_failures(at)
        run_expiries(at)
        settle(at)
        run_room_waits(at)
        run_starts(at)
    if progress is not None:
        progress(n, n)
    duration = trace.duration_s
    instance_hours = _instance_hours(billed, duration)
    return summarize(
        source="simulated",
        times_s=trace.times_s,
        latency_s=latency,
        hit=hit,
        ok=ok,
        sampled=None,  # every simulated request reaches its model (none is refused before)
        errors=errors,
        loaded=loaded_now,
        load_times_s=np.asarray(load_times),
        loads=counts["loads"],
        instances=[(t, c) for t, c in billed],
        instance_hours=instance_hours,
        instance_type=config.instance_type,
        price_per_hour=config.price_per_hour,
        service_measured=config.service_s is not None,
        extra={
            "models_per_instance": config.models_per_instance,
            "memory_limit_bytes": config.memory_limit_bytes,
            "load_seconds_source": config.load.source,
            "concurrency": concurrency,
            "parallel_loads": config.parallel_loads,
            "loads_over_capacity": counts["over"],
            "failed_loads": counts["failed_loads"],
            "load_limit_s": load_limit,
            "downloads": counts["downloads"],
            "artifacts_deleted": counts["deleted"],
            "download_seconds_source": None if config.download is None else config.download.source,
            "disk_bytes": config.disk_bytes,
            "scaling_activities": scaler.activities if scaler is not None else [],
        },
    )
