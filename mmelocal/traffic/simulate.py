"""A discrete-event simulation of an MME fleet serving a trace.

The fleet is ``instances`` identical instances (autoscaling changes the count). The rules
are the platform's, from :mod:`mmelocal.rules.routing` (routing, hot-model replication,
LRU eviction, through :class:`~mmelocal.rules.routing.FastLru`) and
:mod:`mmelocal.rules.autoscaling` (target tracking). Per request, in time order:

1. requests that finished by now leave (their models may be evicted again);
2. autoscaling evaluates every closed metric period (invocations per instance);
3. the request goes where its target is ready (fewest in flight), else where it is loading
   (a miss that waits for that load), else (cold: a miss and a load) to the instance with
   the most room, after unloading least recently used idle models to make room. The cold
   choice calls :func:`~mmelocal.rules.routing.choose_cold` (instances still starting are
   chosen only when none is up); the ready choice, per request, is :func:`pick_holder`,
   tested equal to :func:`~mmelocal.rules.routing.choose_ready` on random inputs;
4. loads queue per instance and run ``parallel_loads`` at a time (1, the default, is the
   emulator's rule: one load holds the instance's load lock); room is made when a load
   starts, as the emulator does, so models waiting in the queue hold no memory; a caller
   that would wait longer than ``load_wait_timeout_s`` gets ``ModelNotReadyException``
   (an error) while the load goes on;
   with ``download`` times, each instance keeps artifacts on its disk (``disk_bytes``,
   least recently used artifacts of unloaded models deleted first, the rule of
   :func:`~mmelocal.rules.routing.plan_disk_eviction` through a :class:`FastLru`): a load
   whose artifact is on disk skips the download; a download and load together longer than
   ``load_limit_s`` (the platform's 360 s) fail at the limit: the model never serves, its
   callers still waiting get ``ModelError``, and the next request loads it again;
5. it waits for a free slot (``concurrency`` per instance) and takes ``service_s``.

``ModelCacheHit`` is 1 for a request whose target was ready where it went, as the
emulator and the service count it; ``cold_starts`` are the requests with 0 (they waited
for a load), ``loads`` the loads themselves (replicas included).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mmelocal.errors import ModelLoadError, ModelNotReadyError, UserInputError
from mmelocal.facts.invoke_errors import error_kind
from mmelocal.facts.sagemaker import (
    HOT_MODEL_RPS,
    HOT_MODEL_WINDOW_S,
    LOAD_LIMIT_S,
    MODEL_NOT_READY_AFTER_S,
)
from mmelocal.rules.routing import (
    FastLru,
    InstanceView,
    choose_cold,
    count_request,
    open_rate_window,
    replica_instance,
)
from mmelocal.traffic.results import TrafficResult, summarize
from mmelocal.traffic.trace import Trace

#: the error class a caller gets when a cold load outlasts MODEL_NOT_READY_AFTER_S
MODEL_NOT_READY = error_kind(ModelNotReadyError("", target_model="")).error_type
#: the error class a caller still waiting gets when its load fails (past ``load_limit_s``):
#: the emulator's answer to a load past its limit (the service documents none)
LOAD_FAILED = error_kind(ModelLoadError("", model_name="")).error_type
#: an instance's disk when none is given: every artifact stays
_UNLIMITED_BYTES = 1 << 62


def pick_holder(fleet: Sequence[Any], holders: Sequence[int], m: int, t: float) -> tuple[int, int]:
    """(where a request for ``m`` at ``t`` goes among the instances holding it, -1 if it is
    ready on none; the first holder still loading it or not up, -1 if none): the emulator's
    :func:`~mmelocal.rules.routing.choose_ready` (the up instance where it is ready with the
    fewest in flight, the first in fleet order on a tie) without building its views per
    request; the tests check the two equal on random inputs."""
    i = loading = -1
    best_busy = -1
    for j in holders:
        inst = fleet[j]
        if inst.ready_at[m] <= t and inst.up_at <= t:
            busy = inst.inflight.get(m, 0)
            if best_busy < 0 or busy < best_busy or (busy == best_busy and j < i):
                i, best_busy = j, busy
        elif loading < 0 or j < loading:
            loading = j
    return i, loading


@dataclass(frozen=True, kw_only=True)
class LoadTimes:
    """Cold-load times in seconds: one value, or samples drawn at random (e.g. the cold
    loads a replay measured)."""

    samples_s: tuple[float, ...] = (1.0,)
    source: str = "given"

    def __post_init__(self) -> None:
        if not self.samples_s or any(not math.isfinite(s) or s < 0 for s in self.samples_s):
            raise UserInputError(f"load times must be >= 0 seconds, got {list(self.samples_s)[:5]}")

    def sampler(self, rng: np.random.Generator) -> Callable[[], float]:
        """A function returning one load time per call."""
        if len(self.samples_s) == 1:
            value = self.samples_s[0]
            return lambda: value
        pool = np.asarray(self.samples_s)[rng.integers(0, len(self.samples_s), 1 << 16)].tolist()
        state = {"i": 0}

        def draw() -> float:
            i = state["i"] = (state["i"] + 1) & 0xFFFF
            return float(pool[i])

        return draw


@dataclass(frozen=True, kw_only=True)
class Autoscaling:
    """Target tracking on invocations per instance per minute
    (``SageMakerVariantInvocationsPerInstance``), with the service's alarms and cooldowns.

    ``instance_start_s`` is how long a new instance takes to serve (billed from the
    decision). The metric is the invocations per instance in each 1-minute period.
    """

    min_instances: int
    max_instances: int
    target_invocations_per_instance: float
    scale_out_cooldown_s: float | None = None
    scale_in_cooldown_s: float | None = None
    instance_start_s: float = 300.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_instances <= self.max_instances:
            raise UserInputError(
                f"autoscaling needs 1 <= min <= max, got {self.min_instances}..{self.max_instances}"
            )
        if self.target_invocations_per_instance <= 0:
            raise UserInputError(
                "the autoscaling target (invocations per instance per minute) must be > 0, got "
                f"{self.target_invocations_per_instance:g}"
            )
        if self.instance_start_s < 0:
            raise UserInputError(f"instance_start_s must be >= 0, got {self.instance_start_s}")


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """What the simulated fleet is.

    Capacity per instance: ``models_per_instance`` (every model the same size), or
    ``memory_limit_bytes`` with ``footprint_bytes`` per model (``default_footprint_bytes``
    for the others). ``service_s`` is the time one request takes on a loaded model (None:
    unknown, latencies then hold only the waits for loads and slots).

    ``download``: seconds to download and extract an artifact that is not on the
    instance's disk (None: not modelled; the load times hold whatever download there is,
    as a replay's load cycles do for a first use). With it each instance keeps artifacts
    on a disk of ``disk_bytes`` (None: all stay), each ``artifact_bytes`` (by target;
    ``default_artifact_bytes`` for the others). ``load_limit_s``: how long the platform
    lets a download and load go on before the load has failed.
    """

    instances: int = 1
    models_per_instance: int | None = None
    memory_limit_bytes: int | None = None
    footprint_bytes: Mapping[str, int] = field(default_factory=dict)
    default_footprint_bytes: int | None = None
    load: LoadTimes = field(default_factory=LoadTimes)
    unload_s: float = 0.0
    service_s: float | None = None
    concurrency: int = 4
    parallel_loads: int = 1
    load_wait_timeout_s: float = MODEL_NOT_READY_AFTER_S
    load_limit_s: float = LOAD_LIMIT_S
    download: LoadTimes | None = None
    disk_bytes: int | None = None
    artifact_bytes: Mapping[str, int] = field(default_factory=dict)
    default_artifact_bytes: int | None = None
    hot_rps_threshold: float = HOT_MODEL_RPS
    rate_window_s: float = HOT_MODEL_WINDOW_S
    autoscaling: Autoscaling | None = None
    instance_type: str | None = None
    price_per_hour: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.instances < 1:
            raise UserInputError(f"--instances must be >= 1, got {self.instances}")
        if self.models_per_instance is None and (
            self.memory_limit_bytes is None or self.default_footprint_bytes is None
        ):
            raise UserInputError(
                "give the capacity per instance: --models-per-instance K, or footprints and "
                "the card's memory (--footprint-mib or --capacity FILE, with --instance-type)"
            )
        if self.models_per_instance is not None and self.models_per_instance < 1:
            raise UserInputError(
                f"--models-per-instance must be >= 1, got {self.models_per_instance}"
            )
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            raise UserInputError(f"memory_limit_bytes must be > 0, got {self.memory_limit_bytes}")
        if self.parallel_loads < 1:
            raise UserInputError(f"--parallel-loads must be >= 1, got {self.parallel_loads}")
        if self.load_wait_timeout_s <= 0:
            raise UserInputError(f"load_wait_timeout_s must be > 0, got {self.load_wait_timeout_s}")
        if self.concurrency < 1:
            raise UserInputError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.service_s is not None and self.service_s < 0:
            raise UserInputError(f"--service-ms must be >= 0, got {self.service_s * 1e3:g}")
        if self.unload_s < 0:
            raise UserInputError(f"--unload-seconds must be >= 0, got {self.unload_s}")
        if self.load_limit_s <= 0:
            raise UserInputError(f"load_limit_s must be > 0, got {self.load_limit_s}")
        if self.disk_bytes is not None:
            if self.disk_bytes <= 0:
                raise UserInputError(f"--disk-budget must be > 0, got {self.disk_bytes}")
            if self.download is None:
                raise UserInputError(
                    "a disk budget needs the download time it saves: give --download-seconds"
                )
            if self.default_artifact_bytes is None:
                raise UserInputError(
                    "a disk budget needs each artifact's size on disk: give --artifact-mib"
                )
        sizes = [*self.artifact_bytes.values(), self.default_artifact_bytes or 0]
        if any(size < 0 for size in sizes):
            raise UserInputError(f"artifact sizes must be >= 0 bytes, got {min(sizes)}")


class _Instance:
    __slots__ = (
        "disk",
        "failing",
        "inflight",
        "loaders",
        "lru",
        "pending",
        "queue",
        "ready_at",
        "slots",
        "up_at",
    )

    def __init__(
        self,
        limit: int,
        concurrency: int,
        up_at: float,
        parallel_loads: int = 1,
        disk_bytes: int = _UNLIMITED_BYTES,
    ) -> None:
        self.lru: FastLru[int] = FastLru(limit)
        #: the artifacts on its disk, least recently used first
        self.disk: FastLru[int] = FastLru(disk_bytes)
        #: loads that will fail (past the load limit): when
        self.failing: dict[int, float] = {}
        #: when each model held here is (or will be) ready; inf while its load is queued
        self.ready_at: dict[int, float] = {}
        self.inflight: dict[int, int] = {}
        self.slots = [0.0] * concurrency
        self.up_at = up_at
        #: when each load slot is next free (1 slot: the emulator's load lock)
        self.loaders = [up_at] * parallel_loads
        #: loads waiting for a slot, in request order, and the requests waiting on each
        self.queue: deque[int] = deque()
        self.pending: dict[int, list[int]] = {}


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
    latency = np.empty(n, dtype=np.float64)
    hit = np.zeros(n, dtype=np.bool_)
    ok = np.ones(n, dtype=np.bool_)
    wait_timeout = config.load_wait_timeout_s
    loaded_now = np.empty(n, dtype=np.int32)
    load_times: list[float] = []
    counts = {
        "loads": 0,
        "loaded": 0,
        "timeouts": 0,
        "seq": 0,
        "over": 0,
        "failed_loads": 0,
        "load_failed": 0,
        "downloads": 0,
        "deleted": 0,
    }
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

    def fail_caller(k: int, failed_at: float) -> None:
        """Request ``k`` waited for a load that fails at ``failed_at``."""
        ok[k] = False
        if failed_at - times[k] > wait_timeout:
            counts["timeouts"] += 1
            latency[k] = wait_timeout
        else:
            counts["load_failed"] += 1
            latency[k] = failed_at - times[k]

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
            counts["timeouts"] += 1
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

    def start_next(inst: _Instance, now: float) -> None:
        """Start the instance's next queued load at ``now``: make room (least recently used
        idle models go), then load."""
        m = inst.queue.popleft()
        waiters = inst.pending.pop(m)

        def busy(v: int) -> bool:
            return inst.inflight.get(v, 0) > 0 or inst.ready_at[v] > now

        victims, fits = inst.lru.plan(sizes[m], busy)
        if not fits:
            counts["over"] += 1
        i = index_of(inst)
        for v in victims:
            inst.lru.remove(v)
            del inst.ready_at[v]
            hs = holders[v]
            hs.remove(i)
            if not hs:
                del holders[v]
        begin = now + (unload_s if victims else 0.0)
        fetch_s = fetch(inst, m) if draw_download is not None else 0.0
        seconds = draw_load()
        inst.lru.add(m, sizes[m])
        counts["loaded"] += 1 - len(victims)
        if fetch_s + seconds > load_limit:
            # the platform gives up at the limit: the model never serves, its memory is
            # held until then, and the load slot too
            failed_at = begin + load_limit
            heapq.heapreplace(inst.loaders, failed_at)
            inst.ready_at[m] = math.inf
            inst.failing[m] = failed_at
            counts["failed_loads"] += 1
            counts["seq"] += 1
            heapq.heappush(failures, (failed_at, counts["seq"], inst, m))
            for k in waiters:
                fail_caller(k, failed_at)
        else:
            ready = begin + fetch_s + seconds
            heapq.heapreplace(inst.loaders, ready)
            inst.ready_at[m] = ready
            counts["loads"] += 1
            load_times.append(seconds)
            for k in waiters:
                serve_after_load(k, inst, m, ready)
        if inst.queue:
            counts["seq"] += 1
            heapq.heappush(starts, (inst.loaders[0], counts["seq"], inst))

    def fetch(inst: _Instance, m: int) -> float:
        """The download ``m``'s load needs on ``inst``: none when its artifact is on the
        disk, else a drawn time, after deleting least recently used artifacts whose models
        are not in memory there until it fits (over the budget when all are)."""
        assert draw_download is not None
        disk = inst.disk
        if m in disk:
            disk.touch(m)
            return 0.0
        deleted, _ = disk.plan(artifact_sizes[m], inst.lru.__contains__)
        for v in deleted:
            disk.remove(v)
        disk.add(m, artifact_sizes[m])
        counts["deleted"] += len(deleted)
        counts["downloads"] += 1
        return draw_download()

    def run_failures(until: float) -> None:
        """Loads that failed by ``until`` leave their instance (memory and holders)."""
        while failures and failures[0][0] <= until:
            _, _, inst, m = heapq.heappop(failures)
            del inst.failing[m]
            i = index_of(inst)
            if i < 0:  # the instance went (scale-in): its holders went with it
                continue
            inst.lru.remove(m)
            del inst.ready_at[m]
            hs = holders[m]
            hs.remove(i)
            if not hs:
                del holders[m]
            counts["loaded"] -= 1

    def enqueue(i: int, m: int, now: float, waiter: int | None) -> None:
        inst = fleet[i]
        inst.queue.append(m)
        inst.pending[m] = [] if waiter is None else [waiter]
        inst.ready_at[m] = math.inf
        holders.setdefault(m, []).append(i)
        if len(inst.queue) == 1:
            counts["seq"] += 1
            heapq.heappush(starts, (max(now, inst.loaders[0]), counts["seq"], inst))

    def run_starts(until: float) -> None:
        while starts and starts[0][0] <= until:
            at, _, inst = heapq.heappop(starts)
            if failures and failures[0][0] <= at:
                run_failures(at)
            if inst.queue:
                start_next(inst, at)

    def cold_choice(now: float) -> int:
        # the emulator's rule (a miss, so not per request); the models an instance holds
        # are its loaded ones and those queued to load, as the emulator's entries are
        views = [
            InstanceView(
                up=inst.up_at <= now,
                free_bytes=inst.lru.limit_bytes - inst.lru.used_bytes,
                model_count=len(inst.lru) + len(inst.queue),
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
        if waiting and waiting[0][0] <= t:
            serve_ready(t)
        while done and done[0][0] <= t:
            _, _, di, dm = heapq.heappop(done)
            di.inflight[dm] -= 1
        if scaler is not None and scaling is not None and t >= scaler.next_eval_s:
            # each change takes effect when it was decided (a quiet spell may hold several)
            for at, change in scaler.evaluate(t, len(fleet)):
                for gone in fleet[change:]:  # every instance that goes: its loads finish
                    while gone.queue:
                        start_next(gone, max(at, gone.loaders[0]))
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
            inst = fleet[loading]
            if m in inst.lru:
                inst.lru.touch(m)
            loaded_now[k] = counts["loaded"]
            if progress is not None and k % step == 0:
                progress(k, n)
            continue
        inst = fleet[i]
        inst.lru.touch(m)
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
    run_starts(math.inf)  # the loads still queued: their callers get their answers
    serve_ready(math.inf)
    if progress is not None:
        progress(n, n)
    duration = trace.duration_s
    instance_hours = _instance_hours(billed, duration)
    errors = {
        kind: n
        for kind, n in ((MODEL_NOT_READY, counts["timeouts"]), (LOAD_FAILED, counts["load_failed"]))
        if n
    }
    return summarize(
        source="simulated",
        times_s=trace.times_s,
        latency_s=latency,
        hit=hit,
        ok=ok,
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


def _instance_hours(billed: Sequence[tuple[float, int]], end_s: float) -> float:
    total = 0.0
    for (t0, c), (t1, _) in zip(billed, [*billed[1:], (end_s, 0)], strict=True):
        total += max(0.0, min(t1, end_s) - t0) * c
    return total / 3600.0


def _resize(
    fleet: list[_Instance],
    holders: dict[int, list[int]],
    capacity: int,
    now: float,
    limit: int,
    concurrency: int,
    scaling: Autoscaling,
    parallel_loads: int,
    disk_bytes: int,
) -> None:
    """Grow the fleet (new instances serve after ``instance_start_s``) or shrink it (the
    newest instances go; their requests in flight finish)."""
    while len(fleet) < capacity:
        fleet.append(
            _Instance(
                limit, concurrency, now + scaling.instance_start_s, parallel_loads, disk_bytes
            )
        )
    while len(fleet) > capacity:
        gone = len(fleet) - 1
        inst = fleet.pop()
        for m in inst.lru.footprints:
            hs = holders[m]
            hs.remove(gone)
            if not hs:
                del holders[m]


class _Scaler:
    """Feeds the shared target-tracking rule one metric value per closed period."""

    def __init__(self, scaling: Autoscaling, capacity: int) -> None:
        from mmelocal.facts.autoscaling import METRIC_PERIOD_S
        from mmelocal.rules.autoscaling import (
            ScalingLimits,
            ScalingState,
            TargetTrackingPolicy,
        )

        self.period_s = float(METRIC_PERIOD_S)
        self.next_eval_s = self.period_s
        self.count = 0
        self.metric: list[float | None] = []
        self.limits = ScalingLimits(
            min_capacity=scaling.min_instances, max_capacity=scaling.max_instances
        )
        policy_args: dict[str, Any] = {"target_value": scaling.target_invocations_per_instance}
        if scaling.scale_out_cooldown_s is not None:
            policy_args["scale_out_cooldown_s"] = scaling.scale_out_cooldown_s
        if scaling.scale_in_cooldown_s is not None:
            policy_args["scale_in_cooldown_s"] = scaling.scale_in_cooldown_s
        self.policy = TargetTrackingPolicy(**policy_args)
        self.state = ScalingState(capacity=capacity)
        self.activities: list[dict[str, Any]] = []

    def evaluate(self, now_s: float, instances: int) -> list[tuple[float, int]]:
        """Close every period up to ``now_s``; each change as (the period's end, the new
        capacity), in time order."""
        from mmelocal.rules.autoscaling import target_tracking_step

        changed: list[tuple[float, int]] = []
        while now_s >= self.next_eval_s:
            self.metric.append(self.count / max(1, instances))
            self.count = 0
            self.state = replace(self.state, capacity=instances)
            self.state, decision = target_tracking_step(
                self.next_eval_s, self.state, self.metric[-60:], self.policy, self.limits
            )
            if decision.cause is not None and decision.capacity != instances:
                self.activities.append(
                    {
                        "time_s": self.next_eval_s,
                        "capacity": decision.capacity,
                        "cause": decision.cause,
                    }
                )
                instances = decision.capacity
                changed.append((self.next_eval_s, instances))
            self.next_eval_s += self.period_s
        return changed


__all__ = ["Autoscaling", "LoadTimes", "SimConfig", "simulate"]
