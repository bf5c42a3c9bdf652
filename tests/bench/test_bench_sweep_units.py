"""Sweep arithmetic without a server: names, the qualifying step, sizing, recommendation."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_helpers import fake_loadtest

from mmelocal.bench.prices import load_prices
from mmelocal.bench.sweep_result import (
    SweepResult,
    SweepRow,
    best_step,
    config_name,
    recommend,
    row_from_loadtest,
)
from mmelocal.errors import UserInputError


def test_config_names() -> None:
    names = [
        config_name("pt", dynamic_batching=db, instance_count=n)
        for n in (1, 2)
        for db in (False, True)
    ]
    assert names == ["pt-base", "pt-db", "pt-ig", "pt-ig-db"]
    assert config_name("trt", dynamic_batching=True, instance_count=3) == "trt-ig3-db"


def test_best_step_respects_failures_and_latency() -> None:
    steps = fake_loadtest(failing_from=60).steps  # p99 = 1.5 x users ms; failures from 60 users
    assert best_step(steps, max_latency_ms=1000).users == 40  # 60+ users failed
    assert best_step(steps, max_latency_ms=35).users == 20  # 40 users: p99 60 ms > 35
    assert best_step(steps, max_latency_ms=1) is None


def _row(name: str, **kw: object) -> SweepRow:
    base = {
        "model_format": "torchscript",
        "dynamic_batching": False,
        "instance_count": 1,
        "status": "ok",
    }
    base.update(kw)
    return SweepRow(name=name, **base)  # type: ignore[arg-type]


def test_sizing_and_recommendation() -> None:
    loadtest = fake_loadtest(failing_from=60)
    row = row_from_loadtest(
        _row("pt-base"), loadtest, target_rps=500, max_latency_ms=1000, price_per_hour=2.0
    )
    # 40 users step: 4000 requests / 30 s = 133.3 req/s -> ceil(500 / 133.3) = 4 instances
    assert row.users_at_load == 40 and row.instances_needed == 4 and row.cost_per_hour == 8.0
    assert row.invocations_per_minute == pytest.approx(8000)
    faster = _row(
        "pt-ig-db", throughput_rps=400.0, instances_needed=2, cost_per_hour=4.0, p99_latency_ms=30.0
    )
    skipped = _row("trt-base", status="skipped", reason="no GPU")
    text = recommend(
        [row, faster, skipped], target_rps=500, max_latency_ms=1000, instance_type="ml.g4dn.xlarge"
    )
    assert text.startswith("pt-ig-db: 2 x ml.g4dn.xlarge")
    assert "3.0x pt-base" in text and "not measured: trt-base" in text
    assert recommend([skipped], target_rps=1, max_latency_ms=1, instance_type="x").startswith(
        "none"
    )
    result = SweepResult(
        source="s",
        instance_type="ml.g4dn.xlarge",
        target_rps=500,
        max_latency_ms=1000,
        rows=(row, faster, skipped),
        recommendation=text,
        price_note="n",
    )
    assert SweepResult.from_dict(result.to_dict()) == result


def test_prices_are_labelled_inputs(tmp_path: Path) -> None:
    table = load_prices()
    assert table.price_for("ml.g4dn.xlarge") is not None
    assert "not a fact" in table.note("ml.g4dn.xlarge")
    assert "No hourly price" in table.note("ml.nothing")
    mine = tmp_path / "p.yaml"
    mine.write_text("currency: EUR\nprices:\n  ml.g5.xlarge: 1.0\n")
    assert load_prices(mine).price_for("ml.g4dn.xlarge") is None
    mine.write_text("prices:\n  ml.g5.xlarge: cheap\n")
    with pytest.raises(UserInputError, match="must be a number"):
        load_prices(mine)
