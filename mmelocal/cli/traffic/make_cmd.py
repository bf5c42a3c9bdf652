"""``mmelocal traffic make``: write a synthetic trace (and fill a store for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from mmelocal.cli._defaults import field_option
from mmelocal.cli._options import OUT_DIR, OUT_FILE
from mmelocal.cli._output import console
from mmelocal.errors import UserInputError
from mmelocal.traffic.make import Popularity, make_trace


@click.command()
@click.option("--models", type=int, required=True, help="Number of models (model-0.tar.gz ...).")
@click.option(
    "--rate",
    "rate_rps",
    type=float,
    required=True,
    help="Mean requests per second (diurnal: over whole periods).",
)
@click.option("--duration", "duration_s", type=float, required=True, help="Seconds of traffic.")
@field_option(
    Popularity,
    "zipf_s",
    "--zipf",
    "zipf",
    type=float,
    metavar="S",
    help="Zipf popularity with exponent S (the popularity unless another is chosen).",
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
@field_option(make_trace, "seed", type=int, help="Seed of the random arrivals and models.")
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
    zipf: float,
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
    from mmelocal.traffic.make import fill_store, parse_hot_set
    from mmelocal.traffic.trace import write_trace

    given = click.get_current_context().get_parameter_source("zipf")
    chosen = [
        name
        for name, on in (
            ("--zipf", given is ParameterSource.COMMANDLINE),
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
        popularity = Popularity(kind="zipf", zipf_s=zipf)
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
