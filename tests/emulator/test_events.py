"""The event log: one readable INFO line per load / unload / eviction with reason and bytes."""

from __future__ import annotations

import logging

import pytest

from mmelocal.emulator.events import EventLog


def test_each_event_is_one_log_line_with_bytes_time_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = EventLog(maxlen=3)
    with caplog.at_level(logging.INFO, logger="mmelocal.emulator.events"):
        log.add(
            "evict",
            "model-0.tar.gz",
            instance=1,
            reason="load model-9.tar.gz: over the limit",
            bytes=680_525_824,
            duration_ms=3045.2,
            memory_used_bytes=2 * 2**30,
        )
        log.add("load", "model-9.tar.gz", instance=1, reason="cold call", bytes=2**20)
        log.add("error", "bad.tar.gz", instance=0, reason="Triton answered 400")
        log.add("restart", "-", instance=0, reason="Triton died", duration_ms=900.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (
        "evicted model-0.tar.gz from instance 1: freed 649 MiB (680,525,824 bytes) in "
        "3,045 ms, memory used 2,048 MiB (2,147,483,648 bytes); reason: load "
        "model-9.tar.gz: over the limit"
    )
    assert lines[1].startswith("loaded model-9.tar.gz on instance 1: 1 MiB (1,048,576 bytes)")
    assert lines[2] == "failed to load bad.tar.gz on instance 0; reason: Triton answered 400"
    assert lines[3].startswith("restarted Triton instance 0: in 900 ms")
    assert [r.levelname for r in caplog.records] == ["INFO", "INFO", "WARNING", "WARNING"]
    assert [e.kind for e in log.recent()] == ["load", "error", "restart"]  # bounded
    assert log.counts["evict"] == 1 and log.counts["load"] == 1
