"""Locust's distributed mode for a load test: the master and the worker processes.

Everything between the processes travels over Locust's own master/worker protocol
(``MasterRunner``/``WorkerRunner``, ZeroMQ); mmelocal only adds custom messages on it:

- ``mmelocal_hello`` (worker -> master, once its handlers are in place) and the answer
  ``mmelocal_setup``: the settings and the payload, so a worker on another machine needs no
  local file; the worker answers ``mmelocal_ready``;
- ``mmelocal_stage`` (master -> workers): the shape runs on the master, which says which
  stage is in effect and, once its ramp is over, that its hold began (``hold``); workers
  file every request under the stage, and those of the hold apart too;
- ``mmelocal_batch`` (worker -> master, about once a second): every request's latency since
  the last batch (float64, not Locust's rounded histogram), those of a hold again
  (``held``), failures, error texts; the
  last one (``final``) also carries the worker's CPU per stage;
- ``mmelocal_flush`` (master -> workers, at the planned end of the last stage): stop the
  users, send the final batch and quit.

Started by :func:`mmelocal.bench.loadtest.runner.run_loadtest` as ``python -m
mmelocal.bench.loadtest._locust_dist master CONFIG OUT --bind-host H --bind-port P --expect
N`` and ``... worker --master-host H --master-port P``. Like
:mod:`mmelocal.bench.loadtest._locust_worker`, importing it patches the process with
gevent: nothing else in mmelocal imports it.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import locust  # noqa: E402
import locust.runners  # noqa: E402
import numpy as np  # noqa: E402
from locust import LoadTestShape, User, argument_parser  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.runners import STATE_MISSING  # noqa: E402

from mmelocal.bench.loadtest._locust_schedule import register_replay  # noqa: E402
from mmelocal.bench.loadtest._locust_worker import StageCpu, _emit, user_class  # noqa: E402
from mmelocal.bench.loadtest.shape import LoadShape  # noqa: E402
from mmelocal.bench.loadtest.stepstats import StageClock, stage_steps  # noqa: E402
from mmelocal.bench.loadtest.workers import BATCH_INTERVAL_S, NO_MASTER_EXIT_CODE  # noqa: E402

HELLO = "mmelocal_hello"
SETUP = "mmelocal_setup"
READY = "mmelocal_ready"
STAGE = "mmelocal_stage"
BATCH = "mmelocal_batch"
FLUSH = "mmelocal_flush"
#: how long the master waits for the final batches after the last stage
FLUSH_TIMEOUT_S = 15.0


class _MasterShape(LoadTestShape):
    """The shape, run by the master's Locust: the users of the stage planned now."""

    def __init__(self, shape: LoadShape) -> None:
        super().__init__()
        self.shape = shape

    def tick(self) -> tuple[int, float] | None:
        index = self.shape.stage_at(self.get_run_time())
        if index is None:
            return None
        stage = self.shape.stages[index]
        return stage.users, stage.spawn_rate


class _WorkerView:
    """What the master knows of one worker."""

    def __init__(self, client_id: str, n_stages: int) -> None:
        self.client_id = client_id
        self.host = ""
        self.pid = 0
        self.ready = False
        self.final = False
        self.status = "ok"
        self.requests = 0
        self.failures = 0
        self.cpu_percent: float | None = None
        self.stage_cpu_percent: list[float | None] = [None] * n_stages
        self.last_stage = 0
        self.lost_stage: int | None = None


def _locust_options(*, rebalance: bool) -> Any:
    parser = argument_parser.get_empty_argument_parser()
    argument_parser.setup_parser_arguments(parser)
    options = parser.parse(args=[])
    # a worker that goes missing has its users started on the others at once
    options.enable_rebalancing = rebalance
    return options


def run_master(
    config: dict[str, Any],
    *,
    bind_host: str,
    bind_port: int,
    expect: int,
    connect_timeout_s: float,
) -> dict[str, Any]:
    """Run the shape over the workers that connect; return the merged result data."""
    shape = LoadShape.from_dict(config["shape"])
    n = len(shape.stages)
    payload = Path(config["payload_path"]).read_bytes()
    settings = {k: v for k, v in config.items() if k != "payload_path"}
    driver = _MasterShape(shape)
    env = Environment(
        user_classes=[user_class(config, payload)],
        shape_class=driver,
        events=locust.events,
        parsed_options=_locust_options(rebalance=True),
    )
    runner = env.create_master_runner(master_bind_host=bind_host, master_bind_port=bind_port)
    views: dict[str, _WorkerView] = {}
    order: list[str] = []
    latencies: list[list[np.ndarray]] = [[] for _ in range(n)]
    held: list[list[np.ndarray]] = [[] for _ in range(n)]
    holding = [False]
    failures = [0] * n
    errors: Counter[str] = Counter()
    first_failure_users: list[int] = []
    current = [0]
    running = [False]

    def view(client_id: str) -> _WorkerView:
        if client_id not in views:
            views[client_id] = _WorkerView(client_id, n)
            order.append(client_id)
        return views[client_id]

    def on_hello(environment: Environment, msg: Any, **_: Any) -> None:
        view(msg.node_id)
        runner.send_message(SETUP, {"config": settings, "payload": payload}, msg.node_id)

    def on_ready(environment: Environment, msg: Any, **_: Any) -> None:
        worker = view(msg.node_id)
        worker.ready, worker.host, worker.pid = True, msg.data["host"], msg.data["pid"]
        if running[0]:  # joined late: the stage now
            runner.send_message(STAGE, {"stage": current[0], "hold": holding[0]}, msg.node_id)

    def on_batch(environment: Environment, msg: Any, **_: Any) -> None:
        worker = view(msg.node_id)
        data = msg.data
        for stage, blob in data["latencies"]:
            values = np.frombuffer(blob, dtype="<f8")
            latencies[stage].append(values)
            worker.requests += len(values)
        for stage, blob in data.get("held", ()):
            held[stage].append(np.frombuffer(blob, dtype="<f8"))
        for stage, count in data["failures"]:
            failures[stage] += count
            worker.failures += count
            if count and not first_failure_users:
                first_failure_users.append(runner.user_count)
        errors.update(data["errors"])
        worker.last_stage = current[0]
        if data.get("final"):
            worker.final = True
            worker.cpu_percent = data["cpu_percent"]
            worker.stage_cpu_percent = data["stage_cpu_percent"]

    runner.register_message(HELLO, on_hello)
    runner.register_message(READY, on_ready)
    runner.register_message(BATCH, on_batch)

    wall_start = time.perf_counter()
    deadline = wall_start + connect_timeout_s
    while sum(v.ready for v in views.values()) < expect and time.perf_counter() < deadline:
        _emit(
            {
                "event": "waiting",
                "connected": sum(v.ready for v in views.values()),
                "expected": expect,
            }
        )
        gevent.sleep(0.2)
    ready = [cid for cid in order if views[cid].ready]
    if not ready:
        runner.quit()
        raise SystemExit(
            f"no Locust worker connected to {bind_host}:{bind_port} within {connect_timeout_s:g} s"
        )

    started_at: list[float | None] = [None] * n
    hold_at: list[float | None] = [None] * n
    users_seen = [0] * n
    wall_start = time.perf_counter()
    runner.start_shape()
    running[0] = True
    started_at[0] = 0.0
    runner.send_message(STAGE, {"stage": 0})
    holding[0] = False
    last_emit, last_total, last_time = 0.0, 0, wall_start
    while True:  # until the planned end: then the workers stop their users (FLUSH)
        gevent.sleep(0.1)
        now = time.perf_counter()
        run_time = driver.get_run_time()
        index = shape.stage_at(run_time)
        if index is None:
            end_s = run_time
            running[0] = False
            break
        if index != current[0]:
            current[0] = index
            started_at[index] = run_time
            holding[0] = False
            runner.send_message(STAGE, {"stage": index})
        began = started_at[index]
        if not holding[0] and began is not None and run_time >= began + shape.ramp_s(index):
            holding[0] = True  # the hold is timed from this message on, as workers file it
            hold_at[index] = run_time
            runner.send_message(STAGE, {"stage": index, "hold": True})
        users_seen[current[0]] = runner.user_count
        for cid in ready:
            worker = views[cid]
            node = runner.clients.get(cid)
            if worker.status == "ok" and (node is None or node.state == STATE_MISSING):
                worker.status = "missing"
                worker.lost_stage = worker.last_stage
        total = sum(v.requests for v in views.values())
        if now - last_emit >= 0.5:
            _emit(
                {
                    "event": "progress",
                    "elapsed_s": round(now - wall_start, 2),
                    "duration_s": shape.duration_s,
                    "stage": current[0],
                    "stage_name": shape.stages[current[0]].name,
                    "users": runner.user_count,
                    "requests": total,
                    "failures": sum(v.failures for v in views.values()),
                    "rps": round((total - last_total) / max(now - last_time, 1e-6), 1),
                    "workers": sum(v.status == "ok" for v in views.values() if v.ready),
                }
            )
            last_emit, last_total, last_time = now, total, now
    alive = [cid for cid in ready if views[cid].status == "ok"]
    for cid in alive:
        runner.send_message(FLUSH, None, cid)
    flush_deadline = time.perf_counter() + FLUSH_TIMEOUT_S
    while not all(views[cid].final for cid in alive) and time.perf_counter() < flush_deadline:
        gevent.sleep(0.05)
    wall_s = time.perf_counter() - wall_start
    for cid in alive:
        if not views[cid].final:
            views[cid].status = "no final report"
            views[cid].lost_stage = views[cid].last_stage
    runner.quit()

    steps = stage_steps(
        shape,
        started_at=started_at,
        end_s=end_s,
        users_seen=users_seen,
        latencies_ms=[np.concatenate(parts) if parts else [] for parts in latencies],
        failures=failures,
        hold_at=hold_at,
        held_ms=[np.concatenate(parts) if parts else [] for parts in held],
    )
    details: list[dict[str, Any]] = []
    for number, cid in enumerate(order, start=1):
        worker = views[cid]
        if not worker.ready:
            continue
        lost = worker.lost_stage
        details.append(
            {
                "name": f"worker {number}",
                "host": worker.host,
                "pid": worker.pid,
                "status": worker.status,
                "requests": worker.requests,
                "failures": worker.failures,
                "cpu_percent": worker.cpu_percent,
                "stage_cpu_percent": worker.stage_cpu_percent,
                "missed_stages": [] if lost is None else [s.name for s in shape.stages[lost:]],
            }
        )
    for _ in range(expect - len(details)):
        details.append(
            {
                "name": f"worker {len(details) + 1}",
                "host": "",
                "pid": 0,
                "status": "never connected",
                "requests": 0,
                "failures": 0,
                "cpu_percent": None,
                "stage_cpu_percent": [None] * n,
                "missed_stages": [s.name for s in shape.stages],
            }
        )
    cpus = [float(d["cpu_percent"]) for d in details if d["cpu_percent"] is not None]
    total_stats = env.stats.total
    return {
        "steps": steps,
        "wall_s": wall_s,
        "loadgen_cpu_percent": max(cpus, default=0.0),
        "workers": expect,
        "worker_details": details,
        "locust_total_requests": total_stats.num_requests,
        "locust_total_failures": total_stats.num_failures,
        "first_failure_users": first_failure_users[0] if first_failure_users else None,
        "errors": dict(errors.most_common(10)),
    }


class _WorkerState:
    """A worker's measurements not yet sent to the master."""

    def __init__(self) -> None:
        self.stage = 0
        self.hold = False
        self.latencies: dict[int, list[float]] = {}
        self.held: dict[int, list[float]] = {}
        self.failures: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self.cpu: StageCpu | None = None
        #: the master's stage messages on this worker's clock: a request counts in the
        #: stage it was sent in (its completion less its latency)
        self.clock = StageClock()

    def enter(self, stage: int, hold: bool) -> None:
        self.stage, self.hold = stage, hold
        self.clock.mark(time.perf_counter(), stage, hold)

    def record(self, response_time: float, exception: Any) -> None:
        stage, held = self.clock.at(time.perf_counter() - float(response_time) / 1000.0)
        self.latencies.setdefault(stage, []).append(float(response_time))
        if held:
            self.held.setdefault(stage, []).append(float(response_time))
        if exception is not None:
            self.failures[stage] += 1
            self.errors[str(exception)[:200]] += 1

    def take(self) -> dict[str, Any]:
        batch = {
            "latencies": [
                [stage, np.asarray(values, dtype="<f8").tobytes()]
                for stage, values in self.latencies.items()
            ],
            "held": [
                [stage, np.asarray(values, dtype="<f8").tobytes()]
                for stage, values in self.held.items()
            ],
            "failures": [[stage, count] for stage, count in self.failures.items()],
            "errors": dict(self.errors),
        }
        self.latencies, self.held, self.failures, self.errors = {}, {}, Counter(), Counter()
        return batch


def run_worker(master_host: str, master_port: int, wait_s: float | None = None) -> int:
    """Join the master, take its settings and payload, run the users it assigns; with
    ``wait_s``, give up when no master has answered after that many seconds (exit
    :data:`~mmelocal.bench.loadtest.workers.NO_MASTER_EXIT_CODE`)."""
    env = Environment(user_classes=[], events=locust.events)
    if wait_s is not None:
        # Locust's worker sends client_ready and waits CONNECT_TIMEOUT s for the master's
        # answer, CONNECT_RETRY_COUNT + 1 times, then raises ConnectionError (runners.py,
        # WorkerRunner.connect_to_master): module settings, read at each try
        step_s = max(1, min(locust.runners.CONNECT_TIMEOUT, math.ceil(wait_s)))
        locust.runners.CONNECT_TIMEOUT = step_s
        locust.runners.CONNECT_RETRY_COUNT = max(0, math.ceil(wait_s / step_s) - 1)
    try:
        runner = env.create_worker_runner(master_host=master_host, master_port=master_port)
    except ConnectionError:
        return NO_MASTER_EXIT_CODE
    state = _WorkerState()
    done = gevent.event.Event()

    def reporter() -> None:
        while not done.is_set():
            gevent.sleep(BATCH_INTERVAL_S)
            if not done.is_set() and (state.latencies or state.errors):
                runner.send_message(BATCH, state.take())

    def on_setup(environment: Environment, msg: Any, **_: Any) -> None:
        if state.cpu is None:
            config, payload = msg.data["config"], msg.data["payload"]
            if config.get("seed") is not None:
                random.seed(int(config["seed"]) * 1000 + int(getattr(runner, "worker_index", 0)))
            users: type[User] = user_class(config, payload)
            environment.user_classes = [users]
            state.cpu = StageCpu(len(config["shape"]["stages"]))
            gevent.spawn(reporter)
        runner.send_message(READY, {"host": socket.gethostname(), "pid": os.getpid()})

    def on_stage(environment: Environment, msg: Any, **_: Any) -> None:
        state.enter(int(msg.data["stage"]), bool(msg.data.get("hold", False)))
        if state.cpu is not None:
            state.cpu.enter(state.stage)

    def on_flush(environment: Environment, msg: Any, **_: Any) -> None:
        runner.stop()  # the planned end: no request starts after it
        done.set()
        batch = state.take()
        cpu = state.cpu
        if cpu is not None:
            cpu.enter(None)
            total_cpu, total_wall = sum(cpu.cpu_s), sum(cpu.wall_s)
            batch["stage_cpu_percent"] = cpu.percents()
            batch["cpu_percent"] = 100.0 * total_cpu / total_wall if total_wall > 0 else None
        batch["final"] = True
        runner._send_stats()  # Locust's own totals first, so the master's are complete
        runner.send_message(BATCH, batch)
        gevent.spawn_later(0.2, runner.quit)

    def on_request(response_time: float, exception: Any = None, **_: Any) -> None:
        state.record(response_time, exception)

    runner.register_message(SETUP, on_setup)
    runner.register_message(STAGE, on_stage)
    runner.register_message(FLUSH, on_flush)
    register_replay(runner)  # the same workers send `mmelocal traffic replay --workers` shards
    env.events.request.add_listener(on_request)
    runner.send_message(HELLO)  # Locust connected in create_worker_runner: handlers are set now
    runner.greenlet.join()
    return 0


def main(argv: list[str]) -> int:
    """``master CONFIG OUT --bind-host H --bind-port P --expect N`` or ``worker --master-host
    H --master-port P``."""
    parser = argparse.ArgumentParser(prog="python -m mmelocal.bench.loadtest._locust_dist")
    sub = parser.add_subparsers(dest="role", required=True)
    master = sub.add_parser("master")
    master.add_argument("config")
    master.add_argument("out")
    master.add_argument("--bind-host", required=True)
    master.add_argument("--bind-port", type=int, required=True)
    master.add_argument("--expect", type=int, required=True)
    master.add_argument("--connect-timeout", type=float, default=60.0)
    worker = sub.add_parser("worker")
    worker.add_argument("--master-host", required=True)
    worker.add_argument("--master-port", type=int, required=True)
    worker.add_argument("--master-wait", type=float, default=None)
    args = parser.parse_args(argv)
    if args.role == "worker":
        return run_worker(args.master_host, args.master_port, args.master_wait)
    config = json.loads(Path(args.config).read_text("utf-8"))
    result = run_master(
        config,
        bind_host=args.bind_host,
        bind_port=args.bind_port,
        expect=args.expect,
        connect_timeout_s=args.connect_timeout,
    )
    Path(args.out).write_text(json.dumps(result), "utf-8")
    _emit({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
