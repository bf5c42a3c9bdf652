"""Open-loop schedules on the load tests' Locust workers: the worker side of
``mmelocal traffic replay --workers N`` (the master is :mod:`mmelocal.traffic._locust_replay`).

One sending engine: the worker processes a load test starts also send a replay shard (the
replay starts them on this machine, its master bound to 127.0.0.1: no remote workers). A
shard is every request of some models (one model's requests all in one shard, in their
order), each sent at ``t0 + time / speed`` whatever the earlier ones are doing, its latency
counted from that time. Guards stop the shard with a message (never a slower schedule): a
worker more than ``max_lag_s`` late, or ``max_in_flight`` requests unanswered.

Messages: ``mmelocal_replay`` (master -> worker: the shard and settings), answered
``mmelocal_replay_ready``; ``mmelocal_replay_go`` (the wall-clock start);
``mmelocal_replay_batch`` (worker -> master, about once a second and a ``final`` one: each
request's index, latency and outcome, error counts, and ``aborted`` when a guard stopped it).
Imported only by gevent-patched Locust processes.
"""

import time
from collections import Counter
from typing import Any

import gevent
import numpy as np

from mmelocal.facts.invoke_errors import error_code

REPLAY = "mmelocal_replay"
READY = "mmelocal_replay_ready"
GO = "mmelocal_replay_go"
BATCH = "mmelocal_replay_batch"
#: outcome codes in a batch: an answer whose model was not loaded (MISS) or was (HIT); a
#: failed call refused before it reached a model, or with no answer (ERROR); a failed call
#: that reached its model, not loaded (ERROR_MISS) or loaded (ERROR_HIT): its answer says
#: which, as every answer of a call that reached its model (a ``ModelCacheHit`` sample) does
MISS, HIT, ERROR, ERROR_MISS, ERROR_HIT = 0, 1, 2, 3, 4


def register_replay(runner: Any) -> None:
    """Make a load-test worker able to send a replay shard (see the module docstring)."""
    import urllib3

    shard: dict[str, Any] = {}

    def on_replay(environment: Any, msg: Any, **_: Any) -> None:
        shard.update(msg.data)
        runner.send_message(READY, {"requests": len(shard["indices"])})

    def on_go(environment: Any, msg: Any, **_: Any) -> None:
        gevent.spawn(_send_shard, runner, shard, float(msg.data["t0_wall"]), urllib3)

    runner.register_message(REPLAY, on_replay)
    runner.register_message(GO, on_go)


def _send_shard(runner: Any, shard: dict[str, Any], t0: float, urllib3: Any) -> None:
    indices: list[int] = shard["indices"]
    times: list[float] = shard["times"]
    targets: list[str] = shard["targets"]
    speed = float(shard["speed"])
    cap = int(shard["max_in_flight"])
    max_lag = float(shard["max_lag_s"])
    pool = urllib3.PoolManager(maxsize=cap, block=False, retries=False)
    done_idx: list[int] = []
    done_lat: list[float] = []
    done_code: list[int] = []
    errors: Counter[str] = Counter()
    in_flight = [0]
    stop = [False]

    def flush(final: bool = False, aborted: str | None = None) -> None:
        batch = {
            "indices": np.asarray(done_idx, dtype="<i8").tobytes(),
            "latency": np.asarray(done_lat, dtype="<f8").tobytes(),
            "codes": np.asarray(done_code, dtype="<i1").tobytes(),
            "errors": dict(errors),
            "final": final,
            "aborted": aborted,
        }
        done_idx.clear()
        done_lat.clear()
        done_code.clear()
        errors.clear()
        runner.send_message(BATCH, batch)

    def reporter() -> None:
        while not stop[0]:
            gevent.sleep(1.0)
            if done_idx:
                flush()

    def send(i: int, due: float, target: str) -> None:
        code, kind = ERROR, ""
        try:
            resp = pool.request(
                "POST",
                shard["url"],
                body=shard["body"],
                headers={
                    "Content-Type": shard["content_type"],
                    shard["target_header"]: target,
                },
                timeout=urllib3.Timeout(total=float(shard["timeout_s"])),
            )
            cache = resp.headers.get(shard["cache_header"])
            if resp.status == 200:
                code = HIT if cache == "hit" else MISS
            else:
                kind = error_code(resp.status, resp.headers, resp.data)
                if cache is not None:
                    code = ERROR_HIT if cache == "hit" else ERROR_MISS
        except Exception as exc:
            kind = type(exc).__name__
        finally:
            in_flight[0] -= 1
        if kind:
            errors[kind] += 1
        done_idx.append(i)
        done_lat.append(time.time() - due)
        done_code.append(code)

    gevent.spawn(reporter)
    greenlets = []
    aborted = None
    for i, t, target in zip(indices, times, targets, strict=True):
        due = t0 + t / speed
        delay = due - time.time()
        if delay > 0:
            gevent.sleep(delay)
        elif -delay > max_lag:
            aborted = (
                f"a worker fell {-delay * 1e3:,.0f} ms behind the schedule at trace row {i + 2} "
                f"(t={t:.3f} s): add workers or lower --speed"
            )
            break
        if in_flight[0] >= cap:
            aborted = (
                f"{in_flight[0]} requests in flight on one worker at trace row {i + 2} "
                f"(t={t:.3f} s), the --max-in-flight cap: the endpoint answers slower than the "
                "trace sends"
            )
            break
        in_flight[0] += 1
        greenlets.append(gevent.spawn(send, i, due, target))
    gevent.joinall(greenlets)
    stop[0] = True
    flush(final=True, aborted=aborted)


__all__ = [
    "BATCH",
    "ERROR",
    "ERROR_HIT",
    "ERROR_MISS",
    "GO",
    "HIT",
    "MISS",
    "READY",
    "REPLAY",
    "register_replay",
]
