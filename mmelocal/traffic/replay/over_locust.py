"""Replay over the load tests' Locust workers: the schedule sharded by model, one worker
process per shard and a master (:mod:`mmelocal.traffic._locust_replay`) that starts them
together and gathers every request's outcome."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.errors import ReplayAbortedError, UserInputError
from mmelocal.traffic.replay.emulator_state import _poll_state, _probe_kinds, _state_before
from mmelocal.traffic.replay.over_http import _aiohttp
from mmelocal.traffic.replay.schedule import (
    Progress,
    ReplayOptions,
    _Record,
    _schedule_s,
    shard_schedule,
)
from mmelocal.traffic.replay.targets import _origin, invocations_url
from mmelocal.traffic.trace import Trace

#: What the Locust master waits, beyond the schedule and a request's timeout, for the
#: workers' final batches before it reports what it has.
MASTER_MARGIN_S = 60.0


async def _replay_workers(
    trace: Trace,
    url: str,
    body: bytes,
    options: ReplayOptions,
    progress: Progress | None,
    workers: int,
) -> tuple[_Record, dict[str, Any]]:
    """The schedule sharded by model over ``workers`` Locust workers (the load tests'
    worker processes, started here) and a master that gathers every request's outcome."""
    import contextlib
    import os
    import sys
    import tempfile

    aiohttp = _aiohttp()

    from mmelocal.emulator.answers import CACHE_HEADER
    from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER
    from mmelocal.runtime.server_config import pick_free_port

    n = len(trace)
    rec = _Record.empty(n)
    target_url = invocations_url(url, "local")
    base = _origin(target_url)
    shards = [s for s in shard_schedule(trace, workers) if len(s)]
    times, models, ids = trace.times_s, trace.models, trace.model_ids
    state: dict[str, Any] = {}
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    with (
        tempfile.TemporaryDirectory(prefix="mmelocal-replay-") as work_dir,
        contextlib.ExitStack() as files,
    ):
        work = Path(work_dir)
        (work / "body").write_bytes(body)
        config = {
            "url": target_url,
            "body_path": str(work / "body"),
            "content_type": options.content_type,
            "speed": options.speed,
            "max_in_flight": options.max_in_flight,
            "max_lag_s": options.max_lag_s,
            "timeout_s": options.timeout_s,
            "target_header": TARGET_MODEL_HEADER,
            "cache_header": CACHE_HEADER,
            "shards": [
                {
                    "indices": shard.tolist(),
                    "times": times[shard].tolist(),
                    "targets": [models[m] for m in ids[shard].tolist()],
                }
                for shard in shards
            ],
        }
        (work / "config.json").write_text(json.dumps(config), "utf-8")
        port = pick_free_port()
        master = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "mmelocal.traffic._locust_replay",
            str(work / "config.json"),
            str(work / "out.json"),
            "--bind-port",
            str(port),
            "--expect",
            str(len(shards)),
            "--timeout",
            # the whole schedule, its last request's timeout, and the batches' way back
            str(_schedule_s(trace, options) + options.timeout_s + MASTER_MARGIN_S),
            stdout=asyncio.subprocess.PIPE,
            stderr=files.enter_context(open(work / "master.log", "wb")),
            env=env,
        )
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "mmelocal.bench.loadtest._locust_dist",
                "worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(port),
                stdout=asyncio.subprocess.DEVNULL,
                stderr=files.enter_context(open(work / f"worker-{k}.log", "wb")),
                env=env,
            )
            for k in range(len(shards))
        ]
        stop = asyncio.Event()
        poller = None
        try:
            async with aiohttp.ClientSession() as session:
                emulator, first = await _state_before(aiohttp, session, base)
                if emulator:
                    state["loads_before"] = first.get("event_counts", {}).get("load", 0)
                    state["probe_kinds"] = _probe_kinds(first)
                if emulator:
                    poller = asyncio.ensure_future(
                        _poll_state(session, base, options.state_interval_s, stop, state)
                    )
                assert master.stdout is not None
                async for raw in master.stdout:
                    line = raw.decode(errors="replace").strip()
                    if not line.startswith("{"):
                        continue
                    event = json.loads(line)
                    if event.get("event") == "started":
                        t0_wall = float(event["t0_wall"])
                        state["t0_wall"] = t0_wall
                        state["t0_monotonic"] = time.monotonic() - (time.time() - t0_wall)
                    elif event.get("event") == "progress" and progress is not None:
                        # the workers report answers; a request leaves at its time (or the
                        # replay aborts past --max-lag-ms), so those due have been sent
                        due_s = (time.time() - state.get("t0_wall", time.time())) * options.speed
                        sent = int(np.searchsorted(trace.times_s, due_s, side="right"))
                        progress(int(event["done"]), n, sent)
                code = await master.wait()
                stop.set()
                if poller is not None:
                    await poller
        finally:
            for child in (master, *children):
                if child.returncode is None:
                    try:
                        await asyncio.wait_for(child.wait(), timeout=10)
                    except TimeoutError:
                        child.kill()
                        await child.wait()
        out = work / "out.json"
        if code != 0 or not out.exists():
            tail = (work / "master.log").read_text("utf-8", errors="replace").splitlines()[-10:]
            raise UserInputError("the replay's Locust master failed:\n" + "\n".join(tail))
        result = json.loads(out.read_text("utf-8"))
    if result["aborted"]:
        raise ReplayAbortedError(result["aborted"][0] + " (no result is written)")
    index = np.asarray(result["indices"], dtype=np.int64)
    rec.latency_s[index] = result["latency_s"]
    rec.ok[index] = result["ok"]
    rec.sampled[index] = result["sampled"]
    rec.hit[index] = result["hit"]
    rec.errors.update(result["errors"])
    if not result["complete"] or len(index) != n:
        rec.errors["not reported by a worker"] = n - len(index)
    state["emulator"] = emulator
    state["workers"] = result["workers"]
    if progress is not None:
        progress(n, n, n)
    return rec, state
