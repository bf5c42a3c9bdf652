"""Shared printing and parsing for the bench commands (capacity, loadtest, sweep, report)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mmelocal.bench.capacity.loop import CapacityOptions
from mmelocal.bench.loadtest.runner import LoadTestConfig
from mmelocal.bench.sweep.runner import SweepOptions
from mmelocal.cli._defaults import field_option
from mmelocal.cli._options import (
    IN_FILE,
    OUT_DIR,
    json_option,
    memory_budget_option,
    stacked,
)
from mmelocal.cli._output import console, err_console, print_json
from mmelocal.units import mib

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")


def parse_duration_s(text: str) -> float:
    """``"90"``, ``"90s"``, ``"5m"``, ``"1h"`` -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise click.BadParameter(f"expected a duration like 90s, 5m or 1h, got {text!r}")
    value = float(match.group(1))
    unit = match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}[unit]


def csv_list(text: str) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``."""
    return [item.strip() for item in text.split(",") if item.strip()]


def ms(value: float | None) -> str:
    """Milliseconds text ('-' for None)."""
    return "-" if value is None else f"{value:,.1f}"


def steps_table(result: Any, *, title: str = "Load test") -> Table:
    """One row per load-test step (latencies in ms)."""
    table = Table(title=f"{title} (latency in ms)")
    for column in ("step", "users", "req/s", "avg", "p50", "p95", "p99", "ok", "failed"):
        table.add_column(column, justify="left" if column == "step" else "right", no_wrap=True)
    for index, step in enumerate(result.steps, start=1):
        table.add_row(
            str(index) if step.name == f"{step.target_users} users" else step.name,
            str(step.users),
            f"{step.throughput_rps:,.0f}",
            ms(step.avg_latency_ms),
            ms(step.p50_latency_ms),
            ms(step.p95_latency_ms),
            ms(step.p99_latency_ms),
            str(step.successes),
            f"[red]{step.failures}[/]" if step.failures else "0",
        )
    return table


def projection_table(projection: Any) -> Table:
    """One row per (GPU, instance type)."""
    table = Table(
        title=f"Projected models (threshold {projection.threshold:.0%}, "
        f"baseline {mib(projection.baseline_bytes, digits=1)}, per model "
        f"{mib(projection.per_model_bytes, digits=1)})",
        caption="per GPU = floor((threshold x GPU MiB - baseline) / per model); "
        "GPU MiB as NVML reports it (gpus.yaml, --gpus FILE)",
    )
    for column in ("GPU", "GPU MiB", "instance type", "GPUs", "per GPU", "per instance"):
        numeric = column not in ("GPU", "instance type")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    for row in projection.rows:
        table.add_row(
            row.gpu,
            mib(row.memory_bytes, suffix=False),
            row.instance_type or "-",
            str(row.gpus_per_instance),
            str(row.models_per_gpu),
            str(row.models_per_instance),
        )
    return table


def copy_line(record: Any, *, timing: str = "load") -> str:
    """One copy of the capacity loop as both capacity commands print it (``timing`` names
    what ``load_s`` measured: a local load, or an endpoint's first invocation)."""
    own = "" if record.marginal_bytes is None else f", own {mib(record.marginal_bytes, digits=1)}"
    return (
        f"  copy {record.copies:>3}: {mib(record.used_bytes, digits=1)} in use "
        f"(+{mib(record.delta_bytes, digits=1)}{own}), {timing} {record.load_s:.2f} s"
    )


@contextmanager
def loadtest_progress(enabled: bool = True) -> Iterator[Callable[[Any], None]]:
    """A live progress bar; yields the callback :func:`run_loadtest` calls with samples."""
    if not enabled or not err_console.is_terminal:
        yield lambda _sample: None
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    with progress:
        task = progress.add_task("load test", total=1.0, status="starting")

        def update(sample: Any) -> None:
            progress.update(
                task,
                total=sample.duration_s,
                completed=min(sample.elapsed_s, sample.duration_s),
                description=f"{sample.stage_name}",
                status=(
                    (f"{sample.workers} workers  " if sample.workers > 1 else "")
                    + f"{sample.users} users  {sample.rps:,.0f} req/s  "
                    f"{sample.requests} requests  {sample.failures} failed"
                ),
            )

        yield update


F = TypeVar("F", bound=Callable[..., Any])

#: ``--report DIR`` and ``--json OUT``: where every bench command writes its results
output_options = stacked(
    json_option(),
    click.option(
        "--report",
        "report_dir",
        type=OUT_DIR,
        help="Write the HTML report (PNG plots inside), CSV and JSON into this folder.",
    ),
)

#: the request body's content type (capacity, loadtest, benchmark)
content_type_option = field_option(
    LoadTestConfig, "content_type", help="Content-Type of the request body."
)

#: the user's GPU table (capacity, capacity project, capacity estimate)
gpus_option = click.option(
    "--gpus",
    "gpus_file",
    type=IN_FILE,
    help="Your GPU table (YAML, as the packaged gpus.yaml): adds or replaces cards.",
)

#: the user's price table (sweep, benchmark)
prices_option = click.option(
    "--prices",
    "prices_file",
    type=IN_FILE,
    help="Your hourly prices (YAML, same format as the packaged prices.yaml).",
)


#: ``--threshold``'s help wherever it is the capacity loop's or a projection's
THRESHOLD_HELP = "Fraction of the total the loaded copies may use."


def threshold_option(help: str = THRESHOLD_HELP) -> Callable[[F], F]:
    """``--threshold``: the fraction of memory the loaded copies may use (the platform's)."""
    return field_option(CapacityOptions, "threshold", type=float, help=help)


def copy_loop_options(*, memory_budget_help: str) -> Callable[[F], F]:
    """The capacity loop's limits (``capacity`` and ``benchmark``): ``--threshold``,
    ``--max-copies``, ``--memory-budget`` (bytes), ``--no-verify-next``."""
    return stacked(
        threshold_option(),
        field_option(
            CapacityOptions,
            "max_copies",
            type=click.IntRange(min=1),
            help="Stop after this many copies even if more would fit.",
        ),
        memory_budget_option(memory_budget_help),
        click.option(
            "--no-verify-next",
            is_flag=True,
            help="Stop when the next copy is predicted to cross (the published loop); never "
            "load over the threshold.",
        ),
    )


L = TypeVar("L")


def loop_limits(cls: Callable[..., L], params: Mapping[str, Any]) -> L:
    """The loop's limits as ``cls`` (:class:`CapacityOptions`, or an endpoint's
    ``RemoteCapacityOptions``) from the values :func:`copy_loop_options` gave."""
    return cls(
        threshold=params["threshold"],
        max_copies=params["max_copies"],
        memory_budget_bytes=params["memory_budget"],
        verify_next=not params["no_verify_next"],
    )


def _csv(values: Iterable[Any]) -> str:
    return ",".join(str(value) for value in values)


#: the sweep's default grid (the options spell it as text)
_GRID = SweepOptions()

#: the sweep's grid and judgement (``sweep`` and ``benchmark``), parsed by ``sweep_options``
sweep_grid_options = stacked(
    click.option(
        "--dynamic-batching",
        "dynamic_batching",
        default=_csv("on" if on else "off" for on in _GRID.dynamic_batching),
        show_default=True,
        help="Dynamic batching settings to try (off, on).",
    ),
    click.option(
        "--instances",
        default=_csv(_GRID.instances),
        show_default=True,
        help="instance_group counts to try.",
    ),
    click.option(
        "--users",
        default=_csv(stage.users for stage in _GRID.shape.stages),
        show_default=True,
        help="User counts of the sweep's load test steps.",
    ),
    click.option(
        "--step-duration",
        default=f"{_GRID.shape.stages[0].duration_s:g}s",
        show_default=True,
        help="How long each user step lasts.",
    ),
    field_option(
        SweepOptions,
        "target_rps",
        type=float,
        help="Requests per second the endpoint must serve (sizes the instance count).",
    ),
    field_option(
        SweepOptions,
        "max_latency_ms",
        type=float,
        help="p99 latency limit a configuration must keep.",
    ),
)


def write_outputs(
    results: list[Any], json_out: Path | None, report_dir: Path | None, *, title: str
) -> None:
    """Write the result JSON and the report where the user asked, and say where."""
    if json_out is not None and str(json_out) == "-":
        print_json(results[0].to_dict() if len(results) == 1 else [r.to_dict() for r in results])
    elif json_out is not None:
        from mmelocal.bench.results import write_results

        console.print(f"JSON: {write_results(results, json_out)}")
    if report_dir is not None:
        from mmelocal.bench.report.page import write_report

        console.print(f"report: {write_report(results, report_dir, title=title).html}")


def prepare_outputs(json_out: Path | None, report_dir: Path | None) -> None:
    """Create the folders results go to before a long run, so a bad path fails at once."""
    from mmelocal.bench.results import output_dir

    if json_out is not None and str(json_out) != "-":
        output_dir(json_out.parent)
    if report_dir is not None:
        output_dir(report_dir)


def announce_files(label: str, paths: list[Path]) -> None:
    """Print where result files went."""
    for path in paths:
        console.print(f"{label}: {path}")


__all__ = [
    "THRESHOLD_HELP",
    "announce_files",
    "content_type_option",
    "copy_line",
    "copy_loop_options",
    "csv_list",
    "loadtest_progress",
    "loop_limits",
    "mib",
    "ms",
    "output_options",
    "parse_duration_s",
    "prepare_outputs",
    "prices_option",
    "projection_table",
    "steps_table",
    "sweep_grid_options",
    "threshold_option",
    "write_outputs",
]
