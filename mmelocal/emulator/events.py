"""The recent load / unload / eviction log (what SageMaker never shows you).

Every event is also logged at INFO with its reason and bytes; this keeps the last ones
as plain data for ``GET /emulator/state`` and for tests.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import asdict, dataclass

logger = logging.getLogger(__name__)

EVENT_KINDS = ("download", "load", "unload", "evict", "restart", "error")


@dataclass(frozen=True, kw_only=True)
class Event:
    """One thing the platform did to a model or an instance."""

    kind: str
    target: str
    instance: int
    reason: str
    bytes: int | None = None
    duration_ms: float | None = None
    memory_used_bytes: int | None = None
    time_s: float = 0.0
    detail: dict[str, float] | None = None

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return asdict(self)


class EventLog:
    """A bounded list of recent events, logged as they happen."""

    def __init__(self, *, maxlen: int = 1000) -> None:
        self._events: deque[Event] = deque(maxlen=maxlen)
        self.counts = dict.fromkeys(EVENT_KINDS, 0)

    def add(
        self,
        kind: str,
        target: str,
        *,
        instance: int,
        reason: str,
        bytes: int | None = None,
        duration_ms: float | None = None,
        memory_used_bytes: int | None = None,
        detail: dict[str, float] | None = None,
    ) -> Event:
        """Record and log one event."""
        event = Event(
            kind=kind,
            target=target,
            instance=instance,
            reason=reason,
            bytes=bytes,
            duration_ms=duration_ms,
            memory_used_bytes=memory_used_bytes,
            time_s=time.time(),
            detail=detail,
        )
        self._events.append(event)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        level = logging.WARNING if kind in ("error", "restart") else logging.INFO
        logger.log(
            level,
            "%s %s on instance %d: %s (bytes=%s, %.0f ms, memory used %s)",
            kind,
            target,
            instance,
            reason,
            "?" if bytes is None else bytes,
            duration_ms or 0.0,
            "?" if memory_used_bytes is None else memory_used_bytes,
        )
        return event

    def recent(self, kind: str | None = None, limit: int = 100) -> list[Event]:
        """The last ``limit`` events (of one kind when given), oldest first."""
        items = [e for e in self._events if kind is None or e.kind == kind]
        return items[-limit:]


__all__ = ["EVENT_KINDS", "Event", "EventLog"]
