"""``mmelocal sweep``: format x dynamic batching x instance count, measured and priced."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from mmelocal.bench.sweep.runner import SweepOptions
from mmelocal.cli._bench import (
    csv_list,
    gpus_option,
    ms,
    output_options,
    parse_duration_s,
    prepare_outputs,
    prices_option,
    sweep_grid_options,
    write_outputs,
)
from mmelocal.cli._defaults import default_of, field_option
from mmelocal.cli._loadgen import generators_from, loadgen_options
from mmelocal.cli._output import console, err_console
from mmelocal.cli._remote import (
    endpoint_option,
    refuse_without_endpoint,
    region_option,
    s3_uri_option,
)

_ON_OFF = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}


def _on_off(text: str) -> tuple[bool, ...]:
    try:
        return tuple(_ON_OFF[item.lower()] for item in csv_list(text))
    except KeyError as exc:
        raise click.BadParameter(f"expected on/off values, got {exc.args[0]!r}") from None


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(item) for item in csv_list(text))
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None


def sweep_options(
    params: Mapping[str, Any], *, formats: str | None = None, verify: bool = True
) -> SweepOptions:
    """The ``SweepOptions`` of a command's ``params``: the options :data:`sweep_grid_options`
    adds, ``instance_type`` and ``prices_file`` (as typed; other keys are ignored);
    ``formats`` comma-separated (default: SweepOptions')."""
    from mmelocal.bench.sweep.runner import users_shape

    chosen = default_of(SweepOptions, "formats") if formats is None else tuple(csv_list(formats))
    return SweepOptions(
        formats=chosen,
        dynamic_batching=_on_off(params["dynamic_batching"]),
        instances=_ints(params["instances"]),
        shape=users_shape(_ints(params["users"]), step_s=parse_duration_s(params["step_duration"])),
        target_rps=params["target_rps"],
        max_latency_ms=params["max_latency_ms"],
        instance_type=params["instance_type"],
        prices_file=params["prices_file"],
        gpus_file=params.get("gpus_file"),
        gpu_indices=params.get("gpu_indices"),
        verify=verify,
        generators=generators_from(params),
    )


@click.command()
@click.argument("source")
@click.option(
    "--formats",
    default=",".join(default_of(SweepOptions, "formats")),
    show_default=True,
    help="Comma-separated: torchscript, onnx, tensorrt.",
)
@sweep_grid_options
@field_option(
    SweepOptions,
    "instance_type",
    help="Instance type whose GPUs, price and instance count the recommendation is for.",
)
@prices_option
@gpus_option
@click.option(
    "--gpu",
    "gpu_indices",
    callback=lambda _ctx, _param, text: None if text is None else _ints(text),
    help="Comma-separated GPUs to sweep on, by nvidia-smi's number (e.g. 0 to size a "
    "1-GPU instance type on a 4-GPU machine); default: those CUDA_VISIBLE_DEVICES names, "
    "else every GPU. The server runs on exactly these.",
)
@click.option("--no-verify", is_flag=True, help="Skip output verification when building.")
@endpoint_option
@s3_uri_option
@region_option
@loadgen_options
@output_options
def sweep(
    source: str,
    formats: str,
    no_verify: bool,
    endpoint_name: str | None,
    s3_uri: str | None,
    region: str | None,
    json_out: Path | None,
    report_dir: Path | None,
    **params: Any,
) -> None:
    """Build, serve and load-test every configuration of SOURCE; recommend one.

    With --endpoint NAME the configurations are TargetModels of that deployed multi-model
    endpoint (its instance type replaces --instance-type): no redeploy per configuration.
    On a machine with NVIDIA GPUs the sweep runs here only when the GPUs it runs on (--gpu,
    else CUDA_VISIBLE_DEVICES, else all) are --instance-type's cards, as many as it has (the
    card table: gpus.yaml, or --gpus FILE).
    """
    from mmelocal.bench.sweep.runner import run_sweep

    refuse_without_endpoint(endpoint_name, {"--s3-uri": s3_uri, "--region": region})
    if endpoint_name is not None and params.get("gpu_indices") is not None:
        raise click.UsageError(
            "--gpu chooses this machine's GPUs for a local sweep; a sweep of --endpoint runs "
            "on the endpoint's instances: drop --gpu"
        )
    options = sweep_options(params, formats=formats, verify=not no_verify)
    prepare_outputs(json_out, report_dir)
    with err_console.status("sweep starting") as status:
        if endpoint_name is not None:
            from mmelocal.cli._remote import sweep_on_endpoint

            result = sweep_on_endpoint(source, endpoint_name, s3_uri, region, options, status)
        else:
            result = run_sweep(source, options=options, progress=lambda m: status.update(m))
    console.print(_table(result))
    for note in result.notes():
        console.print(f"[yellow]{escape(note)}[/]")
    label = "CPU run, no GPU sizing" if result.relative_only else "Recommendation"
    console.print(f"[bold]{label}:[/] {escape(result.recommendation)}")
    console.print(f"[dim]{escape(result.price_note)}[/]")
    write_outputs([result], json_out, report_dir, title="Sweep")
    if not any(row.status == "ok" for row in result.rows):
        err_console.print("[bold red]no configuration could be measured[/] (see the notes above)")
        raise SystemExit(1)


def _table(result: Any) -> Table:
    where = (
        f"this CPU host (not {result.instance_type} figures)"
        if result.relative_only
        else result.instance_type
    )
    rate = (
        "invocations per minute on this CPU host"
        if result.relative_only
        else "invocations per minute per instance"
    )
    table = Table(
        title=f"Sweep of {result.source}: target {result.target_rps:g} req/s, "
        f"p99 <= {result.max_latency_ms:g} ms, {where}",
        caption=f"inv/min: {rate} at the chosen load; "
        "triton ms: Triton's own mean time per request over the test; inst.: instances needed; "
        "notes below the table",
    )
    columns: tuple[str, ...] = (
        "config",
        "inv/min",
        "users",
        "p50 ms",
        "p99 ms",
        "triton ms",
        "inst.",
        f"{result.currency}/h",
    )
    for column in columns:
        table.add_column(
            column, justify="left" if column == "config" else "right", no_wrap=column == "config"
        )
    for row in result.rows:
        cells = [
            row.name,
            "-" if row.invocations_per_minute is None else f"{row.invocations_per_minute:,.0f}",
            "-" if row.users_at_load is None else str(row.users_at_load),
            ms(row.p50_latency_ms),
            ms(row.p99_latency_ms),
            ms(row.model_latency_ms),
            "-" if row.instances_needed is None else str(row.instances_needed),
            "-" if row.cost_per_hour is None else f"{row.cost_per_hour:,.2f}",
        ]
        if row.status != "ok":
            cells[1:] = [f"[yellow]{row.status}[/]", *["" for _ in cells[2:]]]
        table.add_row(*cells)
    return table
