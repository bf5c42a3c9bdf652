"""The context manager over ``start()`` and ``stop()`` that servers and launchers share."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class StartStopContext:
    """``start()`` on enter, ``stop()`` on exit, and ``stop()`` when ``start()`` fails too.

    ``stop()`` is a no-op on what never started (or already stopped), so a failed enter leaks
    nothing and a second ``stop()`` is harmless.
    """

    def start(self) -> object:
        """Start and wait until ready (implemented by the subclass)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop; idempotent (implemented by the subclass)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


__all__ = ["StartStopContext"]
