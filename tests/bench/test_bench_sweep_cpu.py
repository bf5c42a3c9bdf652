"""A sweep on a CPU host recommends no instance count for a GPU instance type.

Its throughput is a CPU's; what it can say is the relative effect of dynamic batching and
instance count, and where GPU numbers come from (pure functions; the end-to-end run on this
host is in test_bench_sweep_tiny_bert.py).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from mmelocal.bench.capacity.projection import is_gpu_instance_type
from mmelocal.bench.sweep.result import SweepResult, SweepRow, cpu_summary, relative_effects


def _row(name: str, fmt: str = "torchscript", peak: float | None = None, **kw: object) -> SweepRow:
    return SweepRow(
        name=name,
        model_format=fmt,
        dynamic_batching="db" in name,
        instance_count=2 if "-ig" in name else 1,
        status=str(kw.pop("status", "ok")),
        peak_throughput_rps=peak,
        **kw,  # type: ignore[arg-type]
    )


ROWS = (
    _row("pt-base", peak=100.0),
    _row("pt-db", peak=190.0),
    _row("pt-ig", peak=110.0),
    _row("pt-ig-db", peak=205.0),
    _row("onnx-base", "onnx", peak=50.0),
    _row("onnx-db", "onnx", peak=150.0),
    _row("trt-base", "tensorrt", status="skipped", reason="TensorRT needs an NVIDIA GPU"),
)


def test_relative_effects_are_ratios_to_each_formats_base() -> None:
    assert relative_effects(ROWS) == (
        "pt-db 1.9x, pt-ig 1.1x, pt-ig-db 2.0x pt-base; onnx-db 3.0x onnx-base"
    )
    assert "no two configurations" in relative_effects(ROWS[-1:])


def test_cpu_summary_gives_no_instance_count_and_says_how_to_get_gpu_numbers() -> None:
    text = cpu_summary(ROWS, instance_type="ml.g4dn.xlarge")
    assert text.startswith("none:")
    assert re.search(r"\d+ x ml\.g4dn", text) is None
    assert "pt-db 1.9x" in text
    assert "capacity estimate" in text and "--endpoint" in text and "NVIDIA GPU" in text


@pytest.mark.parametrize(
    ("instance_type", "gpu"),
    [
        ("ml.g4dn.xlarge", True),
        ("ml.p3.2xlarge", True),
        ("ml.g6e.2xlarge", True),  # not in gpus.yaml: known by its family
        ("ml.c5.xlarge", False),
        ("ml.m5.large", False),
    ],
)
def test_gpu_instance_types(instance_type: str, gpu: bool) -> None:
    assert is_gpu_instance_type(instance_type) is gpu


def test_results_written_before_the_flag_read_as_sized() -> None:
    data = SweepResult(
        source="s",
        instance_type="ml.g4dn.xlarge",
        target_rps=1.0,
        max_latency_ms=1.0,
        rows=ROWS,
        recommendation="r",
        price_note="p",
        relative_only=True,
    ).to_dict()
    assert SweepResult.from_dict(data).relative_only is True
    del data["relative_only"]
    assert SweepResult.from_dict(data).relative_only is False


def _measured(name: str, rps: float) -> SweepRow:
    return _row(name, peak=rps, throughput_rps=rps, p99_latency_ms=20.0, users_at_load=10)


def test_a_cpu_run_never_labels_its_rate_per_gpu_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU host for ml.g4dn.xlarge the rates are this CPU's: the table and the plot say
    so, and neither calls them invocations per (GPU) instance."""
    from rich.console import Console

    from mmelocal.bench.report import plots
    from mmelocal.cli.sweep import _table

    rows = (_measured("pt-base", 100.0), _measured("pt-db", 190.0))
    result = SweepResult(
        source="s", instance_type="ml.g4dn.xlarge", target_rps=500.0, max_latency_ms=500.0,
        rows=rows, recommendation="none: ...", price_note="p", relative_only=True,
        machine="x86_64, 2 CPU(s), no GPU (CPU, Python backend)",
    )  # fmt: skip
    console = Console(width=300, record=True)
    console.print(_table(result))
    printed = console.export_text()
    assert "per instance" not in printed and "CPU" in printed
    figures: list[object] = []

    def keep(fig: object) -> bytes:
        figures.append(fig)
        return b""

    monkeypatch.setattr(plots, "_png", keep)
    plots.sweep_comparison(result)
    labels = [ax.get_ylabel() + " " + ax.get_title() for ax in figures[0].axes]  # type: ignore[attr-defined]
    assert not any("instance" in label for label in labels) and "CPU" in labels[0]
    # sized on a GPU (or for a CPU instance type) the labels stay per instance
    figures.clear()
    plots.sweep_comparison(SweepResult.from_dict({**result.to_dict(), "relative_only": False}))
    assert "instance" in figures[0].axes[0].get_ylabel()  # type: ignore[attr-defined]


def test_a_sweep_result_measured_on_a_cpu_keeps_ratios_only() -> None:
    """Both sweeps (local, on an endpoint) take their result from ``sweep_result``: one
    measured on a CPU for a GPU instance type keeps the rows' rates but no instance count or
    cost, and recommends nothing but what the CPU run shows; a sized one keeps them."""
    from mmelocal.bench.prices import load_prices
    from mmelocal.bench.sweep.runner import SweepOptions, sweep_result

    rows = (
        replace(_measured("pt-base", 100.0), instances_needed=5, cost_per_hour=3.0),
        replace(_measured("pt-db", 190.0), instances_needed=3, cost_per_hour=1.8),
    )
    opts, prices = SweepOptions(), load_prices(None)

    def result(*, relative_only: bool) -> SweepResult:
        return sweep_result(
            "s", rows, opts, prices, "ml.g4dn.xlarge",
            where=" w.", machine="m", started_at="t", relative_only=relative_only,
        )  # fmt: skip

    cpu = result(relative_only=True)
    assert cpu.relative_only is True
    assert [(r.peak_throughput_rps, r.instances_needed, r.cost_per_hour) for r in cpu.rows] == [
        (100.0, None, None),
        (190.0, None, None),
    ]
    assert cpu.recommendation == cpu_summary(cpu.rows, instance_type="ml.g4dn.xlarge")
    sized = result(relative_only=False)
    assert [r.instances_needed for r in sized.rows] == [5, 3]
    assert not sized.recommendation.startswith("none: no instance count")
