"""Acceptance: `mmelocal sweep` with dynamic batching off/on and instances 1/2 on a tiny BERT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import open_every_png

from mmelocal.cli.main import main

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def test_four_rows_a_recommendation_and_the_report(tiny_bert_dir: Path, tmp_path: Path) -> None:
    out_json, report = tmp_path / "sweep.json", tmp_path / "report"
    code = main(
        [
            "sweep",
            str(tiny_bert_dir),
            "--formats",
            "torchscript,tensorrt",
            "--dynamic-batching",
            "off,on",
            "--instances",
            "1,2",
            "--users",
            "2",  # one step per row: what each row asserts needs no second
            "--step-duration",
            "2s",
            "--target-rps",
            "500",
            "--max-latency-ms",
            "2000",
            "--json",
            str(out_json),
            "--report",
            str(report),
        ]
    )
    assert code == 0
    data = json.loads(out_json.read_text())
    rows = {row["name"]: row for row in data["rows"]}
    assert list(rows)[:4] == ["pt-base", "pt-db", "pt-ig", "pt-ig-db"]
    for name in ("pt-base", "pt-db", "pt-ig", "pt-ig-db"):
        row = rows[name]
        assert row["status"] == "ok", row["reason"]
        assert row["loadtest"]["requests"] > 0
        # Triton's own time per request, from its statistics over the test
        assert row["model_latency_ms"] is not None and row["model_latency_ms"] > 0
        if row["instances_needed"] is not None:
            assert row["invocations_per_minute"] == pytest.approx(row["throughput_rps"] * 60)
            assert row["instances_needed"] >= 500 / row["throughput_rps"]
            assert row["cost_per_hour"] is not None
    # no GPU here: TensorRT is listed as skipped with the reason, never estimated
    for name in ("trt-base", "trt-db", "trt-ig", "trt-ig-db"):
        assert rows[name]["status"] == "skipped" and "GPU" in rows[name]["reason"]
        assert rows[name]["throughput_rps"] is None and rows[name]["instances_needed"] is None
    recommendation = data["recommendation"]
    assert recommendation.split(":")[0] in rows or recommendation.startswith("none")
    from mmelocal.runtime.memory import gpu_count

    assert data["relative_only"] == (gpu_count() == 0)  # the default type is ml.g4dn.xlarge
    if data["relative_only"]:  # measured on a CPU for a GPU instance: ratios, no sizing
        assert "no GPU" in data["machine"]
        assert all(row["instances_needed"] is None for row in rows.values())
        assert "pt-db" in recommendation and "capacity estimate" in recommendation
    assert "not a fact" in data["price_note"]
    html = report / "index.html"
    assert "Recommendation" in html.read_text()
    assert len(open_every_png(html)) == 2
    assert (report / "sweep-1-rows.csv").exists()
