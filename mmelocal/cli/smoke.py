"""``mmelocal smoke``: a deployed endpoint's answers against the build's reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mmelocal.cli._defaults import field_option, tolerance_options
from mmelocal.cli._options import BareJsonCommand, json_option, region_option
from mmelocal.cli._output import console, err_console, finish
from mmelocal.deploy.smoke import smoke_endpoint


@click.command(cls=BareJsonCommand)
@click.argument("name")
@region_option()
@field_option(
    smoke_endpoint,
    "models",
    type=click.IntRange(min=1),
    help="How many of the endpoint's tarballs to invoke (the first by name).",
)
@tolerance_options(smoke_endpoint)
@json_option()
def smoke(
    name: str, region: str | None, models: int, atol: float, rtol: float, json_out: Path | None
) -> None:
    """Invoke MODELS tarballs of endpoint NAME; answers must equal the build's reference."""
    from mmelocal.aws.session import connect

    clients = connect(region)
    with err_console.status(f"smoke test of {name}"):
        report = smoke_endpoint(clients, name, models=models, atol=atol, rtol=rtol)
    finish(report, json_out, _print_smoke)


def _print_smoke(report: Any) -> None:
    from rich.table import Table

    table = Table(title=f"smoke {report.endpoint_name}", title_justify="left")
    for column in ("TargetModel", "result", "latency ms", "max |diff|", "problems"):
        table.add_column(column, overflow="fold")
    for r in report.results:
        table.add_row(
            r.target,
            "[green]= reference[/]" if r.ok else "[bold red]FAILED[/]",
            "-" if r.latency_ms is None else f"{r.latency_ms:,.1f}",
            "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.2g}",
            "; ".join(r.problems),
        )
    console.print(table)
