"""Replay over HTTP from this process (aiohttp): each answer's status, error class and
``X-Mmelocal-Model-Cache`` header recorded, the emulator's state polled meanwhile."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from mmelocal.errors import UserInputError
from mmelocal.facts.invoke_errors import error_code
from mmelocal.traffic.replay.emulator_state import _poll_state, _probe_kinds, _state_before
from mmelocal.traffic.replay.schedule import Progress, ReplayOptions, _open_loop, _Record
from mmelocal.traffic.replay.targets import _origin, invocations_url
from mmelocal.traffic.trace import Trace


def _aiohttp() -> Any:
    """aiohttp (the ``bench`` extra), or an error that says how to install it."""
    try:
        import aiohttp
    except ImportError:
        raise UserInputError(
            "replay over HTTP needs aiohttp: pip install 'mmelocal[bench]'"
        ) from None
    return aiohttp


def _error_class(status: int, headers: Any, body: bytes) -> str:
    """An error answer's class: boto3's error code for it (``ModelError``), so that a
    replay over HTTP, one through boto3 and a simulation name errors alike."""
    return error_code(status, headers, body)


async def _replay_http(
    trace: Trace,
    url: str,
    endpoint: str,
    body: bytes,
    options: ReplayOptions,
    progress: Progress | None,
) -> tuple[_Record, dict[str, Any]]:
    aiohttp = _aiohttp()

    from mmelocal.emulator.answers import CACHE_HEADER
    from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER

    n = len(trace)
    rec = _Record.empty(n)
    sampled = rec.sampled
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
                    cache = resp.headers.get(CACHE_HEADER)
                    # ModelCacheHit: every answer of a call that reached its model says
                    # hit or miss (the emulator's; a failed call's too), an answer refused
                    # before none; a server without the header: its answers count as misses
                    sampled[i] = resp.status == 200 or cache is not None
                    rec.hit[i] = cache == "hit"
                    if resp.status == 200:
                        rec.ok[i] = True
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
