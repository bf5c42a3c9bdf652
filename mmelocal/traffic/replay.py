"""Open-loop replay of a trace against an endpoint.

Every request leaves at its scheduled time (``timestamp / speed`` after the start) whatever
earlier requests are doing, and its latency counts from that scheduled time, so a slow
answer never hides the requests queued behind it (no coordinated omission). Two guards
stop a replay that could not keep its schedule, with a message, rather than slowing it:

* ``max_in_flight``: requests sent and not yet answered; reaching it means the endpoint
  answers slower than the trace sends;
* ``max_lag_s``: how late the sender may be on a request's time; past it this process
  cannot send the trace's rate.

Targets: ``mmelocal serve`` (or any URL that answers SageMaker's
``POST /endpoints/{name}/invocations``), whose ``X-Mmelocal-Model-Cache`` header tells a
hit from a miss per request and whose ``GET /emulator/state`` gives loads and the loaded
set; or an endpoint through boto3 (``endpoint_name``, with ``endpoint_url`` for the local
AWS), where hits are not visible per request: the hit ratio then comes from CloudWatch's
``ModelCacheHit`` for the window, and the warm/cold split of latencies is inferred.

``speed`` compresses the trace, not the endpoint: every duration the endpoint took
(latencies, load times, load cycles) is in seconds as measured, never scaled; every instant
and rate that places events in the trace (the timeline, the loaded count a request found,
per-minute rates) is on the trace's clock.

The schedule shards by target model (:func:`shard_schedule`): each shard keeps its
requests' order and times, so shards can run in separate processes (Locust workers) and
the requests for one model stay in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from mmelocal.errors import ReplayAbortedError, UserInputError
from mmelocal.facts.sagemaker import (
    ERROR_TYPE_HEADER,
    INVOKE_TIMEOUT_S,
    MODEL_NOT_READY_AFTER_S,
)
from mmelocal.traffic.results import TrafficResult, summarize
from mmelocal.traffic.trace import Trace

logger = logging.getLogger(__name__)

STATE_PATH = "/emulator/state"


#: How long the sender waits beyond the platform's slowest answer (mmelocal's own margin).
SENDER_MARGIN_S = 15.0

#: What the Locust master waits, beyond the schedule and a request's timeout, for the
#: workers' final batches before it reports what it has.
MASTER_MARGIN_S = 60.0


def _schedule_s(trace: Trace, options: ReplayOptions) -> float:
    """Wall-clock seconds from the first request to the last one's scheduled time."""
    return trace.duration_s / options.speed


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """How to send (see the module docstring). ``speed`` K sends request ``i`` at
    ``timestamp_i / K``; ``timeout_s``, ``max_lag_s`` and every time measured are seconds
    of the replay (wall clock)."""

    speed: float = 1.0
    max_in_flight: int = 256
    max_lag_s: float = 0.25
    max_rate_rps: float = 2000.0
    content_type: str = "application/json"
    #: past the platform's slowest answer (a cold load's wait, then the model's time), so
    #: that the platform's own answer (ModelError, ModelNotReadyException) is what is
    #: recorded, not the sender's TimeoutError
    timeout_s: float = MODEL_NOT_READY_AFTER_S + INVOKE_TIMEOUT_S + SENDER_MARGIN_S
    state_interval_s: float = 0.25

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise UserInputError(f"--speed must be > 0, got {self.speed:g}")
        if self.max_in_flight < 1:
            raise UserInputError(f"--max-in-flight must be >= 1, got {self.max_in_flight}")
        if self.max_lag_s <= 0 or self.max_rate_rps <= 0:
            raise UserInputError("--max-lag-ms and --max-rate must be > 0")


@dataclass
class _Record:
    latency_s: np.ndarray
    hit: np.ndarray
    ok: np.ndarray
    errors: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> _Record:
        """The record of ``n`` requests none of which has an answer yet."""
        return cls(
            latency_s=np.full(n, np.nan),
            hit=np.zeros(n, dtype=np.bool_),
            ok=np.zeros(n, dtype=np.bool_),
        )


async def _state_before(aiohttp: Any, session: Any, base: str) -> tuple[bool, Any]:
    """Whether ``base`` is an emulator (it has a state page), and that state before the
    replay; a server that cannot be reached is a UserInputError."""
    try:
        async with session.get(base + STATE_PATH) as resp:
            if resp.status != 200:
                return False, None
            return True, await resp.json()
    except aiohttp.ClientError as exc:
        raise UserInputError(f"cannot reach {base}: {exc}") from exc


def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url``."""
    parts = urlparse(url)
    return f"{parts.scheme}://{parts.netloc}"


def _aiohttp() -> Any:
    """aiohttp (the ``bench`` extra), or an error that says how to install it."""
    try:
        import aiohttp
    except ImportError:
        raise UserInputError(
            "replay over HTTP needs aiohttp: pip install 'mmelocal[bench]'"
        ) from None
    return aiohttp


def shard_schedule(trace: Trace, shards: int) -> list[np.ndarray]:
    """The request indices of each shard: every model goes to one shard (a stable hash of
    its name), so each shard keeps one model's requests in their order."""
    if shards < 1:
        raise UserInputError(f"shards must be >= 1, got {shards}")
    owner = np.asarray([zlib.crc32(m.encode()) % shards for m in trace.models], dtype=np.int64)
    of_request = owner[trace.model_ids]
    return [np.flatnonzero(of_request == s) for s in range(shards)]


def check_rate(trace: Trace, options: ReplayOptions, senders: int = 1) -> None:
    """Refuse a trace whose peak rate (per second, after ``speed``) a sender cannot send
    (``max_rate_rps`` per sender). With several senders each gets its shard of models
    (:func:`shard_schedule`), so the busiest shard's own peak is what counts: one sender
    may carry most of a skewed trace."""
    senders = max(1, senders)
    shards = shard_schedule(trace, senders) if senders > 1 else [np.arange(len(trace))]
    peaks = [
        Trace(
            times_s=trace.times_s[s], model_ids=trace.model_ids[s], models=trace.models
        ).peak_rate_rps(1.0)
        * options.speed
        for s in shards
    ]
    busiest = int(np.argmax(peaks))
    peak = peaks[busiest]
    if peak > options.max_rate_rps:
        where = "" if senders == 1 else f" on sender {busiest + 1} of {senders} (its models' shard)"
        raise UserInputError(
            f"the trace peaks at {peak:,.0f} requests/s{where} (with --speed "
            f"{options.speed:g}), over the {options.max_rate_rps:,.0f}/s a sender keeps on time: "
            "lower --speed or add --workers (Locust workers, the schedule sharded by model; one "
            "model's requests stay on one worker); raise --max-rate only after checking a "
            "sender keeps up"
        )


def check_targets(trace: Trace, store: str) -> None:
    """Fail before sending when the store (a folder or ``s3://bucket/prefix/``) lacks a
    target of the trace."""
    missing: list[str]
    if store.startswith("s3://"):
        from mmelocal.facts.aws import CONTROL_PLANE, aws_client

        parsed = urlparse(store)
        prefix = parsed.path.lstrip("/")
        s3 = aws_client("s3", CONTROL_PLANE)
        have: set[str] = set()
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=parsed.netloc, Prefix=prefix
        ):
            have.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        missing = [m for m in trace.models if m not in have]
    else:
        root = Path(store)
        if not root.is_dir():
            raise UserInputError(f"model store {root} is not a folder")
        missing = [m for m in trace.models if not (root / m).is_file()]
    if missing:
        first = int(np.flatnonzero(trace.model_ids == trace.models.index(missing[0]))[0])
        raise UserInputError(
            f"the store {store} lacks {len(missing)} TargetModel(s) the trace names, e.g. "
            f"{missing[0]!r} (trace row {first + 2}, counting the header as line 1): add the "
            "tarballs (mmelocal traffic make --store DIR --tarball T fills a folder) or fix the "
            "trace"
        )


def _error_class(status: int, headers: Any, body: bytes) -> str:
    kind = headers.get(ERROR_TYPE_HEADER) or headers.get(ERROR_TYPE_HEADER.lower())
    if not kind:
        try:
            kind = json.loads(body).get("__type")
        except (ValueError, AttributeError):
            kind = None
    return f"{kind.split(':')[0]} ({status})" if kind else f"HTTP {status}"


def invocations_url(url: str, endpoint: str) -> str:
    """``URL/endpoints/NAME/invocations`` (a URL that already ends so is kept)."""
    if "/endpoints/" in url and url.rstrip("/").endswith("/invocations"):
        return url
    return f"{url.rstrip('/')}/endpoints/{endpoint}/invocations"


async def _poll_state(
    session: Any, base: str, interval_s: float, stop: asyncio.Event, out: dict[str, Any]
) -> None:
    """Sample the emulator's loaded count (all instances together, and the most any one
    instance held) and keep every load event (the emulator's own log is bounded: the
    replay keeps its record)."""
    seen: set[tuple[float, str, int]] = set()
    samples: list[tuple[float, int]] = out.setdefault("samples", [])
    loads: list[tuple[float, str, int, float]] = out.setdefault("load_events", [])
    while True:
        out["state_polls"] = out.get("state_polls", 0) + 1
        try:
            async with session.get(base + STATE_PATH) as resp:
                if resp.status == 200:
                    state = await resp.json()
                else:
                    state = None
                    out["state_error"] = f"HTTP {resp.status}"
        except Exception as exc:  # the replay goes on; the report says what is missing
            out["state_error"] = f"{type(exc).__name__}: {exc}"
            state = None
        if state is None:
            out["state_failures"] = out.get("state_failures", 0) + 1
        else:
            now = time.monotonic()
            per_instance = [
                sum(1 for e in i.get("loaded") or [] if e["state"] == "ready")
                for i in state["instances"]
            ]
            samples.append((now, sum(per_instance)))
            out["instance_count"] = len(per_instance)
            out["max_loaded_per_instance"] = max(
                out.get("max_loaded_per_instance", 0), max(per_instance, default=0)
            )
            out["load_count"] = state.get("event_counts", {}).get("load", 0)
            for e in state.get("events", []):
                if e.get("kind") != "load" or e.get("duration_ms") is None:
                    continue
                key = (e["time_s"], e["target"], e["instance"])
                if key not in seen:
                    seen.add(key)
                    loads.append((e["time_s"], e["target"], e["instance"], e["duration_ms"] / 1e3))
        if stop.is_set():
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)


async def _open_loop(
    trace: Trace,
    indices: np.ndarray,
    send: Callable[[int], Any],
    options: ReplayOptions,
    progress: Callable[[int, int], None] | None,
    t0: float,
) -> None:
    """Send request ``indices`` at their times (``send(i)`` is a coroutine)."""
    loop = asyncio.get_running_loop()
    in_flight: set[asyncio.Task[None]] = set()
    times = trace.times_s
    total = len(indices)
    step = max(1, total // 200)
    try:
        for n, i in enumerate(indices.tolist()):
            due = t0 + times[i] / options.speed
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                lag = -delay
                if lag > options.max_lag_s:
                    raise ReplayAbortedError(
                        f"the sender fell {lag * 1e3:,.0f} ms behind the schedule at trace row "
                        f"{i + 2} (t={times[i]:.3f} s): this process cannot send this rate on "
                        "time; lower --speed or split the trace across Locust workers "
                        "(no result is written)"
                    )
            if len(in_flight) >= options.max_in_flight:
                raise ReplayAbortedError(
                    f"{len(in_flight)} requests in flight at trace row {i + 2} "
                    f"(t={times[i]:.3f} s), the --max-in-flight cap: the endpoint answers "
                    "slower than the trace sends. Raise --max-in-flight, lower --speed, or give "
                    "the endpoint more capacity (no result is written)"
                )
            task = asyncio.ensure_future(send(i))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            if progress is not None and n % step == 0:
                progress(n, total)
        if in_flight:
            await asyncio.gather(*in_flight)
    finally:
        for task in list(in_flight):
            task.cancel()
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
    if progress is not None:
        progress(total, total)


async def _replay_http(
    trace: Trace,
    url: str,
    endpoint: str,
    body: bytes,
    options: ReplayOptions,
    progress: Callable[[int, int], None] | None,
) -> tuple[_Record, dict[str, Any]]:
    aiohttp = _aiohttp()

    from mmelocal.emulator.answers import CACHE_HEADER
    from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER

    n = len(trace)
    rec = _Record.empty(n)
    target_url = invocations_url(url, endpoint)
    base = _origin(target_url)
    state: dict[str, Any] = {}
    connector = aiohttp.TCPConnector(limit=options.max_in_flight, force_close=False)
    timeout = aiohttp.ClientTimeout(total=options.timeout_s)
    models = trace.models
    ids = trace.model_ids
    times = trace.times_s
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        emulator, first = await _state_before(aiohttp, session, base)
        if emulator:
            state["loads_before"] = first.get("event_counts", {}).get("load", 0)
            state["store"] = first.get("store")
            state["probe_kinds"] = _probe_kinds(first)
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.05
        speed = options.speed
        headers_base = {"Content-Type": options.content_type}

        async def send(i: int) -> None:
            headers = {**headers_base, TARGET_MODEL_HEADER: models[ids[i]]}
            try:
                async with session.post(target_url, data=body, headers=headers) as resp:
                    answer = await resp.read()
                    done = loop.time()
                    if resp.status == 200:
                        rec.ok[i] = True
                        rec.hit[i] = resp.headers.get(CACHE_HEADER) == "hit"
                    else:
                        kind = _error_class(resp.status, resp.headers, answer)
                        rec.errors[kind] = rec.errors.get(kind, 0) + 1
            except (TimeoutError, aiohttp.ClientError) as exc:
                done = loop.time()
                kind = type(exc).__name__
                rec.errors[kind] = rec.errors.get(kind, 0) + 1
            rec.latency_s[i] = done - (t0 + times[i] / speed)

        stop = asyncio.Event()
        poller = (
            asyncio.ensure_future(_poll_state(session, base, options.state_interval_s, stop, state))
            if emulator
            else None
        )
        state["t0_monotonic"] = t0 - loop.time() + time.monotonic()
        state["t0_wall"] = t0 - loop.time() + time.time()
        try:
            await _open_loop(trace, np.arange(n), send, options, progress, t0)
        finally:
            stop.set()
            if poller is not None:
                await poller
    state["emulator"] = emulator
    return rec, state


async def _replay_workers(
    trace: Trace,
    url: str,
    body: bytes,
    options: ReplayOptions,
    progress: Callable[[int, int], None] | None,
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
    root = str(Path(__file__).resolve().parents[2])
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
                        progress(int(event["done"]), n)
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
    codes = np.asarray(result["codes"], dtype=np.int8)
    rec.latency_s[index] = result["latency_s"]
    rec.ok[index] = codes != 2
    rec.hit[index] = codes == 1
    rec.errors.update(result["errors"])
    if not result["complete"] or len(index) != n:
        rec.errors["not reported by a worker"] = n - len(index)
    state["emulator"] = emulator
    state["workers"] = result["workers"]
    if progress is not None:
        progress(n, n)
    return rec, state


def _replay_boto3(
    trace: Trace,
    endpoint_name: str,
    body: bytes,
    options: ReplayOptions,
    progress: Callable[[int, int], None] | None,
    endpoint_url: str | None,
    region: str | None,
) -> tuple[_Record, dict[str, Any]]:
    import concurrent.futures

    import boto3
    import botocore.exceptions

    from mmelocal.facts.aws import LOAD_TEST, aws_client

    n = len(trace)
    rec = _Record.empty(n)
    # a load generator's client: no retries (a failure is counted, not hidden), a pool as
    # wide as the requests in flight, and the replay's per-request timeout
    runtime = aws_client(
        "sagemaker-runtime",
        LOAD_TEST,
        session=boto3.session.Session(region_name=region),
        endpoint_url=endpoint_url,
        max_pool_connections=options.max_in_flight,
        connect_timeout=options.timeout_s,
        read_timeout=options.timeout_s,
    )
    models, ids, times = trace.models, trace.model_ids, trace.times_s
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=options.max_in_flight)
    start_wall = time.time()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.05

        def call(i: int) -> str | None:
            """One invocation on a pool thread: None, or the error's class (counted by the
            event loop's thread: a dict updated from many threads loses counts)."""
            try:
                runtime.invoke_endpoint(
                    EndpointName=endpoint_name,
                    TargetModel=models[ids[i]],
                    ContentType=options.content_type,
                    Body=body,
                )
            except botocore.exceptions.ClientError as exc:
                return str(exc.response.get("Error", {}).get("Code", "ClientError"))
            except Exception as exc:
                return type(exc).__name__
            return None

        async def send(i: int) -> None:
            err = await loop.run_in_executor(pool, call, i)
            rec.latency_s[i] = loop.time() - (t0 + times[i] / options.speed)
            if err is None:
                rec.ok[i] = True
            else:
                rec.errors[err] = rec.errors.get(err, 0) + 1

        await _open_loop(trace, np.arange(n), send, options, progress, t0)

    try:
        asyncio.run(run())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return rec, {"emulator": False, "window": (start_wall, time.time())}


def cloudwatch_hit_ratio(
    endpoint_name: str,
    start_s: float,
    end_s: float,
    *,
    variants: Sequence[str] | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
) -> float | None:
    """The mean of ``ModelCacheHit`` over the window and over the endpoint's variants
    (1-minute periods, weighted by their sample counts), or None when CloudWatch has no
    datapoint yet. ``variants`` default to the endpoint's own (``DescribeEndpoint``)."""
    import datetime

    import boto3

    from mmelocal.facts.autoscaling import METRIC_PERIOD_S
    from mmelocal.facts.aws import CONTROL_PLANE, aws_client
    from mmelocal.facts.cloudwatch import DIMENSIONS, INVOCATION_NAMESPACE, MODEL_CACHE_HIT

    session = boto3.session.Session(region_name=region)
    if variants is None:
        sagemaker = aws_client(
            "sagemaker", CONTROL_PLANE, session=session, endpoint_url=endpoint_url
        )
        described = sagemaker.describe_endpoint(EndpointName=endpoint_name)
        variants = [v["VariantName"] for v in described.get("ProductionVariants", [])]
    cw = aws_client("cloudwatch", CONTROL_PLANE, session=session, endpoint_url=endpoint_url)
    start = datetime.datetime.fromtimestamp(start_s - METRIC_PERIOD_S, tz=datetime.UTC)
    end = datetime.datetime.fromtimestamp(end_s + METRIC_PERIOD_S, tz=datetime.UTC)
    points: list[dict[str, Any]] = []
    for variant in variants:
        answer = cw.get_metric_statistics(
            Namespace=INVOCATION_NAMESPACE,
            MetricName=MODEL_CACHE_HIT,
            Dimensions=[
                {"Name": name, "Value": value}
                for name, value in zip(DIMENSIONS, (endpoint_name, variant), strict=True)
            ],
            StartTime=start,
            EndTime=end,
            Period=METRIC_PERIOD_S,
            Statistics=["Average", "SampleCount"],
        )
        points.extend(answer.get("Datapoints", []))
    total = sum(p["SampleCount"] for p in points)
    if not total:
        return None
    return float(sum(p["Average"] * p["SampleCount"] for p in points) / total)


def replay(
    trace: Trace,
    *,
    body: bytes,
    url: str | None = None,
    endpoint_name: str | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
    store: str | None = None,
    options: ReplayOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 0,
) -> TrafficResult:
    """Replay ``trace`` open loop (see the module docstring) and summarize what happened.

    With ``url`` alone the requests go over HTTP to ``URL/endpoints/local/invocations`` (or
    the invocations URL given); with ``endpoint_name`` through boto3 (``endpoint_url`` for
    the local AWS). ``store`` (a folder or ``s3://`` prefix) is checked for every target
    before anything is sent; for ``mmelocal serve`` the emulator's store is checked when it
    is a folder this machine sees. ``workers`` > 0 sends over that many Locust workers (the
    load tests' worker processes), the schedule sharded by model.
    """
    options = options or ReplayOptions()
    if workers < 0:
        raise UserInputError(f"--workers must be >= 0, got {workers}")
    if workers and url is None:
        raise UserInputError("--workers sends over HTTP: give --url (not --endpoint-name)")
    if (url is None) == (endpoint_name is None):
        raise UserInputError("give --url URL (mmelocal serve) or --endpoint-name NAME (boto3)")
    check_rate(trace, options, max(1, workers))
    notes: list[str] = []
    if store is not None:
        check_targets(trace, store)
    if url is not None:
        store_seen = _emulator_store(url) if store is None else None
        if store_seen is not None:
            check_targets(trace, store_seen)
        if workers > 0:
            rec, state = asyncio.run(_replay_workers(trace, url, body, options, progress, workers))
            notes.append(
                f"Sent by {state['workers']} Locust worker(s) of the load tests, the schedule "
                "sharded by model (each model's requests in order on one worker)."
            )
        else:
            rec, state = asyncio.run(_replay_http(trace, url, "local", body, options, progress))
    else:
        assert endpoint_name is not None
        rec, state = _replay_boto3(
            trace, endpoint_name, body, options, progress, endpoint_url, region
        )
    measured_on, measured_where = _measured_where(url, endpoint_name, endpoint_url, state)
    loaded = None
    max_loaded: int | None = None
    per_instance: dict[str, int] = {}
    events = sorted(state.get("load_events", []))
    load_s = np.asarray([e[3] for e in events], dtype=np.float64)
    loads = 0
    if state.get("emulator"):
        samples = state.get("samples", [])
        if samples:
            t_rel = (np.asarray([s[0] for s in samples]) - state["t0_monotonic"]) * options.speed
            counts = np.asarray([s[1] for s in samples])
            pos = np.clip(np.searchsorted(t_rel, trace.times_s, side="right") - 1, 0, None)
            loaded = counts[pos]
            max_loaded = int(counts.max())
            per_instance = {
                "max_loaded_per_instance": int(state["max_loaded_per_instance"]),
                "emulator_instances": int(state["instance_count"]),
            }
        loads = int(state.get("load_count", 0)) - int(state.get("loads_before", 0))
        cycles = load_cycles(trace, rec, events, state["t0_wall"], options.speed)
        notes.append(
            "Hits per request from the emulator's X-Mmelocal-Model-Cache header; loads, "
            "load times and the loaded set from its /emulator/state."
        )
        gaps = _state_note(state)
        if gaps is not None:
            notes.append(gaps)
    hit = rec.hit
    ratio: float | None = None
    if endpoint_name is not None:
        start, end = state["window"]
        unread = ""
        try:
            ratio = cloudwatch_hit_ratio(
                endpoint_name, start, end, endpoint_url=endpoint_url, region=region
            )
        except Exception as exc:  # the replay's own figures stand; say what is missing
            ratio, unread = None, f" (could not read CloudWatch: {type(exc).__name__}: {exc})"
        hit = _infer_hits(rec, ratio)
        notes.append(
            "Real endpoint: hits per request are not visible. The hit ratio is CloudWatch's "
            "ModelCacheHit for the window"
            + (unread or (" (no datapoint yet: retry in a few minutes)" if ratio is None else ""))
            + "; the warm/cold split of latencies is INFERRED (the slowest answered requests "
            "counted cold, as many as the ratio implies)."
        )
    result = summarize(
        source="replayed",
        times_s=trace.times_s,
        latency_s=rec.latency_s,
        hit=hit,
        ok=rec.ok,
        errors=rec.errors,
        loaded=loaded,
        load_times_s=load_s,
        load_cycle_s=cycles if state.get("emulator") else None,
        loads=loads,
        max_loaded=max_loaded,
        extra={
            "speed": options.speed,
            "notes": notes,
            "measured_on": measured_on,
            "measured_where": measured_where,
            **per_instance,
        },
    )
    if endpoint_name is not None and ratio is None:
        # CloudWatch gave no ratio: hits and the warm/cold split are unknown, not zero
        result.data.update(hit_ratio=None, cold_starts=None, cold_starts_per_min=None)
        result.data["latency_ms"]["warm"] = result.data["latency_ms"]["cold"] = None
    if options.speed != 1.0:
        result.data["notes"].append(
            f"Replayed at --speed {options.speed:g} (the trace sent {options.speed:g} times "
            "faster): latencies, cold-load times and load cycles are the endpoint's seconds, "
            "as measured; the timeline, the duration and the per-minute rates are on the "
            "trace's clock."
        )
    return result


def _state_note(state: Mapping[str, Any]) -> str | None:
    """What the report must say when polls of the emulator's state page failed (None when
    none did): the loaded set has gaps then, and loads the emulator's bounded event log
    dropped meanwhile are missing from the load times."""
    failures = int(state.get("state_failures", 0))
    if not failures:
        return None
    return (
        f"{failures} of {int(state.get('state_polls', failures))} reads of the emulator's "
        f"{STATE_PATH} failed (last: {state.get('state_error')}): the loaded models have "
        "gaps then, and load times the emulator's event log dropped meanwhile are missing "
        "(hits, errors and latencies come from each answer and are complete)."
    )


def _probe_kinds(state: Mapping[str, Any]) -> list[str]:
    """``gpu`` / ``host`` of each emulator instance's memory probe."""
    return [str(i.get("probe_kind", "")) for i in state.get("instances", [])]


def _measured_where(
    url: str | None, endpoint_name: str | None, endpoint_url: str | None, state: Mapping[str, Any]
) -> tuple[str, str]:
    """(``cpu`` / ``gpu`` / ``endpoint`` / ``unknown``, where the replay measured, in words):
    the latencies and load times of ``mmelocal serve`` without a GPU are CPU figures."""
    if url is None:
        if endpoint_url is not None:
            return "unknown", f"endpoint {endpoint_name} of the AWS at {endpoint_url}"
        return "endpoint", f"endpoint {endpoint_name}"
    netloc = urlparse(url).netloc
    host = urlparse(url).hostname or ""
    here = (
        "on this machine"
        if host in ("localhost", "::1") or host.startswith("127.")
        else (f"at {netloc}")
    )
    if not state.get("emulator"):
        return "unknown", f"the server at {netloc} (not mmelocal serve: device unknown)"
    kinds = state.get("probe_kinds") or []
    if kinds and all(kind == "gpu" for kind in kinds):
        return "gpu", f"mmelocal serve {here} (GPU)"
    return "cpu", f"mmelocal serve {here} (CPU)"


def load_cycles(
    trace: Trace,
    rec: _Record,
    events: Sequence[tuple[float, str, int, float]],
    t0_wall: float,
    speed: float,
) -> np.ndarray:
    """How long each load held its instance, in the endpoint's seconds (wall clock, as the
    latencies; never scaled by ``speed``): from the later of the miss that asked for it
    and the previous load's end on that instance, to its own end. Beside Triton's load
    call this holds the eviction that made room, memory readings and, for a first use, the
    download: the cold-load time a simulation of this endpoint needs.

    A caller that got an error (ModelNotReadyException after its wait) asked for the load
    too; a load no caller asked for (a hot model's replica) is its own load time.
    ``events`` are (wall time it ended, target, instance, seconds); request ``i`` was sent
    ``trace.times_s[i] / speed`` after ``t0_wall``."""
    index = {m: i for i, m in enumerate(trace.models)}
    misses = ~rec.hit  # answered misses and failed calls: either may have asked for a load
    sent = trace.times_s / speed  # when each request left, in seconds from the start
    by_model: dict[int, np.ndarray] = {}
    previous_end: dict[int, float] = {}
    last_load_of: dict[int, float] = {}
    out: list[float] = []
    for wall, target, instance, seconds in events:
        m = index.get(target)
        if m is None:
            continue
        end = wall - t0_wall
        if m not in by_model:
            by_model[m] = sent[(trace.model_ids == m) & misses]
        asked = by_model[m]
        after = asked[(asked > last_load_of.get(m, -1.0)) & (asked <= end)]
        if len(after):
            start = max(float(after[0]), previous_end.get(instance, -1.0))
            out.append(max(0.0, end - start))
        else:  # nobody waited for it: all there is to go by is the load itself
            out.append(seconds)
        previous_end[instance] = end
        last_load_of[m] = end
    return np.asarray(out)


def _infer_hits(rec: _Record, ratio: float | None) -> np.ndarray:
    if ratio is None:
        return np.zeros_like(rec.ok)  # unknown: no request is counted a hit
    hit = rec.ok.copy()
    answered = np.flatnonzero(rec.ok)
    cold = round((1.0 - ratio) * len(answered))
    if cold:
        slowest = answered[np.argsort(rec.latency_s[answered])[-cold:]]
        hit[slowest] = False
    return hit


def _emulator_store(url: str) -> str | None:
    """The emulator's store when it is a folder here or an s3:// prefix (None otherwise or
    when ``url`` is no emulator)."""
    import urllib.error
    import urllib.request

    parsed = urlparse(url)
    try:
        with urllib.request.urlopen(
            f"{parsed.scheme}://{parsed.netloc}{STATE_PATH}", timeout=10
        ) as resp:
            store = json.loads(resp.read()).get("store")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(store, str):
        return None
    if store.startswith("s3://") or Path(store).is_dir():
        return store
    return None


__all__ = [
    "ReplayOptions",
    "check_rate",
    "check_targets",
    "cloudwatch_hit_ratio",
    "invocations_url",
    "replay",
    "shard_schedule",
]
