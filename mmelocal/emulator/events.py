"""The recent load / unload / eviction log (what SageMaker never shows you).

Every event is also logged at INFO with its reason and bytes; this keeps the last ones
as plain data for ``GET /emulator/state`` and for tests.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import asdict, dataclass

from mmelocal.units import mib_and_bytes

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


_VERBS = {
    "download": ("downloaded", "for"),
    "load": ("loaded", "on"),
    "unload": ("unloaded", "from"),
    "evict": ("evicted", "from"),
    "restart": ("restarted Triton", ""),
    "error": ("failed to load", "on"),
}


def describe(event: Event) -> str:
    """One log line: what happened to which model where, the bytes, the time, the reason.

    ``evicted model-3.tar.gz from instance 0: freed 655 MiB (686,817,280 bytes) in
    2,515 ms, memory used 2,010 MiB (2,107,637,760 bytes); reason: load model-9.tar.gz: ...``
    """
    verb, preposition = _VERBS.get(event.kind, (event.kind, "on"))
    target = "" if event.target == "-" else f" {event.target}"
    where = f"{preposition} instance {event.instance}".strip()
    what = ""
    if event.bytes is not None:
        freed = "freed " if event.kind in ("evict", "unload") else ""
        what = freed + mib_and_bytes(event.bytes)
    if event.duration_ms is not None:
        what = f"{what} in {event.duration_ms:,.0f} ms".strip()
    if event.memory_used_bytes is not None:
        what = f"{what}, memory used {mib_and_bytes(event.memory_used_bytes)}"
    facts = f": {what}" if what else ""
    return f"{verb}{target} {where}{facts}; reason: {event.reason}"


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
        if logger.isEnabledFor(level):
            logger.log(level, "%s", describe(event))
        return event

    def recent(self, kind: str | None = None, limit: int = 100) -> list[Event]:
        """The last ``limit`` events (of one kind when given), oldest first."""
        items = [e for e in self._events if kind is None or e.kind == kind]
        return items[-limit:]


__all__ = ["EVENT_KINDS", "Event", "EventLog", "describe"]
