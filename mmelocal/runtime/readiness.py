"""One readiness helper for every launcher.

:func:`wait_until_ready` polls a ``check`` callable until it returns True, and fails with
a :class:`~mmelocal.errors.ServerStartError` that names the URL, the seconds waited and
the tail of the server log, so nobody has to go and find the log to learn why.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import socket
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from mmelocal.errors import ServerStartError

if TYPE_CHECKING:
    import subprocess

    from mmelocal.runtime.launcher import Endpoints

logger = logging.getLogger(__name__)

DEFAULT_LOG_TAIL_LINES = 30


class _Process(Protocol):
    def poll(self) -> int | None: ...


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    """True when ``GET url`` answers 200 within ``timeout_s`` (False on any network error)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def triton_ready(endpoints: Endpoints, timeout_s: float = 1.0) -> bool:
    """True when Triton answers ready, and its SageMaker front end (when enabled) ``/ping``."""
    if not http_ok(f"{endpoints.http_url}/v2/health/ready", timeout_s):
        return False
    if endpoints.sagemaker_url is not None:
        return http_ok(f"{endpoints.sagemaker_url}/ping", timeout_s)
    return True


def wait_for_listener(url: str, *, grace_s: float) -> None:
    """Return once something accepts TCP connections at ``url``'s host and port.

    Raises ServerStartError when every try is refused for ``grace_s`` seconds (nothing
    listens there: a wrong URL or a server that is not running). Other network errors
    return at once and are left to :func:`wait_until_ready` and its timeout.
    """
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    start = time.monotonic()
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except ConnectionRefusedError:
            waited = time.monotonic() - start
            if waited >= grace_s:
                raise ServerStartError(
                    f"nothing listens at {url} (connection refused for {waited:.1f}s): start "
                    "the server first or check the URL",
                    url=url,
                ) from None
        except OSError:
            return
        time.sleep(0.1)


def log_tail(
    log_path: Path | str | None, *, lines: int = DEFAULT_LOG_TAIL_LINES, offset: int = 0
) -> str:
    """The last ``lines`` lines of a log file, of what was written from byte ``offset`` on
    (a log appended to by several runs: this run's part); '' when absent or unreadable."""
    if log_path is None:
        return ""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            start = offset if 0 <= offset <= size else 0  # a truncated log: all of it
            fh.seek(max(start, size - 64 * 1024))
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
    interval_s: float = 0.01,
    max_interval_s: float = 0.25,
    is_alive: Callable[[], bool] | None = None,
    exit_code: Callable[[], int | None] | None = None,
    server: str = "Triton",
    log_offset: int = 0,
) -> float:
    """Poll ``check`` until it returns True; return the seconds it took (``server``: what
    the errors call the server waited for).

    Exceptions raised by ``check`` count as "not ready yet". When ``process`` (anything
    with ``poll()``) exits, or ``is_alive`` returns False, the wait stops at once with
    the exit code (``exit_code`` reads it once ``is_alive`` said the server is gone) and
    the log tail instead of running out the timeout. The errors quote the log from byte
    ``log_offset`` on (where this start's output begins in a log kept across runs). Polling
    starts
    every ``interval_s`` and slows down by 30 % per try up to ``max_interval_s``.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    last_error: BaseException | None = None

    while True:
        code = process.poll() if process is not None else None
        gone = code is not None or (is_alive is not None and not is_alive())
        if gone:
            if code is None and exit_code is not None:
                code = exit_code()
            raise exited_during_start(
                url=url,
                log_path=log_path,
                waited_s=time.monotonic() - start,
                exit_code=code,
                server=server,
                log_offset=log_offset,
            )
        try:
            if check():
                return time.monotonic() - start
            last_error = None
        except Exception as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            reason = f"; last error: {last_error}" if last_error is not None else ""
            raise _start_failure(
                f"{server} was not ready at {url} after {time.monotonic() - start:.1f}s "
                f"(timeout {timeout_s:g}s){reason}; raise the timeout or read the log",
                url=url,
                log_path=log_path,
                log_offset=log_offset,
            )
        time.sleep(interval_s)
        interval_s = min(max_interval_s, interval_s * 1.3)


#: the line mmelocal's servers log once they listen ("MME emulator listening on
#: http://127.0.0.1:8080", "local AWS listening on http://127.0.0.1:4566 (data ...)"); a
#: log handler may wrap it between words
LISTENING = re.compile(r"listening\s+on\s+(https?://[^\s()]+)")


class LogWatch:
    """Finds ``pattern`` in a log as it grows, reading each byte once.

    :meth:`next_match` reads what was appended since the last call (from ``offset`` at
    first; a log that does not exist yet reads as empty) and returns the first match not
    returned before, or None. Each match is returned once, in the log's order, as
    :func:`re.finditer` would over the whole log: polling never re-reads the log, and
    a found line is not found again.

    Only complete lines are searched: a line still being written could match in part
    (a URL cut short at the port). A match may span reads and line breaks (a log handler
    wraps long lines between words): the last ``overlap`` characters of the text
    searched before are searched again with the new lines, so any match up to that long
    is found, and once. The log is decoded as UTF-8 (invalid bytes replaced) by an
    incremental decoder: a character split between two reads stays whole. The log is
    expected to grow only; text written over a truncated log is not seen. The matches'
    positions are in the watch's window of the log, not in the file.
    """

    def __init__(
        self,
        path: Path | str,
        pattern: re.Pattern[str],
        *,
        offset: int = 0,
        overlap: int = 4096,
    ) -> None:
        self.path = path
        self.pattern = pattern
        #: the file position of the next byte to read
        self.offset = offset
        self._overlap = overlap
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""  # complete lines kept for the overlap, then lines read since
        self._from = 0  # where in _text the next search starts

    def next_match(self) -> re.Match[str] | None:
        """The first match not returned before in the complete lines read so far (after
        reading what was appended since the last call); None when there is none yet."""
        self._read()
        complete = self._text.rfind("\n") + 1
        match = self.pattern.search(self._text, self._from, complete)
        if match is not None:
            self._from = match.end()
            return match
        # nothing up to `complete`: keep the overlap (from a line start) for a match that
        # the next lines complete, and the unfinished line
        start = self._text.rfind("\n", 0, max(0, complete - self._overlap)) + 1
        self._from = max(self._from, complete - self._overlap) - start
        self._text = self._text[start:]
        return None

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                data = log.read()
        except OSError:  # not there yet (or unreadable): nothing new
            return
        self.offset += len(data)
        self._text += self._decoder.decode(data)


def wait_for_logged_url(
    log_path: Path | str,
    *,
    process: _Process,
    timeout_s: float,
    pattern: re.Pattern[str] = LISTENING,
) -> str:
    """The URL a server in a child process logs once it listens: started on port 0, the
    port it bound (nobody can take it between a choice and the bind, as with a port
    picked free beforehand). ``log_path`` gets the child's log (its stderr);
    ``pattern``'s first group is the URL. Fails like :func:`wait_until_ready` when the
    child exits or ``timeout_s`` passes first."""
    watch = LogWatch(log_path, pattern)
    found: list[str] = []

    def logged() -> bool:
        match = watch.next_match()
        if match is not None:
            found.append(match[1])
        return match is not None

    wait_until_ready(  # polled often: start-up timings may count from the spawn
        logged,
        timeout_s=timeout_s,
        url=f"its log {log_path}",
        log_path=log_path,
        process=process,
        max_interval_s=0.02,
        server="The server",
    )
    return found[-1]


def start_logging_server(
    argv: Sequence[str],
    log_path: Path | str,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start one of mmelocal's servers (``argv``: ``mmelocal serve ...``, ``mmelocal
    local-aws ...``) in a child process on port 0; the process and the URL it logs once it
    listens (:func:`wait_for_logged_url`, within ``timeout_s``).

    ``--port 0`` is appended: the server binds a port the system chooses and logs it, so
    no port is picked here and bound there later. Its stderr (the log) goes to
    ``log_path`` (written anew), its stdout nowhere. The child's environment is this
    one's with ``env`` and ``COLUMNS=200`` (the log handler wraps lines at the
    terminal's width, 80 without a terminal). When the wait fails, the child is stopped
    (:func:`stop_child`) before the error goes on: a failed start leaves no
    server behind.
    """
    import subprocess

    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*argv, "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, **(env or {}), "COLUMNS": "200"},
        )
    try:
        url = wait_for_logged_url(log_path, process=process, timeout_s=timeout_s)
    except BaseException:
        stop_child(process)
        raise
    return process, url


def stop_child(*processes: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Stop child processes (:func:`start_logging_server`'s): SIGTERM to each, then wait;
    one still running after ``timeout_s`` gets SIGKILL. Idempotent."""
    import subprocess

    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def exited_during_start(
    *,
    url: str,
    log_path: Path | str | None,
    waited_s: float,
    exit_code: int | None = None,
    server: str = "Triton",
    log_offset: int = 0,
) -> ServerStartError:
    """The error for a server (``server``: what it is called) that exited before it was
    ready (with the excerpt of the log from ``log_offset`` on)."""
    detail = f" with code {exit_code}" if exit_code is not None else ""
    return _start_failure(
        f"{server} exited{detail} during start-up after {waited_s:.1f}s (waiting for {url})",
        url=url,
        log_path=log_path,
        log_offset=log_offset,
    )


def _start_failure(
    message: str, *, url: str, log_path: Path | str | None, log_offset: int = 0
) -> ServerStartError:
    """The start-up failure ``message``, followed by the tail of the server's log (from
    ``log_offset`` on)."""
    return ServerStartError(
        f"{message}{_tail_text(log_path, log_offset)}", url=url, log_path=log_path
    )


_NOTABLE = re.compile(r"^E\d{4} |unrecognized option|error:|failed to|Usage: ", re.IGNORECASE)
#: a group heading of tritonserver's usage text ("Server:", "Memory/Device Management:")
_USAGE_HEADING = re.compile(r"[A-Za-z][\w /-]*:")


def log_excerpt(
    log_path: Path | str | None, *, lines: int = DEFAULT_LOG_TAIL_LINES, offset: int = 0
) -> str:
    """Error lines of the log (Triton's ``E....`` lines, bad options), then its tail; of
    what was written from byte ``offset`` on (see :func:`log_tail`).

    A refused flag makes tritonserver print its whole usage text and exit: the lines that
    matter are around it, not the tail. An unknown option is named before ``Usage:``; a
    bad value (``Bad option: "--log-verbose".`` and the reason) after the usage text,
    whose own lines are indented, blank or group headings.
    """
    tail = log_tail(log_path, lines=10_000, offset=offset)
    if not tail:
        return ""
    all_lines = tail.splitlines()
    if any(line.startswith("Usage: ") for line in all_lines):
        usage = next(i for i, line in enumerate(all_lines) if line.startswith("Usage: "))
        after = [
            line
            for line in all_lines[usage + 1 :]
            if line.strip() and not line[0].isspace() and not _USAGE_HEADING.fullmatch(line)
        ]
        return "\n".join(all_lines[max(0, usage - lines) : usage] + after[:lines])
    notable = [line for line in all_lines[:-lines] if _NOTABLE.search(line)][-10:]
    kept = [*notable, "..."] if notable else []
    return "\n".join(kept + all_lines[-lines:])


def _tail_text(log_path: Path | str | None, offset: int = 0) -> str:
    excerpt = log_excerpt(log_path, offset=offset)
    if not excerpt:
        return f" (log: {log_path})" if log_path else ""
    return f"\n--- from {log_path} ---\n{excerpt}"


__all__ = [
    "LISTENING",
    "LogWatch",
    "exited_during_start",
    "http_ok",
    "log_excerpt",
    "log_tail",
    "start_logging_server",
    "stop_child",
    "triton_ready",
    "wait_for_listener",
    "wait_for_logged_url",
    "wait_until_ready",
]
