"""The shared routing rules (mmelocal.rules.routing): the simulator's fast eviction planner
equals the emulator's planner on random inputs, and the routing choices hold."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from mmelocal.rules.routing import (
    FastLru,
    InstanceView,
    ModelUsage,
    choose_instance,
    choose_ready,
    count_request,
    open_rate_window,
    plan_eviction,
    replica_instance,
)
from mmelocal.traffic.simulate import LoadTimes


@pytest.mark.parametrize("seed", range(300))
def test_fast_lru_plans_what_plan_eviction_plans(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(0, 30)
    names = [f"m{i}" for i in range(n)]
    rng.shuffle(names)  # recency order, least recent first
    # zero footprints too: a known 0 frees nothing in both (None is the unknown one)
    footprints = {name: 0 if rng.random() < 0.2 else rng.randint(1, 1000) for name in names}
    busy = {name for name in names if rng.random() < 0.3}
    baseline = rng.randint(0, 2000)
    limit = rng.randint(1, sum(footprints.values()) + baseline + 1000)
    need = rng.randint(-10, 1500)
    fast: FastLru[str] = FastLru(limit, baseline_bytes=baseline)
    for name in names:
        fast.add(name, footprints[name])
    usages = [
        ModelUsage(
            name=name,
            last_used_s=float(i),
            footprint_bytes=footprints[name],
            in_flight=1 if name in busy and rng.random() < 0.5 else 0,
            pinned=name in busy,
        )
        for i, name in enumerate(names)
    ]
    plan = plan_eviction(usages, used_bytes=fast.used_bytes, limit_bytes=limit, need_bytes=need)
    victims, fits = fast.plan(need, busy.__contains__)
    assert (tuple(victims), fits) == (plan.victims, plan.fits)


def test_fast_lru_keeps_recency_and_bytes() -> None:
    lru: FastLru[int] = FastLru(3)
    for m in (1, 2, 3):
        lru.add(m, 1)
    lru.touch(1)
    assert lru.plan(1) == ([2], True)
    lru.remove(2)
    assert 2 not in lru and len(lru) == 2 and lru.used_bytes == 2
    assert lru.plan(1) == ([], True)


def test_routing_choices() -> None:
    views = [
        InstanceView(up=True, ready=True, in_flight=3, free_bytes=10),
        InstanceView(up=True, ready=True, in_flight=1, free_bytes=0),
        InstanceView(up=False, ready=True, in_flight=0, free_bytes=99),
    ]
    assert choose_ready(views) == 1  # the least busy up holder
    loading = [InstanceView(up=True, free_bytes=5), InstanceView(up=True, loading=True)]
    assert choose_instance(loading) == 1  # join the load in progress
    cold = [
        InstanceView(up=True, free_bytes=5, model_count=2),
        InstanceView(up=True, free_bytes=5, model_count=1),
        InstanceView(up=False, free_bytes=50),
    ]
    assert choose_instance(cold) == 1  # most free, then fewer models; never a down one
    assert choose_instance([InstanceView(up=False)]) is None


def test_rate_window_and_replica() -> None:
    start, count = open_rate_window(0.0)
    start, count, rate = count_request(start, count, 0.5, 1.0)
    assert (start, count, rate) == (0.0, 1, None)
    start, count, rate = count_request(start, count, 2.0, 1.0)
    assert (start, count) == (2.0, 0) and rate == pytest.approx(1.0)  # (0, 2]: 2 in 2 s
    start, count, rate = count_request(start, count, 2.5, 1.0)
    start, count, rate = count_request(start, count, 3.0, 1.0)
    assert rate == pytest.approx(2.0)  # (2, 3]: 2 in 1 s, as the first window counts
    candidates = [(0, True, 10), (1, True, 50), (2, False, 99)]
    assert replica_instance(60, 50, [0], candidates) == 1
    assert replica_instance(40, 50, [0], candidates) is None  # not hot
    assert replica_instance(60, 50, [0, 1], candidates) is None  # already on two


def test_simulators_ready_choice_is_choose_ready() -> None:
    from types import SimpleNamespace

    from mmelocal.traffic.simulate import pick_holder

    rng = random.Random(7)
    for _ in range(2000):
        size = rng.randint(1, 6)
        fleet = [
            SimpleNamespace(
                up_at=rng.choice([0.0, 0.0, 5.0]),
                ready_at={0: rng.choice([0.0, 1.0, 5.0, float("inf")])},
                inflight={0: rng.randint(0, 2)},  # ties are common
            )
            for _ in range(size)
        ]
        holders = rng.sample(range(size), rng.randint(1, size))  # in the order they loaded
        t = rng.choice([0.5, 2.0, 6.0])
        i, loading = pick_holder(fleet, holders, 0, t)
        order = sorted(holders)
        views = [
            InstanceView(
                up=fleet[j].up_at <= t,
                ready=fleet[j].ready_at[0] <= t,
                in_flight=fleet[j].inflight[0],
            )
            for j in order
        ]
        chosen = choose_ready(views)
        assert i == (-1 if chosen is None else order[chosen])
        waiting = [j for j, v in zip(order, views, strict=True) if not (v.up and v.ready)]
        assert loading == (waiting[0] if waiting else -1)


def test_the_first_rate_window_counts_the_intervals_like_the_others() -> None:
    """Requests at 0, 0.5 and 1.0 s are two intervals in one second: 2/s, not 3/s (the
    request that opens a window is the previous window's end, never counted twice)."""
    from mmelocal.traffic.simulate import SimConfig, simulate
    from mmelocal.traffic.trace import Trace

    # m0's cold load at 0 s (0.1 s), then hits at 0.2, 0.7, 1.2: 2/s on both clocks
    trace = Trace(
        times_s=np.asarray([0.0, 0.2, 0.7, 1.2]),
        model_ids=np.zeros(4, dtype=np.int32),
        models=("m0",),
    )
    config = SimConfig(
        instances=2,
        models_per_instance=2,
        load=LoadTimes(samples_s=(0.1,)),
        service_s=0.0,
        hot_rps_threshold=3.0,
    )
    assert simulate(trace, config).data["loads"] == 1  # 2/s < 3/s: no replica
    hot = dataclasses.replace(config, hot_rps_threshold=2.0)
    assert simulate(trace, hot).data["loads"] == 2  # 2/s reaches 2/s: a replica


def test_the_emulators_router_measures_the_first_window_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    from mmelocal.emulator import router as router_module
    from mmelocal.emulator.model_state import READY

    clock = {"now": 100.0}
    monkeypatch.setattr(
        router_module, "time", types.SimpleNamespace(monotonic=lambda: clock["now"])
    )

    class Instance:
        up, free_bytes = True, 0

        def __init__(self, index: int) -> None:
            self.index = index
            self.models = {"hot": types.SimpleNamespace(state=READY, in_flight=0)}

        def is_ready(self, target: str) -> bool:
            return True

    r = router_module.Router([Instance(0), Instance(1)], rate_window_s=1.0)  # type: ignore[list-item]
    for now in (100.0, 100.5, 101.0):
        clock["now"] = now
        r.pick_ready("hot")
    assert r.rate_rps("hot") == pytest.approx(2.0)


@pytest.mark.parametrize("seed", range(200))
def test_fast_lru_plans_the_disks_evictions_as_plan_disk_eviction(seed: int) -> None:
    """The simulator keeps each instance's artifacts in a FastLru: for a download (need > 0)
    it deletes what plan_disk_eviction deletes."""
    from mmelocal.rules.routing import ArtifactUsage, plan_disk_eviction

    rng = random.Random(seed)
    names = [f"a{i}" for i in range(rng.randint(0, 30))]
    rng.shuffle(names)  # least recently used first
    sizes = {name: rng.randint(0, 1000) for name in names}
    in_use = {name for name in names if rng.random() < 0.3}
    used = sum(sizes.values())
    budget = rng.randint(1, used + 1000)
    need = rng.randint(1, 1500)
    disk: FastLru[str] = FastLru(budget)
    for name in names:
        disk.add(name, sizes[name])
    fast, _ = disk.plan(need, in_use.__contains__)
    usages = [
        ArtifactUsage(
            target=name, size_bytes=sizes[name], last_used_s=float(i), in_use=name in in_use
        )
        for i, name in enumerate(names)
    ]
    assert tuple(fast) == plan_disk_eviction(
        usages, used_bytes=used, budget_bytes=budget, need_bytes=need
    )
