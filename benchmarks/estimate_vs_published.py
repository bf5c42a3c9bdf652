"""The capacity estimate on every published per-card MME count, leave one model out.

For each model recorded in ``mmelocal/bench/published.py`` (AWS sample
sagemaker-mme-gpu-benchmarking, ml.g4dn.2xlarge = T4 and ml.p3.2xlarge = V100), every
calibrated constant is refit on the other models' rows only, and the model's rows are
estimated with those constants (:func:`mmelocal.bench.estimate.holdout.held_out`): the errors are
errors on models the estimate was not fitted to. Prints the table (and its markdown, the one
in docs/estimate.md), the mean and max absolute count errors, and the shipped constants with
the rows each is fitted on.

Run: ``.venv/bin/python benchmarks/estimate_vs_published.py``
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from mmelocal.bench.estimate.holdout import (
    HEADER,
    fit_calibration,
    held_out,
    markdown_row,
    summarise,
)


def main() -> None:
    """Print the held-out table, its summary and the shipped constants' rows."""
    started = time.perf_counter()
    found = held_out()
    elapsed = time.perf_counter() - started
    table = Table(title="Estimate vs published MME counts, each model held out (threshold 90 %)")
    columns = ("model", "format", "instance (GPU)")
    for column in (*columns, "published", "held-out (range)", "error", "inside", "MiB/copy"):
        table.add_column(column, justify="left" if column in columns else "right")
    for h in found:
        c, p = h.comparison, h.published
        table.add_row(
            p.model,
            "PyTorch" if p.platform == "pytorch_libtorch" else f"TensorRT {p.precision}",
            f"{p.instance_type} ({p.gpu})",
            str(p.count),
            f"{c.count_point} ({c.count_low}-{c.count_high})",
            f"{h.count_error:+.0%}" + (" prior" if h.prior else ""),
            "yes" if h.inside else "NO",
            f"{p.per_copy_mib:,.0f} / {c.per_copy_mib[1]:,.0f}",
        )
    console = Console(width=160)
    console.print(table)
    for name, rows in (
        ("all", found),
        ("PyTorch", [h for h in found if h.published.platform == "pytorch_libtorch"]),
        ("TensorRT", [h for h in found if h.published.platform == "tensorrt_plan"]),
    ):
        s = summarise(rows)
        console.print(
            f"{name}: {s.rows} rows, mean |error| {s.mean_error:.1%}, max {s.max_error:.1%}, "
            f"{s.inside} inside their range"
        )
    console.print(f"{len(found)} held-out estimates (nested refits) in {elapsed:.1f} s")
    console.print("\nmarkdown (docs/estimate.md):\n" + HEADER)
    for h in found:
        console.print(markdown_row(h), markup=False)
    console.print("\nshipped constants, fitted on:")
    for name, fitted in fit_calibration().fitted_on.items():
        console.print(f"- {name}: {', '.join(fitted) or 'no row (prior)'}", markup=False)


if __name__ == "__main__":
    main()
