"""The open-loop schedule: how to send (:class:`ReplayOptions`), the record of every
request's outcome, the schedule sharded by model, the per-sender rate check, and the loop
that sends each request at its time whatever earlier requests are doing (the senders of
:mod:`.over_http`, :mod:`.over_locust` and :mod:`.through_boto3` share it)."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmelocal.errors import ReplayAbortedError, UserInputError
from mmelocal.facts.sagemaker import INVOKE_TIMEOUT_S, MODEL_NOT_READY_AFTER_S
from mmelocal.traffic.trace import Trace

#: How long the sender waits beyond the platform's slowest answer (mmelocal's own margin).
SENDER_MARGIN_S = 15.0


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
    """Every request's outcome: its latency, whether it was answered (``ok``), whether it
    reached its model (``sampled``: a ``ModelCacheHit`` sample, answered or not) and that
    sample (``hit``: its model was already loaded); the errors by class."""

    latency_s: np.ndarray
    hit: np.ndarray
    ok: np.ndarray
    sampled: np.ndarray
    errors: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> _Record:
        """The record of ``n`` requests none of which has an answer yet."""
        return cls(
            latency_s=np.full(n, np.nan),
            hit=np.zeros(n, dtype=np.bool_),
            ok=np.zeros(n, dtype=np.bool_),
            sampled=np.zeros(n, dtype=np.bool_),
        )


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


#: ``progress(answered, total, sent)``: requests answered (with a result or an error) of
#: ``total``, and how many have left. The bar is done when every answer is in, not when
#: the last request leaves (the last answers may take the platform's slowest, 135 s).
Progress = Callable[[int, int, int], None]


async def _open_loop(
    trace: Trace,
    indices: np.ndarray,
    send: Callable[[int], Any],
    options: ReplayOptions,
    progress: Progress | None,
    t0: float,
) -> None:
    """Send request ``indices`` at their times (``send(i)`` is a coroutine); ``progress``
    hears of the answers and of the requests sent, about every 0.5 % of either."""
    loop = asyncio.get_running_loop()
    in_flight: set[asyncio.Task[None]] = set()
    times = trace.times_s
    total = len(indices)
    step = max(1, total // 200)
    count = {"sent": 0, "answered": 0}

    def answered(task: asyncio.Task[None]) -> None:
        in_flight.discard(task)
        count["answered"] += 1
        if progress is not None and count["answered"] % step == 0:
            progress(count["answered"], total, count["sent"])

    try:
        for i in indices.tolist():
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
            task.add_done_callback(answered)
            count["sent"] += 1
            if progress is not None and count["sent"] % step == 0:
                progress(count["answered"], total, count["sent"])
        if in_flight:
            await asyncio.gather(*in_flight)
    finally:
        for task in list(in_flight):
            task.cancel()
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
    if progress is not None:
        progress(total, total, total)
