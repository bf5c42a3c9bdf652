"""Replay through boto3 (an endpoint of the local AWS or a real one): each call's error
class recorded; hits are not visible per request, so the hit ratio is CloudWatch's
``ModelCacheHit`` for the window and the warm/cold split of latencies is inferred from it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from mmelocal.traffic.replay.schedule import Progress, ReplayOptions, _open_loop, _Record
from mmelocal.traffic.trace import Trace


def _replay_boto3(
    trace: Trace,
    endpoint_name: str,
    body: bytes,
    options: ReplayOptions,
    progress: Progress | None,
    endpoint_url: str | None,
    region: str | None,
) -> tuple[_Record, dict[str, Any]]:
    import concurrent.futures

    import botocore.exceptions

    from mmelocal.facts.aws import LOAD_TEST, aws_client, new_session

    n = len(trace)
    rec = _Record.empty(n)
    # a load generator's client: no retries (a failure is counted, not hidden), a pool as
    # wide as the requests in flight, and the replay's per-request timeout
    runtime = aws_client(
        "sagemaker-runtime",
        LOAD_TEST,
        session=new_session(region_name=region),
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
    figures = cloudwatch_cache_hits(
        endpoint_name, start_s, end_s, variants=variants, endpoint_url=endpoint_url, region=region
    )
    return None if figures is None else figures[0] / figures[1]


def cloudwatch_cache_hits(
    endpoint_name: str,
    start_s: float,
    end_s: float,
    *,
    variants: Sequence[str] | None = None,
    endpoint_url: str | None = None,
    region: str | None = None,
) -> tuple[float, int] | None:
    """``ModelCacheHit`` over the window and the endpoint's variants (1-minute periods) as
    (its sum: the samples of 1, its sample count: every call that reached its model), or
    None when CloudWatch has no datapoint yet. ``variants`` default to the endpoint's own
    (``DescribeEndpoint``)."""
    import datetime

    from mmelocal.facts.autoscaling import METRIC_PERIOD_S
    from mmelocal.facts.aws import CONTROL_PLANE, aws_client, new_session
    from mmelocal.facts.cloudwatch import DIMENSIONS, INVOCATION_NAMESPACE, MODEL_CACHE_HIT

    session = new_session(region_name=region)
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
    return float(sum(p["Average"] * p["SampleCount"] for p in points)), round(total)


def _infer_hits(rec: _Record, ratio: float | None) -> np.ndarray:
    """Which answered requests were hits, inferred from the ratio: the slowest counted
    cold, as many as the ratio implies (none a hit when the ratio is unknown)."""
    if ratio is None:
        return np.zeros_like(rec.ok)  # unknown: no request is counted a hit
    hit = rec.ok.copy()
    answered = np.flatnonzero(rec.ok)
    cold = round((1.0 - ratio) * len(answered))
    if cold:
        slowest = answered[np.argsort(rec.latency_s[answered])[-cold:]]
        hit[slowest] = False
    return hit
