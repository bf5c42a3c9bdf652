"""``mmelocal traffic size``: the cheapest instance type and count that meets an SLO."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from mmelocal.cli._defaults import field_option
from mmelocal.cli._output import console, err_console, fail
from mmelocal.cli.traffic._capacity import (
    _capacity_for,
    _capacity_options,
    _CapacityArgs,
    _sized_types,
)
from mmelocal.cli.traffic._measured import _CPU_FIGURE, _load_times
from mmelocal.cli.traffic._shared import (
    _concurrency_option,
    _disk_options,
    _outputs,
    _parallel_loads_option,
    _prices_option,
    _trace_argument,
)
from mmelocal.errors import UserInputError
from mmelocal.traffic.simulate import LoadTimes, SimConfig
from mmelocal.traffic.size import size as size_fleet


@click.command(name="size")
@_trace_argument
@click.option("--slo-p99-ms", type=float, required=True, help="The p99 latency to meet (ms).")
@click.option(
    "--max-cold-rate", type=float, default=None, help="Most cold starts per minute allowed."
)
@click.option(
    "--instance-type",
    "instance_types",
    multiple=True,
    help="Types to try (repeatable; default: every MME GPU type with a price).",
)
@_capacity_options(models_help="Same capacity on every type.")
@click.option("--service-ms", type=float, default=None, help="Measured time per request on a GPU.")
@click.option(
    "--load-seconds", default=None, help="Measured cold-load time (seconds, list or replay JSON)."
)
@_disk_options
@_parallel_loads_option
@_concurrency_option()
@field_option(size_fleet, "max_count", type=int, help="Most instances to try.")
@_prices_option
@_outputs(html=False)
def size_command(
    trace_path: Path,
    slo_p99_ms: float,
    max_cold_rate: float | None,
    instance_types: tuple[str, ...],
    capacity_args: _CapacityArgs,
    service_ms: float | None,
    load_seconds: str | None,
    disk: dict[str, Any],
    parallel_loads: int,
    concurrency: int,
    max_count: int,
    prices: Path | None,
    json_out: Path | None,
) -> None:
    """Find the cheapest instance type and count for TRACE that meets the SLO (exit 1 when
    none does: the closest is shown)."""
    from rich.table import Table

    from mmelocal.bench.prices import load_prices
    from mmelocal.traffic.size import Candidate
    from mmelocal.traffic.trace import read_trace

    table = load_prices(prices)
    types = list(instance_types)
    if not types:  # the priced GPU types (those a --capacity result sizes)
        sized = _sized_types(capacity_args)
        types = [t for t in mme_gpu_types_with_price(table) if sized is None or t in sized]
    candidates = []
    for itype in types:
        count, source = _capacity_for(itype, capacity_args)
        candidates.append(
            Candidate(
                instance_type=itype,
                models_per_instance=count,
                capacity_source=source,
                price_per_hour=table.price_for(itype),
            )
        )
    loads = _load_times(load_seconds)
    base = SimConfig(
        models_per_instance=1,
        load=loads if loads is not None else LoadTimes(),
        service_s=None if service_ms is None else service_ms / 1e3,
        concurrency=concurrency,
        parallel_loads=parallel_loads,
        **disk,
    )
    trace = read_trace(trace_path)
    with err_console.status("sizing") as status:
        answer = size_fleet(
            trace,
            candidates,
            base,
            slo_p99_ms=slo_p99_ms,
            max_cold_per_min=max_cold_rate,
            max_count=max_count,
            latency_source="given (--service-ms)",
            progress=lambda what: status.update(f"simulating {what}"),
        )
    if loads is not None:
        answer.notes.append(f"Cold-load times: {loads.source}.")
        if _CPU_FIGURE in loads.source:
            answer.notes.append(
                "Cold-start latencies come from CPU load times: not what the GPU instance types "
                "would show (a GPU endpoint's replay, or --load-seconds SECONDS)."
            )
    else:
        answer.notes.append(
            f"No measured cold-load time (--load-seconds): {LoadTimes().samples_s[0]:g} s is "
            "assumed, so cold-start latency is not a GPU figure."
        )
    closest = answer.closest()
    # one configuration: a figure per line, so that no terminal width cuts a number
    out = Table(title=f"size for {trace_path.name} (p99 <= {slo_p99_ms:g} ms)", show_header=False)
    out.add_column("figure")
    out.add_column("value", justify="right", overflow="fold")
    shown = answer.best if answer.best is not None else closest
    if shown is not None:
        for name, value in (
            ("instance type", shown.instance_type),
            ("count", str(shown.count)),
            ("invocations/min/instance", f"{shown.invocations_per_min_per_instance:,.0f}"),
            ("hit ratio", f"{shown.hit_ratio:.3f}"),
            ("cold starts/min", f"{shown.cold_starts_per_min:.2f}"),
            ("p99 ms", "-" if shown.p99_ms is None else f"{shown.p99_ms:,.0f}"),
            ("cost/h", "-" if shown.cost_per_hour is None else f"{shown.cost_per_hour:,.2f}"),
            (
                "cost/month",
                "-" if shown.cost_per_month is None else f"{shown.cost_per_month:,.0f}",
            ),
            ("capacity from", shown.capacity_source),
            ("p99 from", shown.latency_source),
        ):
            out.add_row(name, value)
    console.print(out)
    if shown is not None:
        answer.notes.append(table.note(shown.instance_type))
    for note in answer.notes:
        console.print(f"[dim]{note}[/dim]")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(
            json.dumps(
                {
                    "best": None if answer.best is None else answer.best.to_dict(),
                    "tried": [r.to_dict() for r in answer.rows],
                    "notes": answer.notes,
                    "prices": {
                        "origin": table.origin,
                        "sources": {t: table.source_for(t) for t in types},
                    },
                },
                indent=2,
            )
            + "\n"
        )
        console.print(f"JSON: {json_out}")
    if answer.best is None:
        # an answer, not bad input: exit 1 as a failed check does (docs/cli.md, exit codes)
        fail(
            f"no configuration meets the SLO (p99 <= {slo_p99_ms:g} ms"
            + (f", <= {max_cold_rate:g} cold starts/min" if max_cold_rate is not None else "")
            + f") up to {max_count} instances; the closest is shown above"
            + (
                f": {closest.instance_type} x {closest.count} ({closest.why_not})"
                if closest
                else ""
            )
            + ". Raise --max-count, relax the SLO, or give a larger instance type",
            code=1,
        )


def mme_gpu_types_with_price(table: Any) -> list[str]:
    """The MME GPU instance types the price table prices."""
    from mmelocal.facts.traffic import MME_GPU_INSTANCE_TYPES

    types = [t for t in MME_GPU_INSTANCE_TYPES if table.price_for(t) is not None]
    missing = [t for t in MME_GPU_INSTANCE_TYPES if t not in types]
    if missing:
        err_console.print(
            f"[dim]not sized (no price in {table.origin}): {', '.join(missing)}; pass "
            "--prices FILE with them[/dim]"
        )
    if not types:
        raise UserInputError(
            f"the price table {table.origin} prices no MME GPU instance type: give --instance-type"
        )
    return types
