"""The models one instance holds, for ``simulate`` and ``size``: given, or projected onto
the instance type's card from a footprint or a capacity / estimate result."""

from __future__ import annotations

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
    #: ``--threshold``; None: the result's own with ``--capacity``, else the platform's
    threshold: float | None
    #: ``--capacity-result``: which result of a ``--capacity`` file of several
    capacity_pick: str | None = None


def _capacity_args(
    models_per_instance: int | None,
    footprint_mib: float | None,
    baseline_mib: float | None,
    capacity_file: Path | None,
    threshold: float | None,
    capacity_pick: str | None,
) -> _CapacityArgs:
    """The options as :class:`_CapacityArgs`; a usage error for one that would be ignored
    (two sources of the capacity, a threshold or a baseline with no footprint to apply it
    to)."""
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
    if threshold is not None and models_per_instance is not None:
        raise click.UsageError(
            "--threshold is the fraction of the card's memory a footprint is projected into "
            "(--footprint-mib or --capacity FILE); --models-per-instance is a count, which "
            "no threshold changes: drop --threshold, or give a footprint instead of the count"
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
            default=None,
            help="Fraction of the card's memory the models may use (with --footprint-mib or "
            f"--capacity) [default: the result's own with --capacity, else {MEMORY_THRESHOLD:g}].",
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
    """Models per instance and where the figure comes from. A capacity or estimate result
    is read as deploy reads it (:func:`~mmelocal.bench.capacity.sizing.footprint_rows`: an
    estimate's winning count, among the instance types it was made for), under the
    threshold it records unless ``--threshold`` was given."""
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
    from mmelocal.bench.capacity.projection import load_gpus, project
    from mmelocal.bench.capacity.sizing import footprint_rows

    card = next((g for g in load_gpus() if instance_type in g.instances), None)
    if card is None:
        raise UserInputError(
            f"no GPU card known for {instance_type}: give --models-per-instance, or an MME GPU "
            "type (mmelocal capacity project lists them)"
        )
    if found is not None:
        assert capacity_file is not None
        rows = footprint_rows(found, path=capacity_file, instead=_BY_FIGURE, threshold=threshold)
        row = next((r for r in rows if r.instance_type == instance_type), None)
        if row is None:
            sized = ", ".join(sorted({r.instance_type for r in rows}))
            raise UserInputError(
                f"{capacity_file}: the estimate sizes {sized} only, not {instance_type} (it "
                f"was made for those): give --instance-type {sized.split(', ')[0]}, or "
                f"estimate again with --instance-type {instance_type}"
            )
        if found.kind == "estimate":
            winner = " (measured count)" if found.measured_wins else ""
            return row.models_per_gpu, f"estimate{winner}, on {row.gpu}"
        return row.models_per_gpu, f"measured on a GPU, projected on {row.gpu}"
    assert footprint_mib is not None
    projection = project(
        per_model_bytes=int(footprint_mib * MiB),
        baseline_bytes=int(baseline_mib * MiB),
        threshold=MEMORY_THRESHOLD if threshold is None else threshold,
        gpus=[card],
    )
    row = next(r for r in projection.rows if r.instance_type == instance_type)
    return row.models_per_gpu, f"given, projected on {card.name}"


def _sized_types(capacity_args: _CapacityArgs) -> set[str] | None:
    """The instance types the ``--capacity`` result sizes (an estimate: those it was made
    for), for ``size`` to try when no ``--instance-type`` is given; None: any."""
    if capacity_args.capacity_file is None:
        return None
    from mmelocal.bench.capacity.sizing import footprint_rows

    found = _footprint_file(capacity_args.capacity_file, capacity_args.capacity_pick)
    rows = footprint_rows(found, path=capacity_args.capacity_file, instead=_BY_FIGURE)
    return {r.instance_type for r in rows}
