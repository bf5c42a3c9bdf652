"""Many independent AWS calls on a bounded pool of threads, answers in the callers' order.

boto3 clients are thread-safe ("Multithreading or multiprocessing with clients" in the boto3
guide); the pool is :data:`~mmelocal.facts.aws.CONCURRENT_REQUESTS` threads, the size of the
connection pool :func:`~mmelocal.aws.session.connect` gives each client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from mmelocal.facts.aws import CONCURRENT_REQUESTS

T = TypeVar("T")
R = TypeVar("R")


def map_bounded(
    call: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int = CONCURRENT_REQUESTS,
    on_done: Callable[[int, int], None] | None = None,
) -> list[R]:
    """``[call(item) for item in items]``, at most ``workers`` calls at once; the answers
    in the order of ``items``. The first call that raises stops the ones not started and
    its exception is raised (the order of ``items`` decides between two that failed).
    ``on_done(done, total)`` hears each finished call, in the caller's thread."""
    if not items:
        return []
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    executor = ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="aws")
    try:
        futures = [executor.submit(call, item) for item in items]
        pending: set[Future[R]] = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            if on_done is not None:
                on_done(len(futures) - len(pending), len(futures))
            if any(f.exception() is not None for f in finished):
                break
        for future in futures:
            error = future.exception() if future.done() else None
            if error is not None:
                executor.shutdown(wait=True, cancel_futures=True)
                raise error
        return [f.result() for f in futures]
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


__all__ = ["map_bounded"]
