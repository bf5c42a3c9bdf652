"""Acceptance: `mmelocal capacity` on the packaged MiniLM with a CPU memory budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import open_every_png

from mmelocal.cli.main import main

pytestmark = [pytest.mark.triton, pytest.mark.slow]

MIB = 1024 * 1024
# One MiniLM copy (TorchScript run by torch inside a Python-backend stub) adds a few hundred
# MiB of PSS here, the first one the torch runtime too: a 2 GiB budget (limit 1843 MiB at
# 90 %) holds a few copies.
BUDGET = "2GiB"


def test_minilm_count_and_the_next_copy_crosses(tmp_path: Path) -> None:
    out_json, report = tmp_path / "capacity.json", tmp_path / "report"
    code = main(
        [
            "capacity",
            "minilm",
            "--memory-budget",
            BUDGET,
            "--threshold",
            "0.9",
            "--max-copies",
            "8",
            "--json",
            str(out_json),
            "--report",
            str(report),
        ]
    )
    assert code == 0
    data = json.loads(out_json.read_text())
    assert data["kind"] == "capacity" and data["model_format"] == "torchscript"
    assert data["precision"] == "fp32"  # read from the built model.pt's weights
    limit = 0.9 * 2 * 1024 * MIB
    assert data["limit_bytes"] == int(limit)
    assert data["count"] >= 2
    # every counted copy stayed within the threshold ...
    assert all(load["used_bytes"] <= limit for load in data["loads"])
    # ... and loading one more copy than the count, on the real server, crossed it
    crossing = data["next_copy"]
    assert crossing is not None and crossing["copies"] == data["count"] + 1
    assert crossing["used_bytes"] > limit
    assert data["baseline_bytes"] > 0 and data["per_model_mean_bytes"] > 50 * MIB
    # the projection onto the measured card reproduces the measured count (± 1)
    assert abs(data["projected_count"] - data["count"]) <= 1
    # the footprint in two parts: each copy's own memory, and the torch runtime once ...
    assert data["runtime"] == "torch"
    assert all(load["marginal_bytes"] > 50 * MIB for load in data["loads"])
    assert data["marginal_mean_bytes"] > 50 * MIB and data["shared_runtime_bytes"] >= 0
    # a copy's own part from the second copy on; the runtime, what the first added beyond it
    first = data["loads"][0]
    later = [load["marginal_bytes"] for load in data["loads"][1:]]
    assert data["marginal_mean_bytes"] == pytest.approx(sum(later) / len(later))
    assert data["shared_runtime_bytes"] == max(
        0, round(first["delta_bytes"] - data["marginal_mean_bytes"])
    )
    # ... and the count they imply is the count measured (± 1)
    implied = (limit - data["baseline_bytes"] - data["shared_runtime_bytes"]) // data[
        "marginal_mean_bytes"
    ]
    assert data["implied_count"] == implied
    assert abs(data["implied_count"] - data["count"]) <= 1, data
    # host memory on CPU: no GPU projection, and the result says where it was measured
    assert data["projection"] is None
    assert data["measured_where"] == "this machine, CPU host memory"
    assert len(open_every_png(report / "index.html")) == 1
