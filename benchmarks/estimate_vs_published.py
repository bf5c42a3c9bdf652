"""The capacity estimate beside every published per-card MME count (no GPU, no AWS).

For each run recorded in ``mmelocal/bench/estimate/published.py`` (AWS sample
sagemaker-mme-gpu-benchmarking, ml.g4dn.2xlarge = T4 and ml.p3.2xlarge = V100), the same
model is rebuilt with random weights on the meta device, traced the way the published run
used it, and its copies per card computed on the card total the run reported. Prints one
table (the one in docs/estimate.md): published count, estimated count (point and range),
the count error, and the per-copy footprint published (slope of the curve) and estimated.
PyTorch counts should be within 15 %; TensorRT counts inside the range.

Run: ``.venv/bin/python benchmarks/estimate_vs_published.py``
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from mmelocal.bench.estimate.calibration import compare_published


def main() -> None:
    """Print the comparison table and how long the estimates took."""
    started = time.perf_counter()
    found = compare_published()
    elapsed = time.perf_counter() - started
    table = Table(title="Estimate vs published MME counts (threshold 90 %)")
    columns = ("model", "format", "instance (GPU)", "published", "estimate (range)", "error")
    for column in (*columns, "MiB/copy published", "MiB/copy estimate (range)", "holds"):
        table.add_column(column, justify="left" if column in columns[:3] else "right")
    for c in found:
        p = c.published
        low, point, high = c.per_copy_mib
        pytorch = p.platform == "pytorch_libtorch"
        holds = abs(c.count_error) <= 0.15 if pytorch else c.in_range
        table.add_row(
            p.model,
            "PyTorch" if pytorch else f"TensorRT {p.precision}",
            f"{p.instance_type} ({p.gpu})",
            str(p.count),
            f"{c.count_point} ({c.count_low}-{c.count_high})",
            f"{c.count_error:+.0%}",
            f"{p.per_copy_mib:,.0f}",
            f"{point:,.0f} ({low:,.0f}-{high:,.0f})",
            "yes" if holds else "NO",
        )
    console = Console(width=160)
    console.print(table)
    console.print(
        f"{len(found)} estimates in {elapsed:.1f} s (models traced on fake tensors; "
        "holds: PyTorch within 15 %, TensorRT inside the range)"
    )


if __name__ == "__main__":
    main()
