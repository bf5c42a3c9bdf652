"""The master of a replay over the load tests' Locust workers: the workers' hello (sent on
connect) is answered with their shard; once all are ready they get one wall-clock start;
their batches are gathered into every request's outcome. The worker side and the messages
are :mod:`mmelocal.bench.loadtest._locust_schedule`, registered on the load tests' worker
(:mod:`mmelocal.bench.loadtest._locust_dist`), so one set of workers sends both.

Started by :func:`mmelocal.traffic.replay.replay` as ``python -m
mmelocal.traffic._locust_replay CONFIG OUT --bind-port P --expect N --timeout S``. Importing
this module patches the process with gevent: only Locust processes import it.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import locust  # noqa: E402
import numpy as np  # noqa: E402
from locust.env import Environment  # noqa: E402

from mmelocal.bench.loadtest._locust_dist import HELLO  # noqa: E402
from mmelocal.bench.loadtest._locust_schedule import (  # noqa: E402
    BATCH,
    ERROR,
    ERROR_HIT,
    GO,
    HIT,
    MISS,
    READY,
    REPLAY,
)
from mmelocal.bench.loadtest.workers import DEFAULT_CONNECT_TIMEOUT_S  # noqa: E402

START_DELAY_S = 0.5


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def run_master(
    config: dict[str, Any], *, bind_port: int, expect: int, timeout_s: float
) -> dict[str, Any]:
    """Hand out the shards, start them together, gather every request's outcome."""
    env = Environment(user_classes=[], events=locust.events)
    runner = env.create_master_runner(master_bind_host="127.0.0.1", master_bind_port=bind_port)
    shards: list[dict[str, Any]] = config["shards"]
    common = {k: v for k, v in config.items() if k != "shards"}
    common["body"] = Path(config["body_path"]).read_bytes()
    assigned: dict[str, int] = {}
    ready: set[str] = set()
    final: set[str] = set()
    parts: list[tuple[bytes, bytes, bytes]] = []
    errors: Counter[str] = Counter()
    aborted: list[str] = []
    total = sum(len(s["indices"]) for s in shards)
    done = [0]

    def on_hello(environment: Any, msg: Any, **_: Any) -> None:
        if msg.node_id in assigned or len(assigned) >= len(shards):
            return
        number = len(assigned)
        assigned[msg.node_id] = number
        runner.send_message(REPLAY, {**common, **shards[number]}, msg.node_id)

    def on_ready(environment: Any, msg: Any, **_: Any) -> None:
        ready.add(msg.node_id)

    def on_batch(environment: Any, msg: Any, **_: Any) -> None:
        data = msg.data
        parts.append((data["indices"], data["latency"], data["codes"]))
        done[0] += len(data["indices"]) // 8
        errors.update(data["errors"])
        if data.get("aborted"):
            aborted.append(data["aborted"])
        if data.get("final"):
            final.add(msg.node_id)

    runner.register_message(HELLO, on_hello)
    runner.register_message(READY, on_ready)
    runner.register_message(BATCH, on_batch)
    deadline = time.time() + DEFAULT_CONNECT_TIMEOUT_S
    while len(ready) < min(expect, len(shards)) and time.time() < deadline:
        gevent.sleep(0.05)
    if len(ready) < min(expect, len(shards)):
        runner.quit()
        raise SystemExit(
            f"only {len(ready)} of {expect} Locust workers were ready in "
            f"{DEFAULT_CONNECT_TIMEOUT_S:g} s"
        )
    t0_wall = time.time() + START_DELAY_S
    runner.send_message(GO, {"t0_wall": t0_wall})
    _emit({"event": "started", "t0_wall": t0_wall})
    end = time.time() + timeout_s
    last = 0.0
    while len(final) < len(ready) and time.time() < end:
        gevent.sleep(0.05)
        if time.time() - last > 0.25:
            _emit({"event": "progress", "done": done[0], "total": total})
            last = time.time()
    runner.quit()
    index = np.concatenate([np.frombuffer(p[0], dtype="<i8") for p in parts]) if parts else []
    latency = np.concatenate([np.frombuffer(p[1], dtype="<f8") for p in parts]) if parts else []
    codes = np.asarray(
        np.concatenate([np.frombuffer(p[2], dtype="<i1") for p in parts]) if parts else [],
        dtype=np.int8,
    )
    return {
        "t0_wall": t0_wall,
        "indices": np.asarray(index).tolist(),
        "latency_s": np.asarray(latency).tolist(),
        # each request's outcome: answered, its ModelCacheHit sample (reached its model,
        # answered or not) and that sample's value
        "ok": ((codes == MISS) | (codes == HIT)).tolist(),
        "sampled": (codes != ERROR).tolist(),
        "hit": ((codes == HIT) | (codes == ERROR_HIT)).tolist(),
        "errors": dict(errors),
        "aborted": aborted,
        "workers": len(ready),
        "complete": len(final) == len(ready),
    }


def main(argv: list[str]) -> int:
    """``CONFIG OUT --bind-port P --expect N [--timeout S]``."""
    parser = argparse.ArgumentParser(prog="python -m mmelocal.traffic._locust_replay")
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--bind-port", type=int, required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args(argv)
    config = json.loads(Path(args.config).read_text("utf-8"))
    result = run_master(
        config, bind_port=args.bind_port, expect=args.expect, timeout_s=args.timeout
    )
    Path(args.out).write_text(json.dumps(result), "utf-8")
    _emit({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
