"""One readiness helper for every launcher.

:func:`wait_until_ready` polls a ``check`` callable until it returns True, and fails with
a :class:`~mmelocal.errors.ServerStartError` that names the URL, the seconds waited and
the tail of the server log, so nobody has to go and find the log to learn why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from mmelocal.errors import ServerStartError

logger = logging.getLogger(__name__)

DEFAULT_LOG_TAIL_LINES = 30


class _Process(Protocol):
    def poll(self) -> int | None: ...


def log_tail(log_path: Path | str | None, *, lines: int = DEFAULT_LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' when absent or unreadable)."""
    if log_path is None:
        return ""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def wait_until_ready(
    check: Callable[[], bool],
    *,
    timeout_s: float,
    url: str,
    log_path: Path | str | None,
    process: _Process | None = None,
    interval_s: float = 0.1,
    is_alive: Callable[[], bool] | None = None,
) -> float:
    """Poll ``check`` until it returns True; return the seconds it took.

    Exceptions raised by ``check`` count as "not ready yet". When ``process`` (anything
    with ``poll()``) exits, or ``is_alive`` returns False, the wait stops at once with
    the exit code and the log tail instead of running out the timeout.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    last_error: BaseException | None = None
    while True:
        exit_code = process.poll() if process is not None else None
        gone = exit_code is not None or (is_alive is not None and not is_alive())
        if gone:
            waited = time.monotonic() - start
            detail = f" with code {exit_code}" if exit_code is not None else ""
            raise ServerStartError(
                f"Triton exited{detail} during start-up after {waited:.1f}s "
                f"(waiting for {url}){_tail_text(log_path)}",
                url=url,
                log_path=log_path,
            )
        try:
            if check():
                return time.monotonic() - start
            last_error = None
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            waited = time.monotonic() - start
            reason = f"; last error: {last_error}" if last_error is not None else ""
            raise ServerStartError(
                f"Triton was not ready at {url} after {waited:.1f}s (timeout {timeout_s:g}s)"
                f"{reason}; raise the timeout or read the log{_tail_text(log_path)}",
                url=url,
                log_path=log_path,
            )
        time.sleep(interval_s)


def _tail_text(log_path: Path | str | None) -> str:
    tail = log_tail(log_path)
    if not tail:
        return f" (log: {log_path})" if log_path else ""
    return f"\n--- last lines of {log_path} ---\n{tail}"


__all__ = ["log_tail", "wait_until_ready"]
