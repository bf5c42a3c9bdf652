"""The event engine: :func:`simulate` runs a trace through the fleet request by request, in
time order (the steps are in :mod:`mmelocal.traffic.simulate`'s docstring): where each
request goes, hot-model replicas and autoscaling here; the callers' outcomes in
:mod:`.callers`, the loads in :mod:`.loads`."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable

import numpy as np

from mmelocal.errors import UserInputError
from mmelocal.rules.routing import (
    InstanceView,
    choose_cold,
    count_request,
    open_rate_window,
    replica_instance,
)
from mmelocal.traffic.results import TrafficResult, summarize
from mmelocal.traffic.simulate.callers import Callers
from mmelocal.traffic.simulate.config import SimConfig
from mmelocal.traffic.simulate.fleet import (
    _UNLIMITED_BYTES,
    _Instance,
    _instance_hours,
    _resize,
    _Scaler,
    pick_holder,
)
from mmelocal.traffic.simulate.loads import LoadQueue
from mmelocal.traffic.trace import Trace


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
        sizes = needs = [1] * len(trace.models)
    else:
        assert config.memory_limit_bytes is not None and config.default_footprint_bytes
        limit = config.memory_limit_bytes
        sizes = [
            config.footprint_bytes.get(m, config.default_footprint_bytes) for m in trace.models
        ]
        needs = [
            config.load_footprint_bytes.get(m, size)
            for m, size in zip(trace.models, sizes, strict=True)
        ]
        most = [max(size, need) for size, need in zip(sizes, needs, strict=True)]
        over = [(m, b) for m, b in zip(trace.models, most, strict=True) if b > limit]
        if over:
            raise UserInputError(
                f"{over[0][0]} needs {over[0][1]:,} bytes, more than an instance's limit "
                f"of {limit:,}: choose a larger instance type"
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
    draw_load = config.load.sampler(rng)  # drawn first: a seed's runs stay the same
    draw_download = config.download.sampler(rng) if config.download is not None else None
    load_limit = config.load_limit_s
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
    times = trace.times_s.tolist()
    ids = trace.model_ids.tolist()
    callers = Callers(
        times, wait_timeout_s=config.load_wait_timeout_s, service_s=config.service_s or 0.0
    )
    loads = LoadQueue(
        fleet=fleet,
        holders=holders,
        callers=callers,
        sizes=sizes,
        needs=needs,
        artifact_sizes=artifact_sizes,
        draw_load=draw_load,
        draw_download=draw_download,
        load_limit_s=load_limit,
        unload_s=config.unload_s,
        busy_wait_s=config.busy_wait_s,
    )
    callers.make_room = loads.make_room
    # the event queues and the steps the request loop runs when one is due
    starts, failures, expiries, room_waits = (
        loads.starts,
        loads.failures,
        loads.expiries,
        loads.room_waits,
    )
    waiting, done = callers.waiting, callers.done
    run_starts, run_failures, run_expiries = (
        loads.run_starts,
        loads.run_failures,
        loads.run_expiries,
    )
    run_room_waits, make_room, serve_ready = (
        loads.run_room_waits,
        loads.make_room,
        callers.serve_ready,
    )
    latency, hit, counts = callers.latency, callers.hit, loads.counts
    service = callers.service_s
    loaded_now = np.empty(n, dtype=np.int32)
    # billing: (time, instances billed from then)
    billed: list[tuple[float, int]] = [(0.0, count0)]
    scaler = _Scaler(scaling, count0) if scaling is not None else None

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
                            loads.start_next(
                                gone, max(at, gone.loaders[0], loads.next_fetched(gone))
                            )
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
                loads.enqueue(loading, m, t, k)
                if starts and starts[0][0] <= t:
                    run_starts(t)
            else:
                inst = fleet[loading]
                if m in inst.pending:
                    inst.pending[m].append(k)
                else:
                    callers.after_load(k, inst, m, inst.ready_at[m])
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
                    loads.enqueue(second, m, t, None)
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
        callers.settle(at)
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
        ok=callers.ok,
        sampled=None,  # every simulated request reaches its model (none is refused before)
        errors=callers.errors,
        loaded=loaded_now,
        load_times_s=np.asarray(loads.load_times),
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
