"""One daemon thread that runs a loop until it is told to stop: the CloudWatch clock's and
the log shipper's."""

from __future__ import annotations

import threading
from collections.abc import Callable

#: how long :meth:`BackgroundThread.stop` waits for the loop to return
STOP_JOIN_TIMEOUT_S = 30


class BackgroundThread:
    """Runs ``target`` on a daemon thread named ``name``; ``target`` returns once
    :attr:`stopping` is set. Start and stop are idempotent, and a stopped one starts again."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        self.stopping = threading.Event()
        self._target = target
        self._name = name
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread, unless it runs already."""
        if self._thread is not None:
            return
        self.stopping.clear()
        self._thread = threading.Thread(target=self._target, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Tell the loop to stop and wait for it (a while at most)."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_JOIN_TIMEOUT_S)
            self._thread = None


__all__ = ["BackgroundThread"]
