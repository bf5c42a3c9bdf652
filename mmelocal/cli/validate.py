"""``mmelocal validate PATH``: check a repository, model folder or model.tar.gz."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mmelocal.builder.validate import validate_path
from mmelocal.cli._defaults import default_of, field_option
from mmelocal.cli._options import BareJsonCommand, json_option
from mmelocal.cli._output import env_option, size_option
from mmelocal.units import GiB

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


@click.command(cls=BareJsonCommand)
@click.argument("path", type=click.Path(path_type=Path))
@json_option()
@field_option(
    validate_path,
    "max_members",
    type=click.IntRange(min=1),
    help="Refuse tarballs with more members.",
)
@click.option(
    "--max-unpacked-bytes",
    "max_unpacked_bytes",
    type=str,
    callback=size_option,
    default=f"{default_of(validate_path, 'max_unpacked_bytes') / GiB:g}GiB",
    show_default=True,
    help="Refuse tarballs that unpack to more (a size, e.g. 500MB).",
)
@click.option(
    "--env",
    "env",
    multiple=True,
    callback=env_option,
    help="KEY=VALUE of the endpoint's Environment, as for serve/deploy --env (repeatable); "
    "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING=false makes shared step names collide.",
)
def validate(
    path: Path,
    json_out: Path | None,
    max_members: int,
    max_unpacked_bytes: int,
    env: dict[str, str],
) -> None:
    """Validate PATH (a model repository, a model folder, a model.tar.gz or a folder of them).

    Exits 0 only when no error is found (warnings are allowed).
    """
    import logging

    from mmelocal.cli._output import finish
    from mmelocal.runtime.entrypoint import check_sagemaker_env, model_namespacing

    for warning in check_sagemaker_env(env):
        logging.getLogger("mmelocal.cli").warning("%s", warning)
    report = validate_path(
        path,
        max_members=max_members,
        max_unpacked_bytes=max_unpacked_bytes,
        model_namespacing=model_namespacing(env),
    )
    finish(report, json_out, lambda report: _print_report(report, path))


def _print_report(report: Any, path: Path) -> None:
    from rich.table import Table

    from mmelocal.cli._output import console

    if report.problems:
        table = Table(title=f"{report.kind} {path}", title_justify="left")
        for column in ("severity", "code", "where", "problem"):
            table.add_column(column, overflow="fold")
        for p in report.problems:
            style = _STYLE.get(p.severity, "")
            table.add_row(f"[{style}]{p.severity}[/]", p.code, p.path, p.message)
        console.print(table)
    models = ", ".join(report.models) or "none"
    if report.ok:
        console.print(f"[bold green]OK[/] {report.kind} {path} (models: {models})")
    else:
        first = report.errors[0]
        console.print(
            f"[bold red]FAILED[/] {len(report.errors)} error(s): {first.code}: {first.message}",
            highlight=False,
            soft_wrap=True,
        )
