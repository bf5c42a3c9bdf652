"""What several ``mmelocal traffic`` commands share: the options (trace, prices, disks,
loads at once, concurrency, outputs), the progress bar and how a result is printed and
written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import click

from mmelocal.cli._defaults import field_option
from mmelocal.cli._options import IN_FILE, OUT_FILE, grouped, json_option, stacked
from mmelocal.cli._output import console, err_console, print_json, size_option
from mmelocal.errors import UserInputError
from mmelocal.traffic.simulate import LoadTimes, SimConfig
from mmelocal.units import MiB

_Decorator = Callable[[Any], Any]


class _Update(Protocol):
    def __call__(self, done: int, total: int, sent: int | None = None) -> None: ...


def _quiet(done: int, total: int, sent: int | None = None) -> None:
    """No bar (stderr is no terminal)."""


_trace_argument = click.argument("trace_path", metavar="TRACE", type=IN_FILE)
_prices_option = click.option(
    "--prices",
    type=IN_FILE,
    default=None,
    help="Your hourly prices (YAML, same format as the packaged prices.yaml).",
)
_parallel_loads_option = field_option(
    SimConfig,
    "parallel_loads",
    type=int,
    help="Loads at once per instance (1: the emulator's rule).",
)


def _disk_config(
    download_seconds: str | None, disk_budget: int | None, artifact_mib: float | None
) -> dict[str, Any]:
    """The SimConfig fields of the instances' disks (see :class:`SimConfig`)."""
    download = None
    if download_seconds is not None:
        try:
            samples = tuple(float(x) for x in download_seconds.split(","))
        except ValueError:
            raise UserInputError(
                f"--download-seconds takes seconds (8) or a list (5,12.5); got {download_seconds!r}"
            ) from None
        download = LoadTimes(samples_s=samples, source="given")
    return {
        "download": download,
        "disk_bytes": disk_budget,
        "default_artifact_bytes": None if artifact_mib is None else int(artifact_mib * MiB),
    }


_disk_options = grouped(
    "disk",
    _disk_config,
    click.option(
        "--download-seconds",
        default=None,
        help="Download + extract time of an artifact not on the instance's disk (seconds or "
        "a list); then --load-seconds is the load alone.",
    ),
    click.option(
        "--disk-budget",
        type=str,
        callback=size_option,
        default=None,
        help="Each instance's disk for artifacts (e.g. 30GiB; default: all stay).",
    ),
    click.option("--artifact-mib", type=float, default=None, help="An artifact's size on disk."),
)


def _outputs(html: bool) -> _Decorator:
    """``--json`` (and ``--html``): where the result is written."""
    options = [json_option()]
    if html:
        options.append(
            click.option(
                "--html",
                "html_out",
                type=OUT_FILE,
                default=None,
                help="Write an HTML page of the result (plots inside) here.",
            )
        )
    return stacked(*options)


def _concurrency_option(help: str = "Requests served at once per instance.") -> _Decorator:
    """``--concurrency``: requests one instance serves at once (the simulator's default)."""
    return field_option(SimConfig, "concurrency", type=int, help=help)


@contextmanager
def _progress(label: str, enabled: bool = True) -> Iterator[_Update]:
    """A progress bar on stderr (none when it is no terminal): ``update(done, total)``, and
    for a replay ``update(answered, total, sent)``: the bar counts answers, the requests
    sent are shown beside it (the last answers may come long after the last request left)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    if not enabled or not err_console.is_terminal:
        yield _quiet
        return
    progress = Progress(
        *Progress.get_default_columns()[:1],
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[sent]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    with progress:
        task = progress.add_task(label, total=1, sent="")

        def update(done: int, total: int, sent: int | None = None) -> None:
            shown = "" if sent is None else f"answered, {sent:,} sent"
            progress.update(task, completed=done, total=total, sent=shown)

        yield update


def _print_result(result: Any, title: str) -> None:
    from rich.table import Table

    from mmelocal.traffic.results import summary_rows

    table = Table(title=title, show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in summary_rows(result):
        table.add_row(name, value)
    console.print(table)
    for note in result.data.get("notes", []):
        console.print(f"[dim]{note}[/dim]")


def _write_outputs(result: Any, json_out: Path | None, html_out: Path | None, title: str) -> None:
    from mmelocal.traffic.results import write_html

    if json_out is not None and str(json_out) == "-":
        print_json(result.data)
    elif json_out is not None:
        console.print(f"JSON: {result.write_json(json_out)}")
    if html_out is not None:
        console.print(f"HTML: {write_html(result, html_out, title=title)}")
