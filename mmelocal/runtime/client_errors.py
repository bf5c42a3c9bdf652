"""How a failed ``tritonclient`` call becomes an mmelocal error.

Triton's own refusals (``InferenceServerException``) keep Triton's message; socket, gevent
and gRPC failures become :class:`~mmelocal.errors.RuntimeLayerError` (with a hint when it
was a timeout), or :class:`~mmelocal.errors.ServerDiedError` when the server's process is
gone. A crashing server drops connections a moment before its process exits, so a
connection error waits up to :data:`DEATH_GRACE_S` for ``is_alive`` to say so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mmelocal.errors import ModelLoadError, RuntimeLayerError, ServerDiedError, UserInputError

#: after a connection error, how long to wait for a dying server's process to exit
DEATH_GRACE_S = 1.0


def server_gone(is_alive: Callable[[], bool] | None, *, grace_s: float = 0.0) -> bool:
    """True when ``is_alive`` says the server is gone, waiting up to ``grace_s`` for it to say
    so (a crashing server drops connections a moment before its process exits)."""
    if is_alive is None:
        return False
    deadline = time.monotonic() + grace_s
    while is_alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def status_code(exc: Any) -> int | None:
    """The HTTP/gRPC status of a tritonclient exception as an int (None when it has none)."""
    try:
        status = exc.status()
    except Exception:
        return None
    if status is None:
        return None
    try:
        return int(status)
    except (TypeError, ValueError):
        return None


def is_timeout(exc: BaseException) -> bool:
    """True when ``exc`` is a socket, gevent or gRPC timeout."""
    name = type(exc).__name__.lower()
    return isinstance(exc, TimeoutError) or "timeout" in name or "deadline" in str(exc).lower()


class ErrorMapper:
    """Maps failures of calls to the Triton at ``url`` (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        is_alive: Callable[[], bool] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.url = url
        self.is_alive = is_alive
        self.log_path = log_path

    def check_alive(self, what: str, exc: BaseException, *, grace_s: float = 0.0) -> None:
        """Raise ServerDiedError (naming ``what`` and the log) when the server is gone."""
        if server_gone(self.is_alive, grace_s=grace_s):
            log = f" (log: {self.log_path})" if self.log_path else ""
            raise ServerDiedError(
                f"Triton is not running any more: {what} failed ({exc}){log}",
                log_path=self.log_path,
            ) from exc

    @contextmanager
    def call(self, what: str, timeout_s: float) -> Iterator[None]:
        """Run a tritonclient call: Triton's refusals and our own errors pass unchanged."""
        from tritonclient.utils import InferenceServerException

        try:
            yield
        except (InferenceServerException, UserInputError, RuntimeLayerError):
            raise
        except Exception as exc:  # socket, gevent and grpc errors
            self.check_alive(what, exc, grace_s=DEATH_GRACE_S)
            if is_timeout(exc):
                raise RuntimeLayerError(
                    f"{what} got no answer from Triton at {self.url} within {timeout_s:g}s; "
                    "the model may hang at load (Python backend stub unable to start?): "
                    "read the server log"
                ) from exc
            raise RuntimeLayerError(
                f"{what} failed talking to Triton at {self.url}: {exc}"
            ) from exc

    def server_message(self, exc: Any, what: str) -> str:
        """Triton's message in ``exc`` (ServerDiedError instead when the server is gone)."""
        unavailable = status_code(exc) is None or "UNAVAILABLE" in str(exc.status())
        self.check_alive(what, exc, grace_s=DEATH_GRACE_S if unavailable else 0.0)
        return str(exc.message() if hasattr(exc, "message") else exc)

    def load_error(self, exc: Any, verb: str, name: str) -> ModelLoadError:
        """The ModelLoadError for a refused ``verb`` ("load" / "unload") of model ``name``."""
        message = self.server_message(exc, f"{verb} {name}")
        return ModelLoadError(
            f"Triton could not {verb} {name!r}: {message}",
            model_name=name,
            triton_message=message,
            status_code=status_code(exc),
        )


__all__ = ["DEATH_GRACE_S", "ErrorMapper", "is_timeout", "server_gone", "status_code"]
