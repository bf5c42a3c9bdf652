"""``mmelocal capacity estimate``: a model's GPU footprint and copies per card, from the model.

Registered as a subcommand of ``mmelocal capacity`` (``capacity SOURCE`` still measures).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from mmelocal.bench.estimate.model import estimate_model
from mmelocal.cli._bench import (
    THRESHOLD_HELP,
    csv_list,
    gpus_option,
    mib,
    output_options,
    prepare_outputs,
    write_outputs,
)
from mmelocal.cli._defaults import field_option, format_option
from mmelocal.cli._options import IN_FILE
from mmelocal.cli._output import console, err_console


@click.command("estimate")
@click.argument("source")
@format_option(
    "model_format", "The artifact Triton will load (a built model folder or tarball: its own)."
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "fp16", "int8"]),
    default=None,
    help="Precision the artifact will hold [default: fp32]; int8 for TensorRT only.",
)
@click.option(
    "--instance-type",
    "instance_types",
    multiple=True,
    help="Only these instance types (repeat or comma-separate); default: every known card.",
)
@click.option("--max-batch-size", type=click.IntRange(min=0), help="Override the preset's.")
@click.option("--instance-count", type=click.IntRange(min=1), help="Override the preset's.")
@click.option(
    "--profile-max-batch",
    type=click.IntRange(min=1),
    help="TensorRT: the optimisation profile's max batch [default: max batch size].",
)
@field_option(
    estimate_model,
    "request_batch",
    type=click.IntRange(min=1),
    help="The batch your requests carry (the activations are sized for the largest of it, "
    "the warm-up and the batch-1 load).",
)
@field_option(
    estimate_model,
    "seq_len",
    type=click.IntRange(min=1),
    help="Sequence length the activations of a text model are sized for.",
)
@field_option(estimate_model, "threshold", type=float, help=THRESHOLD_HELP)
@gpus_option
@click.option(
    "--measured",
    type=IN_FILE,
    help="A capacity result (JSON) of the same model: shown beside the estimate; it wins.",
)
@output_options
def estimate(
    source: str,
    instance_types: tuple[str, ...],
    max_batch_size: int | None,
    instance_count: int | None,
    gpus_file: Path | None,
    measured: Path | None,
    json_out: Path | None,
    report_dir: Path | None,
    **options: Any,
) -> None:
    """Estimate SOURCE's GPU footprint per copy and the copies per card; no GPU, no AWS.

    SOURCE: a builder source, a built model folder, a repository of them, or a tarball.

    \b
    mmelocal capacity estimate torchvision:resnet50 --instance-type ml.g4dn.xlarge
    mmelocal capacity estimate minilm --format tensorrt --precision fp16
    mmelocal capacity estimate model.tar.gz --measured capacity.json
    mmelocal capacity estimate model.tar.gz --request-batch 8
    """
    from mmelocal.bench.capacity.projection import load_gpus
    from mmelocal.bench.estimate.model import estimate_many, measured_from_capacity

    prepare_outputs(json_out, report_dir)
    overrides = {"max_batch_size": max_batch_size, "instance_count": instance_count}
    types = [t for item in instance_types for t in csv_list(item)]
    with err_console.status(f"tracing {source}"):
        # the other options are named after estimate_model's parameters
        results = estimate_many(
            source, overrides=overrides, gpus=load_gpus(gpus_file), instance_types=types, **options
        )
    if measured is not None:
        found = measured_from_capacity(_capacity(measured))
        results = [r.with_measurement(found) for r in results]
    for result in results:
        console.print(parts_table(result))
        console.print(cards_table(result))
        for line in summary_lines(result):
            console.print(escape(line))
    write_outputs(results, json_out, report_dir, title="Capacity estimate")


def _capacity(path: Path) -> Any:
    from mmelocal.bench.results import read_results
    from mmelocal.errors import UserInputError

    found = [r for r in read_results(path) if getattr(r, "kind", "") == "capacity"]
    if not found:
        raise UserInputError(f"{path} holds no capacity result; write one with `capacity --json`")
    return found[0]


def parts_table(result: Any) -> Table:
    """One row per part: scope, low / point / high MiB, and where the numbers come from."""
    b = result.batches
    table = Table(
        title=f"Estimate of {result.source} ({result.model_format}, {result.precision}, "
        f"{result.params:,} parameters; {b.instances} instance(s); batches: load 1, warm-up "
        f"{b.warmup or 'none'}, requests {b.request}, preferred {b.preferred}, max {b.max})",
        caption=f"traced in {result.elapsed_s:.1f} s on fake tensors; no GPU used",
    )
    for column in ("part", "scope", "low MiB", "point MiB", "high MiB", "source"):
        numeric = column.endswith("MiB")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=numeric)
    for part in result.parts:
        _range_row(
            table,
            escape(part.name),
            part.scope,
            (part.low_bytes, part.point_bytes, part.high_bytes),
            escape(part.source),
        )
    _range_row(table, "[bold]one copy[/]", "per copy", result.per_copy, "")
    _range_row(table, "[bold]once[/]", "once per process", result.once, "")
    return table


def _range_row(table: Table, label: str, scope: str, span: Sequence[int], source: str) -> None:
    """A row of :func:`parts_table`: ``span`` is (low, point, high) bytes, shown in MiB."""
    low, point, high = span
    table.add_row(
        label,
        scope,
        mib(low, suffix=False),
        mib(point, suffix=False),
        mib(high, suffix=False),
        source,
    )


def cards_table(result: Any) -> Table:
    """Copies per card: the estimate's range, and the measurement's projection where it
    wins (:attr:`~mmelocal.bench.estimate.core.Estimate.measured_wins`); the count that
    sizes (:attr:`~mmelocal.bench.estimate.core.CardCount.copies`) is marked."""
    measured = result.measured_wins
    table = Table(
        title=f"Copies per card (threshold {result.threshold:.0%})",
        caption="copies = floor((threshold x card - once per process) / per copy); "
        "low from the high footprint, high from the low one; 'projected': no published run "
        "on this card checked the estimate; the bold count sizes an instance (deploy "
        "--capacity, traffic --capacity)" + ("; the measured count wins" if measured else ""),
    )
    columns = ["GPU", "GPU MiB", "instance types", "low", "point", "high", "checked"]
    for column in [*columns, *(["measured"] if measured else [])]:
        table.add_column(column, justify="left" if column in ("GPU", "instance types") else "right")
    for card in result.cards:
        row = [
            card.gpu,
            mib(card.memory_bytes, suffix=False),
            ", ".join(card.instance_types),
            str(card.low),
            str(card.point) if measured else f"[bold]{card.copies}[/]",
            str(card.high),
            "projected" if card.projected else "published runs",
        ]
        if measured:
            row.append(f"[bold green]{card.copies}[/]")
        table.add_row(*row)
    return table


def summary_lines(result: Any) -> list[str]:
    """The notes under the tables (measurement, caveats)."""
    lines = list(result.notes)
    lines.append(f"batches assumed: {result.batches.describe()}")
    if result.model_format == "tensorrt":
        lines.append(
            "TensorRT range: wider than PyTorch's because the execution context depends on the "
            "fusions TensorRT finds and the engine may keep FP32 layers under --fp16; the "
            f"context is sized for the profile's max batch {result.batches.engine_max}"
        )
    if any(p.name.startswith("cuDNN") for p in result.parts):
        lines.append(
            "the cuDNN workspace is calibrated on one published CNN (ResNet-50): for other "
            "CNNs it is the least known part; measure on a GPU"
        )
    by_batch = ", ".join(
        f"batch {b}: {mib(v, digits=1)}" for b, v in sorted(result.activation_bytes.items())
    )
    lines.append(f"activation peak (live tensors, one instance) by batch: {by_batch}")
    m = result.measured
    if m is not None:
        _, point, _ = result.per_copy
        why = m.why_not(result.model_format, result.precision)
        if m.on_gpu and why:
            lines.append(
                f"the measurement ({m.origin}) is of {why}: the footprint differs, so the "
                "estimate stands; measure the same format and precision"
            )
        elif m.on_gpu and not result.measured_wins:
            lines.append(
                f"the measurement ({m.origin}) shows no footprint per copy "
                f"({m.per_copy_bytes:,} bytes over {m.count} copies): the estimate stands; "
                "measure with warm-up, so that each copy allocates at load"
            )
        elif m.on_gpu:
            off = (point - m.per_copy_bytes) / m.per_copy_bytes
            lines.append(
                f"measured ({m.origin}, {m.probe}): {mib(m.per_copy_bytes)} per copy, "
                f"estimate {mib(point)} ({off:+.0%}); {m.count} copies measured: "
                "the measurement wins"
            )
            if not m.precision:
                lines.append(
                    f"the measurement does not record its precision (a result written before "
                    f"it was recorded, or a TensorRT plan): it wins as {result.precision}; "
                    "FP16 and FP32 footprints differ"
                )
        else:
            lines.append(
                f"the measurement ({m.origin}) read host memory ({m.probe}), not a GPU: "
                "the estimate stands for GPU cards"
            )
    lines.append(
        "for GPU numbers: `mmelocal capacity SOURCE` on a machine with an NVIDIA GPU, or "
        "`mmelocal capacity --endpoint NAME` on a deployed endpoint"
    )
    return lines


__all__ = ["cards_table", "estimate", "parts_table", "summary_lines"]
