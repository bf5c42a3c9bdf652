"""``mmelocal demo``'s final report, rendered from plain data (no server, no build)."""

from __future__ import annotations

from typing import Any

import pytest

from mmelocal.cli import demo


def test_report_tables_have_units_in_the_headers(capsys: pytest.CaptureFixture[str]) -> None:
    calls = demo._Calls()
    calls.latencies_s = [(0.05, True)] * 30 + [(9.0, False)] * 3
    state: dict[str, Any] = {
        "event_counts": {"load": 6, "evict": 3},
        "events": [
            {
                "kind": "evict",
                "target": "model-5.tar.gz",
                "bytes": 680 * 2**20,
                "duration_ms": 3021.0,
                "reason": "load model-14.tar.gz: over the limit",
            }
        ],
    }
    demo._report(state, calls, limit=3000 * 2**20, footprint=650 * 2**20, base=34 * 2**20)
    out = capsys.readouterr().out
    for words in ("boto3 calls", "cache hits", "LRU evictions", "p50 (ms)", "p99 (ms)"):
        assert words in out
    assert "30 (91 %)" in out  # hits
    assert "9,000.0" in out  # cold p50 in ms
    assert "freed (MiB)" in out and "680" in out and "3,021" in out
