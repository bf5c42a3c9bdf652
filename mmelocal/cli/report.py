"""``mmelocal report``: one HTML page with plots (plus CSV and JSON) from result files."""

from __future__ import annotations

from pathlib import Path

import click

from mmelocal.cli._output import console


@click.command()
@click.argument(
    "results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for index.html, the PNG plots, CSV and results.json; a report written "
    "there again removes the earlier report's files it does not rewrite (others stay).",
)
@click.option(
    "--title", default="mmelocal report", show_default=True, help="Title of the report page."
)
def report(results: tuple[Path, ...], out_dir: Path, title: str) -> None:
    """Lay out capacity, estimate, load-test, projection, sweep and benchmark RESULTS (JSON
    files) as a report; benchmark results (mmelocal benchmark) open it with their comparison
    table."""
    from mmelocal.bench.report.page import write_report
    from mmelocal.bench.results import read_results

    loaded = [item for path in results for item in read_results(path)]
    files = write_report(loaded, out_dir, title=title)
    console.print(f"report: {files.html}")
    console.print(f"{len(files.png)} plots, {len(files.csv)} CSV files, JSON: {files.json}")
