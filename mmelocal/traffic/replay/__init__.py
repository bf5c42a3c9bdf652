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

The parts, one job each: :mod:`.schedule` (the options, the sharded schedule, the open
loop), :mod:`.targets` (where requests go, the store's check), :mod:`.over_http`,
:mod:`.over_locust` and :mod:`.through_boto3` (the three senders), :mod:`.emulator_state`
(the emulator's state page: loads, the loaded set, load cycles); :func:`replay` here
checks, sends and summarizes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import numpy as np

from mmelocal.errors import UserInputError
from mmelocal.traffic.replay.emulator_state import STATE_PATH as STATE_PATH
from mmelocal.traffic.replay.emulator_state import _emulator_store, _state_note, load_cycles
from mmelocal.traffic.replay.emulator_state import _poll_state as _poll_state
from mmelocal.traffic.replay.over_http import _replay_http
from mmelocal.traffic.replay.over_locust import MASTER_MARGIN_S as MASTER_MARGIN_S
from mmelocal.traffic.replay.over_locust import _replay_workers
from mmelocal.traffic.replay.schedule import SENDER_MARGIN_S as SENDER_MARGIN_S
from mmelocal.traffic.replay.schedule import Progress, ReplayOptions, check_rate, shard_schedule
from mmelocal.traffic.replay.schedule import _Record as _Record
from mmelocal.traffic.replay.targets import check_targets, invocations_url
from mmelocal.traffic.replay.through_boto3 import (
    _infer_hits,
    _replay_boto3,
    cloudwatch_cache_hits,
    cloudwatch_hit_ratio,
)
from mmelocal.traffic.results import TrafficResult, per_minute, summarize
from mmelocal.traffic.trace import Trace

logger = logging.getLogger(__name__)


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
    progress: Progress | None = None,
    workers: int = 0,
) -> TrafficResult:
    """Replay ``trace`` open loop (see the module docstring) and summarize what happened.

    With ``url`` alone the requests go over HTTP to ``URL/endpoints/local/invocations`` (or
    the invocations URL given); with ``endpoint_name`` through boto3 (``endpoint_url`` for
    the local AWS). ``store`` (a folder or ``s3://`` prefix) is checked for every target
    before anything is sent; for ``mmelocal serve`` the emulator's store is checked when it
    is a folder this machine sees. ``workers`` > 0 sends over that many Locust workers (the
    load tests' worker processes), the schedule sharded by model. ``progress(answered,
    total, sent)`` hears how many requests have been answered and how many sent.
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
                **state.get("capacity", {}),
            }
        loads = int(state.get("load_count", 0)) - int(state.get("loads_before", 0))
        cycles = load_cycles(
            trace,
            rec,
            events,
            state["t0_wall"],
            options.speed,
            failed=state.get("failed_load_events", ()),
        )
        notes.append(
            "Hits per request from the emulator's X-Mmelocal-Model-Cache header; loads, "
            "load times and the loaded set from its /emulator/state."
        )
        gaps = _state_note(state)
        if gaps is not None:
            notes.append(gaps)
    hit = rec.hit
    ratio: float | None = None
    cache_hits: tuple[float, int] | None = None
    if endpoint_name is not None:
        start, end = state["window"]
        unread = ""
        try:
            cache_hits = cloudwatch_cache_hits(
                endpoint_name, start, end, endpoint_url=endpoint_url, region=region
            )
        except Exception as exc:  # the replay's own figures stand; say what is missing
            unread = f" (could not read CloudWatch: {type(exc).__name__}: {exc})"
        ratio = None if cache_hits is None else cache_hits[0] / cache_hits[1]
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
        sampled=rec.sampled,
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
    if endpoint_name is not None and cache_hits is None:
        # CloudWatch gave no ratio: hits and the warm/cold split are unknown, not zero
        result.data.update(
            hit_ratio=None, cache_hit_samples=None, cold_starts=None, cold_starts_per_min=None
        )
        result.data["latency_ms"]["warm"] = result.data["latency_ms"]["cold"] = None
    elif cache_hits is not None:
        # CloudWatch's own figures: every call that reached its model, failed ones too (the
        # inferred split covers the answered calls only)
        hits_sum, samples = cache_hits
        cold = round(samples - hits_sum)
        result.data.update(
            hit_ratio=ratio,
            cache_hit_samples=samples,
            cold_starts=cold,
            cold_starts_per_min=per_minute(cold, result.data["duration_s"]),
        )
    if options.speed != 1.0:
        result.data["notes"].append(
            f"Replayed at --speed {options.speed:g} (the trace sent {options.speed:g} times "
            "faster): latencies, cold-load times and load cycles are the endpoint's seconds, "
            "as measured; the timeline, the duration and the per-minute rates are on the "
            "trace's clock."
        )
    return result


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


__all__ = [
    "Progress",
    "ReplayOptions",
    "check_rate",
    "check_targets",
    "cloudwatch_cache_hits",
    "cloudwatch_hit_ratio",
    "invocations_url",
    "replay",
    "shard_schedule",
]
