"""The HTML report: plots render, CSV and JSON carry the numbers, results read back."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from bench_helpers import FakeInstance, fake_loadtest, open_every_png, run_fake_capacity

from mmelocal.bench.capacity.projection import project
from mmelocal.bench.report.page import write_report
from mmelocal.bench.results import read_results, write_result, write_results

MIB = 1024 * 1024


def _instance() -> FakeInstance:
    return FakeInstance(total=1000 * MIB, baseline=100 * MIB, footprint=200 * MIB)


def test_report_renders_every_part(tmp_path: Path) -> None:
    loadtest = fake_loadtest()
    capacity = run_fake_capacity(_instance())
    projection = project(per_model_bytes=200 * MIB, baseline_bytes=100 * MIB)
    files = write_report([loadtest, capacity, projection], tmp_path / "out", title="T")
    sizes = open_every_png(files.html)
    assert len(sizes) == 3 and all(w > 300 and h > 200 for w, h in sizes)
    assert all(p.exists() for p in files.png)
    text = files.html.read_text()
    assert "highest user count before the first failure: 40" in text
    steps_csv = next(p for p in files.csv if p.name == "loadtest-1-steps.csv")
    rows = list(csv.DictReader(steps_csv.open()))
    assert [int(r["users"]) for r in rows] == [10, 20, 40, 60, 80]
    assert all(int(r["requests"]) == int(r["successes"]) + int(r["failures"]) for r in rows)
    data = json.loads(files.json.read_text())
    assert [d["kind"] for d in data] == ["loadtest", "capacity", "projection"]


def test_results_read_back_by_kind(tmp_path: Path) -> None:
    loadtest = fake_loadtest()
    path = write_result(loadtest, tmp_path / "lt.json")
    (again,) = read_results(path)
    assert again == loadtest and again.max_users_without_failure == 40
    capacity = run_fake_capacity(_instance())
    both = write_results([loadtest, capacity], tmp_path / "both.json")
    assert [r.kind for r in read_results(both)] == ["loadtest", "capacity"]


def test_report_command_reads_result_files(tmp_path: Path) -> None:
    from mmelocal.cli.main import main

    first = write_result(fake_loadtest(), tmp_path / "a.json")
    second = write_result(project(per_model_bytes=MIB, baseline_bytes=0), tmp_path / "b.json")
    assert main(["report", str(first), str(second), "--out", str(tmp_path / "r")]) == 0
    assert len(open_every_png(tmp_path / "r" / "index.html")) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "nonsense"}')
    assert main(["report", str(bad), "--out", str(tmp_path / "r2")]) == 2


def test_sweep_report_with_rows_that_never_met_the_limit(tmp_path: Path) -> None:
    """A configuration that ran but never met the latency limit has no rate: the report
    still renders (it used to crash on the missing bar height) and says why per row."""
    from mmelocal.bench.sweep.result import SweepResult, SweepRow, row_from_loadtest

    def row(name: str, **kw: object) -> SweepRow:
        base: dict[str, object] = {
            "model_format": "torchscript",
            "dynamic_batching": False,
            "instance_count": 1,
            "status": "ok",
        }
        return SweepRow(name=name, **{**base, **kw})  # type: ignore[arg-type]

    rows = (
        row_from_loadtest(
            row("pt-base"), fake_loadtest(), target_rps=500, max_latency_ms=1000, price_per_hour=1
        ),
        row_from_loadtest(
            row("pt-db"), fake_loadtest(), target_rps=500, max_latency_ms=1, price_per_hour=1
        ),
        row("trt-base", model_format="tensorrt", status="skipped", reason="no GPU"),
    )
    assert rows[1].invocations_per_minute is None and rows[1].reason
    result = SweepResult(
        source="s",
        instance_type="ml.g4dn.xlarge",
        target_rps=500,
        max_latency_ms=1,
        rows=rows,
        recommendation="pt-base",
        price_note="example",
    )
    files = write_report([result], tmp_path / "out")
    assert len(open_every_png(files.html)) == 2
    text = files.html.read_text()
    assert "pt-db (ok): no tested load kept p99" in text
    assert "p99 latency (ms)" in text  # readable headers with units; CSV keeps field names
    header = (tmp_path / "out" / "sweep-1-rows.csv").read_text().splitlines()[0]
    assert "p99_latency_ms" in header and "reason" in header


def test_a_shape_that_goes_back_down_is_plotted_per_step(tmp_path: Path) -> None:
    """Users 20 -> 150 -> 20 (examples/bench/spike_shape.yaml) would double back on a users
    axis: the plots use the steps in order instead, and still render."""
    import dataclasses

    from mmelocal.bench.report.plots import _figure, _users_axis

    loadtest = fake_loadtest()
    users = (20, 150, 20)
    steps = [
        dataclasses.replace(s, users=u) for s, u in zip(loadtest.steps[:3], users, strict=True)
    ]
    ax = _figure().subplots()
    assert _users_axis(ax, steps) == [0.0, 1.0, 2.0] and ax.get_xlabel() == "step"
    assert _users_axis(ax, loadtest.steps) == [10.0, 20.0, 40.0, 60.0, 80.0]
    spiky = dataclasses.replace(loadtest, steps=tuple(steps))
    assert len(open_every_png(write_report([spiky], tmp_path / "out").html)) == 2


def test_a_report_written_again_removes_only_its_own_earlier_files(tmp_path: Path) -> None:
    """A second report into the same folder left the first one's plots and tables beside
    its own (stale files that looked current); the user's own files must stay."""
    out = tmp_path / "out"
    first = write_report([fake_loadtest(), run_fake_capacity(_instance())], out)
    (out / "notes.txt").write_text("mine")
    (out / "loadtest-9.png").write_bytes(b"mine too")  # named like a report's, not written by one
    second = write_report([project(per_model_bytes=200 * MIB, baseline_bytes=100 * MIB)], out)
    written = {p.name for p in (second.html, second.json, *second.png, *second.csv)}
    stale = {p.name for p in (*first.png, *first.csv)} - written
    assert stale and not [name for name in stale if (out / name).exists()]
    assert all((out / name).exists() for name in written)
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "loadtest-9.png").read_bytes() == b"mine too"
