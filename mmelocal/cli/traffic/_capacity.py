"""The models one instance holds, for ``simulate`` and ``size``: given, or projected onto
the instance type's card from a footprint or a capacity / estimate result."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

import click

from mmelocal.cli._options import CAPACITY_RESULT, IN_FILE, capacity_result_option, grouped
from mmelocal.cli.traffic._shared import _Decorator
from mmelocal.errors import UserInputError
from mmelocal.facts.sagemaker import MEMORY_THRESHOLD
from mmelocal.units import MiB


class _CapacityArgs(NamedTuple):
    """The options that give the models an instance holds (read by :func:`_capacity_for`)."""

    models_per_instance: int | None
    footprint_mib: float | None
    baseline_mib: float
    capacity_file: Path | None
    threshold: float
    #: ``--capacity-result``: which result of a ``--capacity`` file of several
    capacity_pick: str | None = None


def _capacity_args(
    models_per_instance: int | None,
    footprint_mib: float | None,
    baseline_mib: float | None,
    capacity_file: Path | None,
    threshold: float,
    capacity_pick: str | None,
) -> _CapacityArgs:
    """The options as :class:`_CapacityArgs`; a usage error for one that would be ignored
    (two sources of the capacity, a baseline with no footprint to add it to)."""
    given = [
        flag
        for flag, value in (
            ("--models-per-instance", models_per_instance),
            ("--footprint-mib", footprint_mib),
            ("--capacity", capacity_file),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise click.UsageError(
            "give one of --models-per-instance, --footprint-mib or --capacity, not several "
            f"(got {' and '.join(given)})"
        )
    if capacity_pick is not None and capacity_file is None:
        raise click.UsageError(
            f"{CAPACITY_RESULT} is only read with --capacity (it picks one result of a "
            f"file of several): add --capacity FILE or drop {CAPACITY_RESULT}"
        )
    if baseline_mib is not None and footprint_mib is None:
        raise click.UsageError(
            "--baseline-mib is only read with --footprint-mib (a capacity or estimate result "
            "carries its own baseline): drop it or give --footprint-mib"
        )
    return _CapacityArgs(
        models_per_instance,
        footprint_mib,
        baseline_mib or 0.0,
        capacity_file,
        threshold,
        capacity_pick,
    )


def _capacity_options(models_help: str) -> _Decorator:
    """The options of :class:`_CapacityArgs`, handed to the command as ``capacity_args``."""
    return grouped(
        "capacity_args",
        _capacity_args,
        click.option(
            "--models-per-instance", type=click.IntRange(min=1), default=None, help=models_help
        ),
        click.option(
            "--footprint-mib",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="Per-model footprint (MiB).",
        ),
        click.option(
            "--baseline-mib",
            type=click.FloatRange(min=0),
            default=None,
            help="Memory in use with no model loaded (MiB), with --footprint-mib [default: 0].",
        ),
        click.option(
            "--capacity",
            "capacity_file",
            type=IN_FILE,
            default=None,
            help="A capacity or estimate result (JSON) for the footprint.",
        ),
        capacity_result_option(),
        click.option(
            "--threshold",
            type=float,
            default=MEMORY_THRESHOLD,
            show_default=True,
            help="Fraction of the card's memory the models may use (with --footprint-mib or "
            "--capacity).",
        ),
    )


_BY_FIGURE = "--models-per-instance K or --footprint-mib X"


def _footprint_file(path: Path, pick: str | None) -> Any:
    """The estimate or GPU capacity result ``path`` holds, of several the one ``pick``
    names (see :func:`~mmelocal.bench.capacity.sizing.read_footprint`, which deploy reads
    too)."""
    from mmelocal.bench.capacity.sizing import read_footprint

    return read_footprint(path, instead=_BY_FIGURE, pick=pick, choose=CAPACITY_RESULT)


def _capacity_for(instance_type: str | None, capacity_args: _CapacityArgs) -> tuple[int, str]:
    """Models per instance and where the figure comes from."""
    models_per_instance, footprint_mib, baseline_mib, capacity_file, threshold, pick = capacity_args
    if models_per_instance is not None:
        return models_per_instance, "given"
    if footprint_mib is None and capacity_file is None:
        raise UserInputError(
            "give the capacity per instance: --models-per-instance K, --footprint-mib X, or "
            "--capacity FILE (a capacity or estimate result)"
        )
    found = _footprint_file(capacity_file, pick) if capacity_file is not None else None
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
