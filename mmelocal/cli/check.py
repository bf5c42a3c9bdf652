"""``mmelocal check PATH``: load and query every model on a real Triton before deploying."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mmelocal.cli._defaults import (
    field_option,
    launcher_option,
    refuse_other_launchers_options,
    tolerance_options,
)
from mmelocal.cli._options import BareJsonCommand, json_option, tritonserver_option
from mmelocal.runtime.check import CheckOptions
from mmelocal.units import mib


@click.command(cls=BareJsonCommand)
@click.argument("path", type=click.Path(path_type=Path))
@json_option()
@launcher_option(CheckOptions)
@click.option("--url", help="Server URL for --launcher external (http://host:port).")
@tritonserver_option(
    "tritonserver binary or install folder (default: the nvidia-pytriton wheel's)."
)
@click.option(
    "--image", "docker_image", help="Docker image for --launcher docker (default: NVIDIA's Triton)."
)
@click.option(
    "--backends",
    callback=lambda _ctx, _param, text: _backend_names(text),
    help="Comma-separated backends the server has (default: python for the local binary, "
    "all for docker); models needing others run through mmelocal's Python runner.",
)
@click.option(
    "--all-loaded",
    is_flag=True,
    help="Keep every model loaded and report the memory they take together.",
)
@tolerance_options(CheckOptions)
@field_option(
    CheckOptions,
    "load_timeout_s",
    "--load-timeout",
    type=click.FloatRange(min=1),
    help="Seconds one model may take to load.",
)
@field_option(
    CheckOptions,
    "gpu_index",
    "--gpu",
    type=click.IntRange(min=0),
    help="On a GPU host: the GPU (nvidia-smi's number) the server runs on (given its UUID) "
    "and whose memory is read [default: the first GPU CUDA_VISIBLE_DEVICES names, else 0; "
    "none when it is empty].",
    show_default=False,
)
def check(path: Path, json_out: Path | None, **options: Any) -> None:
    """Validate PATH, then load, warm up, query and unload each model on a real Triton.

    PATH is a model repository, a model folder or a model.tar.gz. Exits 0 only when every
    model passes; a failing model shows Triton's own error message.
    """
    from mmelocal.cli._output import console, err_console, finish
    from mmelocal.runtime.check import check_path

    refuse_other_launchers_options(
        options["launcher"],
        {
            "--url": ("url", options["url"]),
            "--image": ("image", options["docker_image"]),
            "--tritonserver": ("tritonserver", options["tritonserver"]),
        },
    )
    # every option but --json is named after the CheckOptions field it sets
    check_options = CheckOptions(**options)
    if json_out is not None and str(json_out) == "-":  # stdout holds the JSON alone
        report = check_path(path, check_options)
    else:
        with err_console.status("checking") as status:
            report = check_path(path, check_options, progress=lambda m: status.update(m))
    finish(report, json_out, lambda report: _print_report(console, report))


def _print_report(console: Any, report: Any) -> None:
    from rich.table import Table

    warnings = [p for p in report.validation.problems if p.severity != "error"]
    for problem in warnings:
        console.print(f"[yellow]{problem.severity}[/] {problem.code}: {problem.message}")
    for error in report.errors:
        console.print(f"[bold red]error[/] {error}", highlight=False, soft_wrap=True)
    if report.models:
        table = Table(title=f"mmelocal check {report.path}", title_justify="left")
        for column in ("model", "status", "load s", "1st infer ms", "memory MiB", "reference"):
            table.add_column(column, overflow="fold")
        for m in report.models:
            style = "green" if m.status == "passed" else "bold red"
            table.add_row(
                m.name,
                f"[{style}]{m.status}[/]",
                _fmt(m.load_time_s, "{:.2f}"),
                _fmt(m.first_infer_ms, "{:.1f}"),
                mib(m.memory_bytes, suffix=False)
                + (f" ({m.memory_kind})" if m.memory_kind else ""),
                m.reference
                + (f" (max |diff| {m.max_abs_diff:.2g})" if m.max_abs_diff is not None else ""),
            )
        console.print(table)
        for m in report.models:
            for note in m.notes:
                console.print(f"[dim]{note}[/]", highlight=False, soft_wrap=True)
            for error in m.errors:
                console.print(f"[bold red]{m.name}[/]: {error}", highlight=False, soft_wrap=True)
    if report.all_loaded_memory_bytes is not None:
        console.print(
            f"all models loaded together: {mib(report.all_loaded_memory_bytes)} "
            f"({report.memory_kind}) over the server's "
            f"{mib(report.baseline_memory_bytes or 0)} baseline",
            highlight=False,
        )
    if report.server_log:
        console.print(f"[dim]server log: {report.server_log}[/]", highlight=False)
    passed = sum(m.status == "passed" for m in report.models)
    verdict = "[bold green]OK[/]" if report.ok else "[bold red]FAILED[/]"
    console.print(f"{verdict} {passed}/{len(report.models)} model(s) passed", highlight=False)


def _backend_names(text: str | None) -> frozenset[str] | None:
    """``--backends a,b`` as a set; None (the launcher's own) when absent or empty."""
    names = frozenset(b.strip() for b in (text or "").split(",") if b.strip())
    return names or None


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)
