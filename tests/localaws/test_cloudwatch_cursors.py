"""The local CloudWatch's per-fleet cursors: a fleet made after another was deleted starts
from zero, whatever address (``id()``) it gets (CPython reuses a freed one)."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from types import SimpleNamespace

from mmelocal.localaws.cloudwatch import _Reader


class _Fleet:
    def __init__(self, invocations: int) -> None:
        metrics = SimpleNamespace(counters=Counter(Invocations=invocations), summaries={})
        self.server = SimpleNamespace(
            emulator=SimpleNamespace(metrics=metrics),
            call=lambda coro, timeout_s: asyncio.run(coro),
        )


def test_a_new_fleet_starts_from_zero_after_a_deleted_one() -> None:
    reader = _Reader()
    for count in (7, 3, 5):  # each made after the previous one is gone
        fleet = _Fleet(count)
        assert reader.read(fleet)[0]["Invocations"] == [float(count)]
        assert reader.read(fleet)[0]["Invocations"] == [0.0]
        del fleet
        gc.collect()
        assert not list(reader._last.keys())  # its cursor went with it: no id() to reuse
