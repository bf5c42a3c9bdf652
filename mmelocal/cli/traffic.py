"""``mmelocal traffic``: make a trace, replay it against an endpoint, simulate the fleet,
size the endpoint."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import click

from mmelocal.cli._defaults import default_of, field_option
from mmelocal.cli._options import (
    IN_FILE,
    OUT_DIR,
    OUT_FILE,
    grouped,
    payload_option,
    region_option,
    stacked,
)
from mmelocal.cli._output import console, err_console, size_option
from mmelocal.errors import UserInputError
from mmelocal.facts.sagemaker import MEMORY_THRESHOLD
from mmelocal.traffic.make import make_trace
from mmelocal.traffic.replay import ReplayOptions
from mmelocal.traffic.replay import replay as run_replay
from mmelocal.traffic.simulate import Autoscaling, LoadTimes, SimConfig
from mmelocal.traffic.size import size as size_fleet
from mmelocal.units import MiB


@click.group()
def traffic() -> None:
    """Traffic before production: make -> replay -> simulate -> size."""


# -- options several commands share --------------------------------------------------------
_Decorator = Callable[[Any], Any]

_trace_argument = click.argument("trace_path", metavar="TRACE", type=IN_FILE)
_prices_option = click.option("--prices", type=IN_FILE, default=None)
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
    options = [click.option("--json", "json_out", type=OUT_FILE, default=None)]
    if html:
        options.append(click.option("--html", "html_out", type=OUT_FILE, default=None))
    return stacked(*options)


class _CapacityArgs(NamedTuple):
    """The options that give the models an instance holds (read by :func:`_capacity_for`)."""

    models_per_instance: int | None
    footprint_mib: float | None
    baseline_mib: float
    capacity_file: Path | None
    threshold: float


def _capacity_options(
    models_help: str, baseline_help: str | None = None, threshold_help: str | None = None
) -> _Decorator:
    """The options of :class:`_CapacityArgs`, handed to the command as ``capacity_args``."""
    return grouped(
        "capacity_args",
        _CapacityArgs,
        click.option("--models-per-instance", type=int, default=None, help=models_help),
        click.option(
            "--footprint-mib", type=float, default=None, help="Per-model footprint (MiB)."
        ),
        click.option(
            "--baseline-mib", type=float, default=0.0, show_default=True, help=baseline_help
        ),
        click.option(
            "--capacity",
            "capacity_file",
            type=IN_FILE,
            default=None,
            help="A capacity or estimate result (JSON) for the footprint.",
        ),
        click.option(
            "--threshold",
            type=float,
            default=MEMORY_THRESHOLD,
            show_default=True,
            help=threshold_help,
        ),
    )


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


def _concurrency_option(help: str | None = None) -> _Decorator:
    """``--concurrency``: requests one instance serves at once (the simulator's default)."""
    return field_option(SimConfig, "concurrency", type=int, help=help)


@contextmanager
def _progress(label: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    if not enabled or not err_console.is_terminal:
        yield lambda _done, _total: None
        return
    progress = Progress(
        *Progress.get_default_columns()[:1],
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    with progress:
        task = progress.add_task(label, total=1)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

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

    if json_out is not None:
        console.print(f"JSON: {result.write_json(json_out)}")
    if html_out is not None:
        console.print(f"HTML: {write_html(result, html_out, title=title)}")


# -- make -----------------------------------------------------------------------------------
@traffic.command()
@click.option("--models", type=int, required=True, help="Number of models (model-0.tar.gz ...).")
@click.option(
    "--rate",
    "rate_rps",
    type=float,
    required=True,
    help="Mean requests per second (diurnal: over whole periods).",
)
@click.option("--duration", "duration_s", type=float, required=True, help="Seconds of traffic.")
@click.option(
    "--zipf", type=float, default=None, help="Zipf popularity with exponent S (default 1.0)."
)
@click.option("--uniform", is_flag=True, help="Every model equally popular.")
@click.option(
    "--hot-set", default=None, metavar="K:FRACTION", help="FRACTION of requests to K models."
)
@click.option(
    "--shift-at",
    "shift_at_s",
    type=float,
    default=None,
    help="Move the hot set / ranking at T seconds.",
)
@field_option(
    make_trace,
    "shape",
    type=click.Choice(["constant", "steps", "diurnal"]),
    help="Rate over time (see the Traffic docs page).",
)
@field_option(make_trace, "period_s", "--period", type=float, help="Diurnal period (s).")
@field_option(make_trace, "seed", type=int)
@click.option(
    "--out",
    "out",
    type=OUT_FILE,
    required=True,
    help="Trace file (.csv, or .jsonl for JSON lines).",
)
@click.option(
    "--store",
    type=OUT_DIR,
    default=None,
    help="Also fill this store folder with --tarball under every model name.",
)
@click.option(
    "--tarball",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The model.tar.gz to link under every name in --store.",
)
def make(
    models: int,
    zipf: float | None,
    uniform: bool,
    hot_set: str | None,
    shift_at_s: float | None,
    shape: str,
    out: Path,
    store: Path | None,
    tarball: Path | None,
    **rate: Any,
) -> None:
    """Write a synthetic trace: Poisson arrivals and the popularity you choose."""
    from mmelocal.traffic.make import Popularity, fill_store, parse_hot_set
    from mmelocal.traffic.trace import write_trace

    chosen = [
        name
        for name, on in (
            ("--zipf", zipf is not None),
            ("--uniform", uniform),
            ("--hot-set", hot_set is not None),
        )
        if on
    ]
    if len(chosen) > 1:
        raise UserInputError(f"choose one popularity, got {' and '.join(chosen)}")
    if (store is None) != (tarball is None):
        raise UserInputError(
            "--store and --tarball go together (the store gets the tarball under every name)"
        )
    if hot_set is not None:
        popularity = parse_hot_set(hot_set)
    elif uniform:
        popularity = Popularity(kind="uniform")
    else:
        popularity = Popularity(kind="zipf", zipf_s=1.0 if zipf is None else zipf)
    # the rate options (rate, duration, period, seed) are named after make_trace's parameters
    trace = make_trace(
        models=models, popularity=popularity, shift_at_s=shift_at_s, shape=shape, **rate
    )
    if store is not None and tarball is not None:
        added = fill_store(store, tarball, trace.models)
        console.print(f"store {store}: {added} tarball(s) added ({models} names)")
    write_trace(trace, out)
    console.print(
        f"{out}: {len(trace):,} requests over {trace.duration_s:,.1f} s, {models} models, "
        f"{popularity.describe()}, {shape}"
        + (f", shift at {shift_at_s:g} s" if shift_at_s is not None else "")
    )


# -- replay ---------------------------------------------------------------------------------
@traffic.command()
@_trace_argument
@click.option("--url", default=None, help="mmelocal serve's URL (or an .../invocations URL).")
@click.option("--endpoint-name", default=None, help="A SageMaker endpoint, called through boto3.")
@click.option("--endpoint-url", default=None, help="With --endpoint-name: the local AWS's URL.")
@region_option("With --endpoint-name: the AWS region.")
@payload_option("The request body sent with every request.", required=True)
@field_option(ReplayOptions, "content_type")
@field_option(
    ReplayOptions,
    "speed",
    type=float,
    help="Send the trace K times faster (timestamp / K); measured times stay the endpoint's.",
)
@field_option(
    ReplayOptions,
    "max_in_flight",
    type=int,
    help="Safety cap: fail (never slow down) when this many requests are unanswered.",
)
@click.option(
    "--max-lag-ms",
    type=float,
    default=default_of(ReplayOptions, "max_lag_s") * 1e3,
    show_default=True,
    help="Fail when the sender is this late on a request's time.",
)
@field_option(
    ReplayOptions,
    "max_rate_rps",
    "--max-rate",
    type=float,
    help="Refuse a trace peaking above this many requests/s (after --speed).",
)
@click.option(
    "--store", default=None, help="Check every target exists here first (folder or s3://)."
)
@field_option(
    run_replay,
    "workers",
    type=int,
    help="Send over N Locust workers (the load tests'), the schedule sharded by model; "
    "0: this process sends (with --url).",
)
@_outputs(html=True)
def replay(
    trace_path: Path,
    url: str | None,
    endpoint_name: str | None,
    endpoint_url: str | None,
    region: str | None,
    payload: Path,
    content_type: str,
    speed: float,
    max_in_flight: int,
    max_lag_ms: float,
    max_rate_rps: float,
    store: str | None,
    workers: int,
    json_out: Path | None,
    html_out: Path | None,
) -> None:
    """Replay TRACE open loop against an endpoint and report what happened."""
    from mmelocal.traffic.trace import read_trace

    trace = read_trace(trace_path)
    options = ReplayOptions(
        speed=speed,
        max_in_flight=max_in_flight,
        max_lag_s=max_lag_ms / 1e3,
        max_rate_rps=max_rate_rps,
        content_type=content_type,
    )
    body = payload.read_bytes()
    with _progress("replay") as progress:
        result = run_replay(
            trace,
            body=body,
            url=url,
            endpoint_name=endpoint_name,
            endpoint_url=endpoint_url,
            region=region,
            store=store,
            options=options,
            progress=progress,
            workers=workers,
        )
    _print_result(result, f"replay of {trace_path.name}")
    _write_outputs(result, json_out, html_out, f"Replay of {trace_path.name}")


# -- simulate -------------------------------------------------------------------------------
_CPU_FIGURE = "CPU figure"


def _replay_source(what: str, path: object, data: dict[str, Any]) -> str:
    """How a figure taken from a replay's JSON is labelled: a replay of ``mmelocal serve``
    without a GPU measured CPU figures, never shown as GPU ones."""
    where = data.get("measured_where")
    on = data.get("measured_on")
    if on == "gpu":
        return f"measured on a GPU ({what} of {path}: {where})"
    if on == "endpoint":
        return f"measured ({what} of {path}: {where})"
    if on == "cpu":
        return f"{_CPU_FIGURE}, not a GPU one ({what} of {path}: {where})"
    return f"measured where unknown, not known to be a GPU figure ({what} of {path}" + (
        f": {where})" if where else ")"
    )


def _load_times(value: str | None) -> Any:
    from mmelocal.traffic.results import TrafficResult

    if value is None:
        return None
    if value.endswith(".json"):
        result = TrafficResult.read_json(value)
        data = result.data
        samples = tuple(float(x) for x in data.get("load_cycle_s") or data.get("cold_load_s", []))
        if not samples:
            raise UserInputError(f"{value} holds no cold-load times (cold_load_s is empty)")
        return LoadTimes(samples_s=samples, source=_replay_source("load times", value, data))
    try:
        samples = tuple(float(x) for x in value.split(","))
    except ValueError:
        raise UserInputError(
            "--load-seconds takes seconds (2.5), a list (1.2,3.4), or a replay's JSON; "
            f"got {value!r}"
        ) from None
    return LoadTimes(samples_s=samples, source="given")


_BY_FIGURE = "--models-per-instance K or --footprint-mib X"


def _footprint_file(path: Path) -> Any:
    """The `capacity estimate` result (an :class:`Estimate`) or the GPU
    :class:`CapacityResult` ``path`` holds (the first, in a file of several); a host-memory
    one is refused: CPU figures never project onto a GPU card."""
    from mmelocal.bench.capacity.result import host_memory_refusal
    from mmelocal.bench.results import read_results

    found = read_results(path)
    result = found[0] if found else None
    if result is None or result.kind not in ("capacity", "estimate"):
        raise UserInputError(
            f"{path}: no per-model footprint (a GPU result of `mmelocal capacity --json FILE`, "
            "or a result of `mmelocal capacity estimate --json FILE`)"
        )
    if result.kind == "capacity" and result.on_host_memory:
        raise UserInputError(host_memory_refusal(path, _BY_FIGURE))
    return result


def _capacity_for(instance_type: str | None, capacity_args: _CapacityArgs) -> tuple[int, str]:
    """Models per instance and where the figure comes from."""
    models_per_instance, footprint_mib, baseline_mib, capacity_file, threshold = capacity_args
    if models_per_instance is not None:
        return models_per_instance, "given"
    if footprint_mib is None and capacity_file is None:
        raise UserInputError(
            "give the capacity per instance: --models-per-instance K, --footprint-mib X, or "
            "--capacity FILE (a capacity or estimate result)"
        )
    found = _footprint_file(capacity_file) if capacity_file is not None else None
    if instance_type is None:
        raise UserInputError(
            "footprints project onto a card: give --instance-type (e.g. ml.g5.xlarge)"
        )
    from mmelocal.bench.capacity.loop import with_projection
    from mmelocal.bench.capacity.projection import load_gpus, project

    card = next((g for g in load_gpus() if instance_type in g.instances), None)
    if card is None:
        raise UserInputError(
            f"no GPU card known for {instance_type}: give --models-per-instance, or an MME GPU "
            "type (mmelocal capacity project lists them)"
        )
    if found is not None and found.kind == "estimate":
        # the estimate's own count on the card: its per-copy parts and the runtime and
        # server it pays once (the card's published server baseline where there is one)
        on_card = dataclasses.replace(found, threshold=threshold).with_cards([card])
        return on_card.cards[0].point, f"estimate, on {card.name}"
    if found is not None:
        # capacity's own projection: each copy its marginal part, the shared runtime once
        measured = dataclasses.replace(found, threshold=threshold)
        projection, source = with_projection(measured, [card]).projection, "measured on a GPU"
        if projection is None:
            raise UserInputError(f"{capacity_file}: the capacity result loaded no copy")
    else:
        assert footprint_mib is not None
        projection = project(
            per_model_bytes=int(footprint_mib * MiB),
            baseline_bytes=int(baseline_mib * MiB),
            threshold=threshold,
            gpus=[card],
        )
        source = "given"
    row = next(r for r in projection.rows if r.instance_type == instance_type)
    return row.models_per_gpu, f"{source}, projected on {card.name}"


def _service_s(service_ms: float | None, from_replay: Path | None) -> tuple[float | None, str]:
    if service_ms is not None and from_replay is not None:
        raise UserInputError("give --service-ms or --from-replay, not both")
    if service_ms is not None:
        if service_ms < 0:
            raise UserInputError(f"--service-ms must be >= 0, got {service_ms:g}")
        return service_ms / 1e3, "given"
    if from_replay is not None:
        from mmelocal.traffic.results import TrafficResult

        data = TrafficResult.read_json(from_replay).data
        warm = data["latency_ms"]["warm"]["p50"]
        if warm is None:
            raise UserInputError(
                f"{from_replay}: the replay has no warm request to take a service time from"
            )
        return warm / 1e3, _replay_source("warm p50", from_replay, data)
    return None, "none"


@traffic.command()
@_trace_argument
@field_option(SimConfig, "instances", type=int, help="Instances (start count with --autoscale).")
@click.option("--instance-type", default=None, help="For footprint projection and the price.")
@_capacity_options(
    models_help="Models one instance holds.",
    baseline_help="Memory with no model.",
    threshold_help="Memory fraction used.",
)
@click.option(
    "--load-seconds",
    default=",".join(f"{x:g}" for x in default_of(LoadTimes, "samples_s")),
    show_default=True,
    help="Cold-load time: seconds, a list to draw from, or a replay's --json.",
)
@field_option(
    SimConfig, "unload_s", "--unload-seconds", type=float, help="Added to a load that first evicts."
)
@click.option("--service-ms", type=float, default=None, help="Time per request on a loaded model.")
@click.option(
    "--from-replay",
    type=IN_FILE,
    default=None,
    help="Take the service time (warm p50) from a replay's --json.",
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
@field_option(SimConfig, "seed", type=int)
@_outputs(html=True)
def simulate(
    trace_path: Path,
    instance_type: str | None,
    capacity_args: _CapacityArgs,
    load_seconds: str,
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

    capacity, capacity_source = _capacity_for(instance_type, capacity_args)
    if capacity < 1 and capacity_args.models_per_instance is None:
        raise UserInputError(
            f"not one model fits on {instance_type} ({capacity_source}: 0 models under "
            f"{capacity_args.threshold:.0%} of its memory): choose a larger instance type"
        )
    service_s, service_source = _service_s(service_ms, from_replay)
    price = None
    if instance_type is not None:
        from mmelocal.bench.prices import load_prices

        price = load_prices(prices).price_for(instance_type)
    # the other options (instances, unload, concurrency, loads, hot rate, seed) are named
    # after the SimConfig fields they set
    config = SimConfig(
        models_per_instance=capacity,
        load=_load_times(load_seconds),
        service_s=service_s,
        autoscaling=scaling,
        instance_type=instance_type,
        price_per_hour=price,
        **disk,
        **sim,
    )
    trace = read_trace(trace_path)
    with _progress("simulate") as progress:
        result = run_simulate(trace, config, progress=progress)
    notes = [
        f"Capacity {capacity} models per instance ({capacity_source}); service time: "
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


# -- size -----------------------------------------------------------------------------------
@traffic.command(name="size")
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
    """Find the cheapest instance type and count for TRACE that meets the SLO."""
    from rich.table import Table

    from mmelocal.bench.prices import load_prices
    from mmelocal.traffic.size import Candidate
    from mmelocal.traffic.trace import read_trace

    table = load_prices(prices)
    types = list(instance_types) or mme_gpu_types_with_price(table)
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
    out = Table(title=f"size for {trace_path.name} (p99 <= {slo_p99_ms:g} ms)")
    out.add_column("instance type", no_wrap=True)
    for col in (
        "count",
        "inv/min/instance",
        "hit ratio",
        "cold/min",
        "p99 ms",
        "cost/h",
        "cost/month",
    ):
        out.add_column(col, justify="right")
    out.add_column("capacity from")
    out.add_column("p99 from")
    shown = answer.best if answer.best is not None else closest
    for r in [shown] if shown is not None else []:
        out.add_row(
            r.instance_type,
            str(r.count),
            f"{r.invocations_per_min_per_instance:,.0f}",
            f"{r.hit_ratio:.3f}",
            f"{r.cold_starts_per_min:.2f}",
            "-" if r.p99_ms is None else f"{r.p99_ms:,.0f}",
            "-" if r.cost_per_hour is None else f"{r.cost_per_hour:,.2f}",
            "-" if r.cost_per_month is None else f"{r.cost_per_month:,.0f}",
            r.capacity_source,
            r.latency_source,
        )
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
        raise UserInputError(
            f"no configuration meets the SLO (p99 <= {slo_p99_ms:g} ms"
            + (f", <= {max_cold_rate:g} cold starts/min" if max_cold_rate is not None else "")
            + f") up to {max_count} instances; the closest is shown above"
            + (
                f": {closest.instance_type} x {closest.count} ({closest.why_not})"
                if closest
                else ""
            )
            + ". Raise --max-count, relax the SLO, or give a larger instance type"
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
