"""Replayed vs simulated: does the simulator predict what the emulator does?

For each trace (Zipf 0.8, Zipf 1.2, uniform, and a hot set that moves halfway), a fresh
``mmelocal serve`` (tiny Python-backend copies, a memory budget that holds a few of them)
is replayed open loop; then the same trace is simulated with what the replay recorded
(``config_from_replay``): the emulator's memory rule (its room for models, each at the
footprint it measured, by its state page), its load wait and load limit (the same page),
the load times (how long each load held the instance) and the service time (warm p50)
(the mean of ``--seeds`` simulations, whose load times are drawn from the measured ones).
``capacity`` is the most models the replay saw ready at once, beside the most the
simulations held.

Goal: simulated hit ratio within 5 points of the replayed one, cold starts within 15 %.
Run: ``.venv/bin/python benchmarks/traffic_validation.py [--duration 180] [--json OUT]``
(minutes: every trace is replayed in real time).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.tiny_model import request_json, write_tarball
from mmelocal.traffic.compare import agreement, config_from_replay
from mmelocal.traffic.make import Popularity, fill_store, make_trace, parse_hot_set
from mmelocal.traffic.replay import ReplayOptions, replay
from mmelocal.traffic.simulate import simulate
from mmelocal.traffic.trace import Trace

MiB = 1024 * 1024


def traces(models: int, rate: float, duration: float) -> dict[str, Trace]:
    """The four validation traces."""
    return {
        "zipf 0.8": make_trace(
            models=models,
            rate_rps=rate,
            duration_s=duration,
            popularity=Popularity(zipf_s=0.8),
            seed=11,
        ),
        "zipf 1.2": make_trace(
            models=models,
            rate_rps=rate,
            duration_s=duration,
            popularity=Popularity(zipf_s=1.2),
            seed=12,
        ),
        "uniform": make_trace(
            models=models,
            rate_rps=rate,
            duration_s=duration,
            popularity=Popularity(kind="uniform"),
            seed=13,
        ),
        "hot set moving": make_trace(
            models=models,
            rate_rps=rate,
            duration_s=duration,
            popularity=parse_hot_set(f"{max(1, models // 4)}:0.9"),
            shift_at_s=duration / 2,
            seed=14,
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=180.0)
    parser.add_argument("--budget-mib", type=int, default=120)
    parser.add_argument("--only", default=None, help="run one trace by name")
    parser.add_argument("--seeds", type=int, default=5, help="simulations averaged per trace")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    body = json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()
    rows = []
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        tarball = write_tarball(work / "tiny.tar.gz")
        for name, trace in traces(args.models, args.rate, args.duration).items():
            if args.only and name != args.only:
                continue
            root = work / name.replace(" ", "-")
            fill_store(root / "store", tarball, trace.models)
            config = EmulatorConfig(
                store=str(root / "store"),
                cache_dir=root / "cache",
                memory_budget_bytes=args.budget_mib * MiB,
            )
            t0 = time.perf_counter()
            with EmulatorServer(config) as server:
                replayed = replay(
                    trace,
                    body=body,
                    url=server.url,
                    options=ReplayOptions(),
                )
            replay_s = time.perf_counter() - t0
            # the load times are drawn at random: average the simulation over seeds
            configs = [config_from_replay(replayed, seed=s) for s in range(args.seeds)]
            runs = [simulate(trace, c) for c in configs]
            fits = max(int(r["max_loaded"]) for r in runs)
            simulated = runs[0]
            simulated.data["hit_ratio"] = float(np.mean([r["hit_ratio"] for r in runs]))
            simulated.data["cold_starts"] = round(float(np.mean([r["cold_starts"] for r in runs])))
            simulated.data["loads"] = round(float(np.mean([r["loads"] for r in runs])))
            agree = agreement(replayed, simulated)
            row = {
                "trace": name,
                "requests": replayed["requests"],
                "capacity": replayed["max_loaded"],
                "simulated_capacity": fits,
                "memory_room_mib": (replayed.data.get("memory_room_bytes") or 0) / MiB,
                "loads_replayed": replayed["loads"],
                "loads_simulated": simulated["loads"],
                "load_cycle_s_p50": replayed["load_cycle_s_p50"],
                "errors": replayed["errors"],
                "replay_s": replay_s,
                **agree.to_dict(),
            }
            rows.append(row)
            print(
                f"{name:15s} requests {row['requests']:5d}  capacity {row['capacity']} "
                f"(simulated {fits}; room {row['memory_room_mib']:.1f} MiB)  "
                f"hit ratio replayed {agree.hit_ratio_replayed:.3f} simulated "
                f"{agree.hit_ratio_simulated:.3f} ({agree.hit_ratio_points:.1f} points)  "
                f"cold starts {agree.cold_starts_replayed} vs {agree.cold_starts_simulated} "
                f"({agree.cold_starts_relative * 100:.1f} %)  loads {row['loads_replayed']} vs "
                f"{row['loads_simulated']}  {'OK' if agree.holds else 'MISS'}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if rows and all(r["holds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
