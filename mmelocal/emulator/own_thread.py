"""A thread of its own for an instance's short blocking calls.

The event loop's default executor runs the artifact downloads and extractions
(:mod:`mmelocal.emulator.loading`), for minutes with a large artifact, on
``min(32, cores + 4)`` workers (6 on a 2-core machine). A memory reading, a launcher's
liveness check (an HTTP or Docker API call) or a server's start and stop run instead on
an :class:`OwnThread`, one call at a time, so that they never queue behind those.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class OwnThread:
    """One thread (started at the first call) that runs blocking calls in turn for the
    event loop; its idle thread ends with the object or at :meth:`close`."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)

    def run(self, call: Callable[[], T]) -> asyncio.Future[T]:
        """``call()`` on this thread, after the calls submitted before it (await the
        future, or add a callback to it: it resolves on the running loop)."""
        return asyncio.get_running_loop().run_in_executor(self._executor, call)

    def close(self) -> None:
        """Let the thread end once its calls are done (no new call may follow)."""
        self._executor.shutdown(wait=False)


__all__ = ["OwnThread"]
