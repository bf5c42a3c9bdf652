"""The capacity estimate on every published per-card MME count, leave one model out.

For each model recorded in ``mmelocal/bench/estimate/published.py`` (AWS sample
sagemaker-mme-gpu-benchmarking, ml.g4dn.2xlarge = T4 and ml.p3.2xlarge = V100), every
calibrated constant is refit on the other models' rows only, and the model's rows are
estimated with those constants (:func:`mmelocal.bench.estimate.holdout.held_out`): the errors are
errors on models the estimate was not fitted to. Prints the table (and its markdown, the one
in docs/estimate.md), the mean and max absolute count errors, and the shipped constants with
the rows each is fitted on.

Then the checks measured on a GPU (:mod:`mmelocal.bench.estimate.gpu_checks`, the H200
proof): each model's copy less a tiny BERT's (the per-process overhead of the serving path
used there), against the estimate's difference of the same two models.

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


def gpu_check_rows() -> list[str]:
    """The markdown rows of the H200 check table in docs/estimate.md."""
    import tempfile
    from pathlib import Path

    from transformers import BertConfig

    from mmelocal.bench.estimate.gpu_checks import H200_CHECKS, TINY_BERT_H200
    from mmelocal.bench.estimate.model import estimate_model
    from mmelocal.testing.tiny_bert import save_tiny_bert
    from mmelocal.units import MiB

    rows = []
    with tempfile.TemporaryDirectory(prefix="estimate-gpu-checks-") as tmp:
        BertConfig().save_pretrained(Path(tmp) / "bert-base")
        specs = {
            "torchvision:resnet50": "torchvision:resnet50",
            "bert-base": str(Path(tmp) / "bert-base"),
            "tiny-bert": str(save_tiny_bert(Path(tmp) / "tiny-bert", tokenizer=False)),
        }
        per_copy = {
            spec: [
                b / MiB for b in estimate_model(path, instance_types=["ml.g4dn.xlarge"]).per_copy
            ]
            for spec, path in specs.items()
        }
    tiny_low, tiny_point, tiny_high = per_copy[TINY_BERT_H200.spec]
    for check in H200_CHECKS:
        low, point, high = per_copy[check.spec]
        measured = check.marginal_mib - TINY_BERT_H200.marginal_mib
        diff = point - tiny_point
        rows.append(
            f"| {check.model} | {check.marginal_mib:,.0f} | {measured:,.0f} "
            f"| {diff:,.0f} ({low - tiny_high:,.0f}-{high - tiny_low:,.0f}) "
            f"| {(diff - measured) / measured:+.1%} | {point:,.0f} "
            f"| {(point - measured) / measured:+.1%} |"
        )
    return rows


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
    console.print("\nH200 checks (docs/estimate.md, 'On a GPU'):")
    for row in gpu_check_rows():
        console.print(row, markup=False)
    console.print("\nshipped constants, fitted on:")
    for name, fitted in fit_calibration().fitted_on.items():
        console.print(f"- {name}: {', '.join(fitted) or 'no row (prior)'}", markup=False)


if __name__ == "__main__":
    main()
