"""``mmelocal capacity``: how many copies of a model fit, and the projection to other GPUs.

``mmelocal capacity SOURCE_OR_TARBALL ...`` measures (the ``measure`` subcommand is implied);
``mmelocal capacity project --per-model-mib X --baseline-mib Y`` projects typed-in numbers;
``mmelocal capacity estimate SOURCE`` estimates from the model (:mod:`mmelocal.cli.estimate`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from mmelocal.bench.capacity.loop import CapacityOptions, measure_capacity
from mmelocal.cli._bench import (
    content_type_option,
    copy_line,
    copy_loop_options,
    csv_list,
    gpus_option,
    loop_limits,
    output_options,
    prepare_outputs,
    projection_table,
    threshold_option,
    write_outputs,
)
from mmelocal.cli._defaults import default_of
from mmelocal.cli._options import payload_option
from mmelocal.cli._output import console
from mmelocal.cli._remote import (
    endpoint_option,
    refuse_without_endpoint,
    region_option,
    s3_uri_option,
)
from mmelocal.units import MiB, mib


class _DefaultToMeasure(click.Group):
    """A group whose first argument, when it is not a subcommand, goes to ``measure``."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["measure", *args]
        return super().resolve_command(ctx, args)


@click.group(cls=_DefaultToMeasure)
def capacity() -> None:
    """How many copies of a model fit (SOURCE_OR_TARBALL), or `project` typed-in numbers.

    \b
    mmelocal capacity model.tar.gz --memory-budget 4GiB --report out/
    mmelocal capacity minilm --format torchscript,onnx --memory-budget 6GiB
    mmelocal capacity model.tar.gz --endpoint my-mme   (on a deployed endpoint)
    mmelocal capacity project --per-model-mib 420 --baseline-mib 300
    mmelocal capacity estimate torchvision:resnet50 --instance-type ml.g4dn.xlarge
    """


@capacity.command()
@click.argument("source")
@copy_loop_options(
    memory_budget_help="Total to measure against on CPU (summed PSS of the Triton tree), e.g. 4GiB."
)
@click.option(
    "--format",
    "formats",
    default=default_of(measure_capacity, "model_format"),
    show_default=True,
    help="Comma-separated formats to build and measure (for a source, not a tarball).",
)
@gpus_option
@payload_option(
    "Warm-up request body sent after each load (default: from the model's sample inputs)."
)
@content_type_option
@endpoint_option
@s3_uri_option
@region_option
@click.option("--keep-copies", is_flag=True, help="With --endpoint: leave the S3 copies.")
@output_options
def measure(
    source: str,
    formats: str,
    gpus_file: Path | None,
    payload: Path | None,
    content_type: str,
    endpoint_name: str | None,
    s3_uri: str | None,
    region: str | None,
    keep_copies: bool,
    json_out: Path | None,
    report_dir: Path | None,
    **limits: Any,
) -> None:
    """Load copy after copy of SOURCE through the emulator and read memory after each
    (with --endpoint: on a deployed endpoint, through its probe model)."""
    refuse_without_endpoint(
        endpoint_name, {"--s3-uri": s3_uri, "--region": region, "--keep-copies": keep_copies}
    )
    if endpoint_name is not None:
        from mmelocal.bench.endpoint.capacity import RemoteCapacityOptions
        from mmelocal.cli._remote import capacity_on_endpoint

        if len(csv_list(formats)) > 1:
            raise click.BadParameter(
                "one format per endpoint: a count needs a GPU no other model filled; run "
                "once per format on its own endpoint, or use 'mmelocal benchmark'",
                param_hint="--format",
            )
        prepare_outputs(json_out, report_dir)
        capacity_on_endpoint(
            source, endpoint_name=endpoint_name, s3_uri=s3_uri, region=region,
            model_format=csv_list(formats)[0], limits=loop_limits(RemoteCapacityOptions, limits),
            keep_copies=keep_copies, gpus_file=gpus_file,
            payload=payload.read_bytes() if payload is not None else None,
            content_type=content_type, json_out=json_out, report_dir=report_dir,
        )  # fmt: skip
        return
    from mmelocal.bench.capacity.projection import load_gpus
    from mmelocal.bench.sources import check_format, is_prebuilt

    options = loop_limits(CapacityOptions, limits)
    prepare_outputs(json_out, report_dir)
    fmt_list = ["prebuilt"] if is_prebuilt(source) else [check_format(f) for f in csv_list(formats)]
    results: list[Any] = []
    for fmt in fmt_list:
        console.print(f"[bold]capacity of {source}[/] ({fmt})")

        def show(record: Any) -> None:
            console.print(copy_line(record))

        result = measure_capacity(
            source,
            options=options,
            model_format=fmt if fmt != "prebuilt" else "torchscript",
            progress=show,
            payload=payload.read_bytes() if payload is not None else None,
            content_type=content_type,
            gpus=load_gpus(gpus_file),
        )
        results.append(result)
        for line in result.summary_lines():
            console.print(line, markup=False)
        if result.projection is not None:
            console.print(projection_table(result.projection))
    if len(results) > 1:
        console.print(_formats_table(results))
    write_outputs(results, json_out, report_dir, title="Capacity")


@capacity.command("project")
@click.option(
    "--per-model-mib",
    type=click.FloatRange(min=0, min_open=True),
    required=True,
    help="Memory one copy adds (MiB).",
)
@click.option(
    "--baseline-mib",
    type=click.FloatRange(min=0),
    required=True,
    help="Memory in use with no model loaded (MiB).",
)
@threshold_option()
@gpus_option
@output_options
def project_command(
    per_model_mib: float,
    baseline_mib: float,
    threshold: float,
    gpus_file: Path | None,
    json_out: Path | None,
    report_dir: Path | None,
) -> None:
    """Models per GPU on the usual cards: floor((threshold x total - baseline) / per model)."""
    from mmelocal.bench.capacity.projection import load_gpus, project

    projection = project(
        per_model_bytes=per_model_mib * MiB,
        baseline_bytes=int(baseline_mib * MiB),
        threshold=threshold,
        gpus=load_gpus(gpus_file),
    )
    console.print(projection_table(projection))
    write_outputs([projection], json_out, report_dir, title="Projection")


def _formats_table(results: list[Any]) -> Table:
    table = Table(title="Per format")
    columns = ("format", "copies", "baseline MiB", "per model MiB", "± MiB")
    for column in (*columns, "copy MiB", "runtime once MiB", "load s"):
        table.add_column(column, justify="left" if column == "format" else "right")
    for result in results:
        loads = [load.load_s for load in result.loads]
        table.add_row(
            result.model_format,
            str(result.count),
            mib(result.baseline_bytes, digits=1, suffix=False),
            mib(result.per_model_mean_bytes, digits=1, suffix=False),
            mib(result.per_model_stdev_bytes, digits=1, suffix=False),
            mib(result.marginal_mean_bytes, digits=1, suffix=False),
            mib(result.shared_runtime_bytes, digits=1, suffix=False),
            f"{sum(loads) / len(loads):.2f}" if loads else "-",
        )
    return table


def _register_estimate() -> None:
    from mmelocal.cli.estimate import estimate

    capacity.add_command(estimate)


_register_estimate()
