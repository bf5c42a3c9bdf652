"""``mmelocal package MODEL_DIR --out DIR``: model.tar.gz, or N copies for capacity tests."""

from __future__ import annotations

from pathlib import Path

import click

from mmelocal.builder.package import MAX_COPIES, package_copies
from mmelocal.cli._defaults import field_option


@click.command()
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Folder for the tarball(s).",
)
@click.option(
    "--copies",
    type=click.IntRange(min=1, max=MAX_COPIES),
    default=None,
    help="Write N copies {prefix}{i}.tar.gz (hard links: about one copy on disk).",
)
@field_option(package_copies, "prefix", help="File name prefix of copies.")
@click.option(
    "--validate/--no-validate",
    "check",
    default=True,
    show_default=True,
    help="Validate the model first and refuse to package a broken one (without it the "
    "packager still refuses a config it cannot parse or a layout SageMaker cannot serve).",
)
def package(model_dir: Path, out_dir: Path, copies: int | None, prefix: str, check: bool) -> None:
    """Package MODEL_DIR for an MME: a model folder, an ensemble with its steps, or a
    model.tar.gz in any layout SageMaker serves (re-packed in the seed layout; with
    --copies, copied as it is)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.table import Table

    from mmelocal.builder.package import disk_usage_bytes, package_model
    from mmelocal.cli._output import console, fail

    if not model_dir.exists():
        fail(f"model folder not found: {model_dir}")
    if check:
        from mmelocal.builder.validate import validate_path

        report = validate_path(model_dir)
        if not report.ok:
            for p in report.errors:
                console.print(f"[bold red]{p.code}[/] {p.path}: {p.message}", highlight=False)
            fail(_refusal(model_dir, len(report.errors), copies is not None), code=1)
    methods: dict[str, int] = {}
    if copies is None:
        with console.status(f"packaging {model_dir}"):
            paths = [package_model(model_dir, out_dir)]
        methods["packaged"] = 1
    else:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("copies", total=copies)

            def on_copy(index: int, path: Path, method: str) -> None:
                methods[method] = methods.get(method, 0) + 1
                progress.advance(task)

            paths = package_copies(
                model_dir, out_dir, copies=copies, prefix=prefix, on_copy=on_copy
            )
    table = Table(title=f"packaged {model_dir}", title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("files", str(len(paths)))
    table.add_row("first", str(paths[0]))
    table.add_row("last", str(paths[-1]))
    table.add_row("method", ", ".join(f"{k} x{v}" for k, v in sorted(methods.items())))
    table.add_row("tarball bytes", f"{paths[0].stat().st_size:,}")
    table.add_row("bytes on disk", f"{disk_usage_bytes(paths):,}")
    console.print(table)


def _refusal(model_dir: Path, count: int, copies: bool) -> str:
    """The line for a model that failed validation: what will get it packaged (the packager
    parses every config itself, so --no-validate helps only where the packager would
    accept the model)."""
    from mmelocal.builder.package import packaging_problem

    head = f"{model_dir} has {count} problem(s)"
    if packaging_problem(model_dir, copies=copies) is None:
        return f"{head}; fix them, or pass --no-validate to package it as it is"
    return f"{head}; fix them: the packager cannot read it either, so --no-validate would not help"
