"""``mmelocal traffic simulate``: the fleet serving a trace, with its autoscaling options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from mmelocal.cli._defaults import default_of, field_option
from mmelocal.cli._options import IN_FILE, grouped
from mmelocal.cli.traffic._capacity import _capacity_for, _capacity_options, _CapacityArgs
from mmelocal.cli.traffic._measured import (
    _CPU_FIGURE,
    _load_times,
    _replayed_endpoint,
    _service_s,
    read_replay,
    replay_load_times,
)
from mmelocal.cli.traffic._shared import (
    _concurrency_option,
    _disk_options,
    _outputs,
    _parallel_loads_option,
    _prices_option,
    _print_result,
    _progress,
    _trace_argument,
    _write_outputs,
)
from mmelocal.errors import UserInputError
from mmelocal.traffic.simulate import Autoscaling, LoadTimes, SimConfig


def _autoscaling(
    autoscale: str | None,
    target_invocations_per_instance: float | None,
    scale_out_cooldown_s: float | None,
    scale_in_cooldown_s: float | None,
    instance_start_s: float,
) -> Autoscaling | None:
    """The :class:`Autoscaling` of ``--autoscale MIN:MAX`` and its options (None without)."""
    if autoscale is None:
        return None
    lo, sep, hi = autoscale.partition(":")
    try:
        low, high = int(lo), int(hi)
        if not sep:
            raise ValueError
    except ValueError:
        raise UserInputError(f"--autoscale must be MIN:MAX (e.g. 1:8), got {autoscale!r}") from None
    if target_invocations_per_instance is None:
        raise UserInputError("--autoscale needs --target-invocations (per instance per minute)")
    return Autoscaling(
        min_instances=low,
        max_instances=high,
        target_invocations_per_instance=target_invocations_per_instance,
        scale_out_cooldown_s=scale_out_cooldown_s,
        scale_in_cooldown_s=scale_in_cooldown_s,
        instance_start_s=instance_start_s,
    )


#: target-tracking autoscaling, handed to the command as ``scaling`` (see :func:`_autoscaling`)
_autoscaling_options = grouped(
    "scaling",
    _autoscaling,
    click.option(
        "--autoscale",
        default=None,
        metavar="MIN:MAX",
        help="Target-tracking autoscaling between MIN and MAX.",
    ),
    click.option(
        "--target-invocations",
        "target_invocations_per_instance",
        type=float,
        default=None,
        help="With --autoscale: InvocationsPerInstance target (per minute).",
    ),
    click.option(
        "--scale-out-cooldown",
        "scale_out_cooldown_s",
        type=float,
        default=None,
        help="Seconds (default: the service's).",
    ),
    click.option(
        "--scale-in-cooldown",
        "scale_in_cooldown_s",
        type=float,
        default=None,
        help="Seconds (default: the service's).",
    ),
    field_option(
        Autoscaling,
        "instance_start_s",
        type=float,
        help="Seconds before a new instance serves (an assumption; minutes in the cloud).",
    ),
)


#: what the help says ``--load-seconds`` is without it or ``--from-replay`` (LoadTimes' own)
_DEFAULT_LOAD_S = ",".join(f"{x:g}" for x in default_of(LoadTimes, "samples_s"))


@click.command()
@_trace_argument
@field_option(SimConfig, "instances", type=int, help="Instances (start count with --autoscale).")
@click.option("--instance-type", default=None, help="For footprint projection and the price.")
@_capacity_options(models_help="Models one instance holds.")
@click.option(
    "--load-seconds",
    default=None,
    help="Cold-load time: seconds, a list to draw from, or a replay's --json [default: "
    f"{_DEFAULT_LOAD_S}, or with --from-replay the replay's].",
)
@field_option(
    SimConfig, "unload_s", "--unload-seconds", type=float, help="Added to a load that first evicts."
)
@click.option("--service-ms", type=float, default=None, help="Time per request on a loaded model.")
@click.option(
    "--from-replay",
    type=IN_FILE,
    default=None,
    help="Simulate the endpoint a replay's --json measured: its warm p50 as the service "
    "time and, unless given here, its load times (how long each load held its instance), "
    "the emulator's load wait, load limit, busy wait, hot-model threshold, instances and "
    "capacity (its memory and footprints).",
)
@_disk_options
@_parallel_loads_option
@_concurrency_option(help="Requests served at once per instance.")
@field_option(
    SimConfig,
    "hot_rps_threshold",
    "--hot-rps",
    type=float,
    help="Hot-model replication threshold.",
)
@_autoscaling_options
@_prices_option
@field_option(
    SimConfig,
    "seed",
    type=int,
    help="Seed of the draws from a list of --load-seconds / --download-seconds.",
)
@_outputs(html=True)
def simulate(
    trace_path: Path,
    instance_type: str | None,
    capacity_args: _CapacityArgs,
    load_seconds: str | None,
    service_ms: float | None,
    from_replay: Path | None,
    scaling: Autoscaling | None,
    prices: Path | None,
    disk: dict[str, Any],
    json_out: Path | None,
    html_out: Path | None,
    **sim: Any,
) -> None:
    """Simulate the fleet serving TRACE: hit ratio, cold starts, latency, instances, cost."""
    from mmelocal.traffic.simulate import simulate as run_simulate
    from mmelocal.traffic.trace import read_trace

    capacity_given = any(
        value is not None
        for value in (
            capacity_args.models_per_instance,
            capacity_args.footprint_mib,
            capacity_args.capacity_file,
        )
    )
    endpoint: dict[str, Any] = {}
    capacity_source: str | None = None
    if from_replay is not None and not capacity_given and capacity_args.threshold is not None:
        raise click.UsageError(
            "--threshold is the fraction of the card's memory a footprint is projected into "
            "(--footprint-mib or --capacity FILE); with --from-replay alone the capacity is "
            "the replayed emulator's (its room for models, under its own threshold): drop "
            "--threshold, or give a footprint with it"
        )
    replay = read_replay(from_replay) if from_replay is not None else None  # read once
    if replay is not None:
        ctx = click.get_current_context()
        given = {k for k in sim if ctx.get_parameter_source(k) is not ParameterSource.DEFAULT}
        endpoint, capacity_source = _replayed_endpoint(
            replay, capacity_given=capacity_given, given=given
        )
    if capacity_source is None:
        capacity, capacity_source = _capacity_for(instance_type, capacity_args)
        if capacity < 1 and capacity_args.models_per_instance is None:
            raise UserInputError(
                f"not one model fits on {instance_type} ({capacity_source}: 0 models within "
                "the memory threshold): choose a larger instance type"
            )
        endpoint["models_per_instance"] = capacity
    service_s, service_source = _service_s(service_ms, replay)
    price = None
    if instance_type is not None:
        from mmelocal.bench.prices import load_prices

        price = load_prices(prices).price_for(instance_type)
    # the other options (instances, unload, concurrency, loads, hot rate, seed) are named
    # after the SimConfig fields they set; a replay's figures replace those not given
    if load_seconds is not None:
        load = _load_times(load_seconds, replay=replay)
    elif replay is not None:
        if disk["download"] is not None:
            raise click.UsageError(
                "--from-replay's load times include the download of a first use, which "
                "--download-seconds adds again: give --load-seconds too (the load alone)"
            )
        load = replay_load_times(replay)
    else:
        load = LoadTimes()
    config = SimConfig(
        load=load,
        service_s=service_s,
        autoscaling=scaling,
        instance_type=instance_type,
        price_per_hour=price,
        **disk,
        **{**sim, **endpoint},
    )
    trace = read_trace(trace_path)
    with _progress("simulate") as progress:
        result = run_simulate(trace, config, progress=progress)
    capacity_text = (
        f"{config.models_per_instance} models per instance"
        if config.models_per_instance is not None
        else "memory"
    )
    notes = [
        f"Capacity: {capacity_text} ({capacity_source}); service time: "
        f"{service_source}; load times: {config.load.source}.",
    ]
    if service_s is None:
        notes.append(
            "No service time: latencies hold only the waits for loads (p99 needs a measurement)."
        )
    if instance_type is not None and _CPU_FIGURE in service_source + config.load.source:
        notes.append(
            f"The service or load times are CPU figures: latencies are not what {instance_type}'s "
            "GPU would show (measure a GPU endpoint, or give --service-ms / --load-seconds)."
        )
    if instance_type is not None and price is None:
        notes.append(f"No price for {instance_type}: costs are not shown (--prices FILE).")
    result.data["notes"] = notes
    _print_result(result, f"simulation of {trace_path.name}")
    _write_outputs(result, json_out, html_out, f"Simulation of {trace_path.name}")
