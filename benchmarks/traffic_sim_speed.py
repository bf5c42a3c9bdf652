"""How fast the traffic simulator runs: 2,000,000 requests over 10,000 models and 8 instances.

The trace is Zipf 1.0 at 2,000 requests/s for 1,000 s; each instance holds 1,000 models
(8,000 of 10,000 fit), loads take 0.5 s, 4 at a time per instance, service 10 ms, 4 slots
(a steady state: the loads keep up with the misses).
The reference, measured in the same run, is a bare loop over the same requests that does
what any simulator must per request (a dict lookup and an LRU touch); the ratio says how
much the platform's rules cost on top.

Goal: under 60 s on the 2-core development machine.
Run: ``.venv/bin/python benchmarks/traffic_sim_speed.py [--requests 2000000]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import OrderedDict

from mmelocal.traffic.make import Popularity, make_trace
from mmelocal.traffic.simulate import LoadTimes, SimConfig, simulate

GOAL_S = 60.0


def bare_loop(ids: list[int], models: int, capacity: int) -> float:
    """The floor: per request one dict lookup and one LRU touch/insert (seconds)."""
    t0 = time.perf_counter()
    lru: OrderedDict[int, None] = OrderedDict()
    for m in ids:
        if m in lru:
            lru.move_to_end(m)
        else:
            lru[m] = None
            if len(lru) > capacity:
                lru.popitem(last=False)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument("--models", type=int, default=10_000)
    parser.add_argument("--instances", type=int, default=8)
    args = parser.parse_args()
    rate = 2000.0
    t0 = time.perf_counter()
    trace = make_trace(
        models=args.models,
        rate_rps=rate,
        duration_s=args.requests / rate,
        popularity=Popularity(zipf_s=1.0),
        seed=1,
    )
    make_s = time.perf_counter() - t0
    config = SimConfig(
        instances=args.instances,
        models_per_instance=1000,
        load=LoadTimes(samples_s=(0.5,)),
        service_s=0.01,
        concurrency=4,
        parallel_loads=4,
    )
    t0 = time.perf_counter()
    result = simulate(trace, config).data
    sim_s = time.perf_counter() - t0
    floor_s = bare_loop(trace.model_ids.tolist(), args.models, 1000 * args.instances)
    print(f"trace: {len(trace):,} requests over {args.models:,} models, made in {make_s:.2f} s")
    print(
        f"simulate: {sim_s:.2f} s ({len(trace) / sim_s:,.0f} requests/s) on {args.instances} "
        f"instances; hit ratio {result['hit_ratio']:.3f}, {result['loads']:,} loads, "
        f"{result['errors']:,} errors, most loaded {result['max_loaded']:,}"
    )
    print(f"reference bare loop: {floor_s:.2f} s; simulator / reference = {sim_s / floor_s:.1f}x")
    print(f"goal {GOAL_S:.0f} s: {sim_s / GOAL_S:.2f} of it ({'OK' if sim_s < GOAL_S else 'MISS'})")
    return 0 if sim_s < GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
