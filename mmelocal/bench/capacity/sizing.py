"""The instance type a store needs: the cheapest whose GPUs hold its hot set, per a
capacity measurement's projection (``count = floor((threshold*total - baseline) /
per_model)``, the count of one card whatever the instance's number of cards: Triton
places every model on each of them) and the price table."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mmelocal.bench.capacity.loop import with_projection
from mmelocal.bench.capacity.projection import Projection, ProjectionRow, load_gpus
from mmelocal.bench.capacity.result import CapacityResult, host_memory_refusal
from mmelocal.bench.estimate.core import Estimate
from mmelocal.bench.prices import PriceTable, load_prices
from mmelocal.bench.results import read_results
from mmelocal.errors import DeployError, UserInputError


@dataclass(frozen=True, kw_only=True)
class InstanceChoice:
    """The chosen instance type and one sentence that says why."""

    instance_type: str
    models_per_instance: int
    reason: str


def _label(result: Any) -> str:
    """``source (format)``, or the kind for a projection (typed-in numbers)."""
    if isinstance(result, Projection):
        return "projection"
    return f"{result.source} ({result.model_format})"


def _keys(result: Any) -> set[str]:
    """What picks ``result``: its source (or the source's file name), format, label, and the
    instance type it was measured on."""
    if isinstance(result, Projection):
        return {"projection"}
    source = str(result.source)
    keys = {source, Path(source).name, str(result.model_format), _label(result)}
    keys.add(str(getattr(result, "label", "") or source))
    keys.add(str(getattr(result, "instance_type", "") or source))
    return keys


def sizing_result(path: Path, *, pick: str | None = None, choose: str | None = None) -> Any:
    """The result of ``path`` that sizes an instance (a projection, a capacity or an
    estimate result; the others, a report's load tests or sweeps, are passed over). A file
    of several needs ``pick``: a result's format, source (or its file name), instance type
    or 1-based position among them; ``choose`` names how the user gives it (None: there is
    no way, the file must hold one). A :class:`UserInputError` lists the results when
    none or several match."""
    usable = [
        r for r in read_results(path) if isinstance(r, (Projection, CapacityResult, Estimate))
    ]
    listed = "; ".join(f"{i}: {_label(r)}" for i, r in enumerate(usable, 1))
    if pick is None:
        if len(usable) <= 1:
            return usable[0] if usable else None
        if choose is None:
            raise UserInputError(
                f"{path} holds {len(usable)} results that size an instance ({listed}): give a "
                "file of one (`mmelocal capacity` with one --format, an estimate of one model)"
            )
        raise UserInputError(
            f"{path} holds {len(usable)} results that size an instance ({listed}): say which "
            f"with {choose} (its format, source or number, e.g. {choose} "
            f"{usable[-1].model_format if not isinstance(usable[-1], Projection) else len(usable)})"
        )
    if pick.isdigit() and 1 <= int(pick) <= len(usable):
        return usable[int(pick) - 1]
    matches = [r for r in usable if pick in _keys(r)]
    if len(matches) != 1:
        what = "no result" if not matches else f"{len(matches)} results"
        raise UserInputError(
            f"{what} of {path} is {pick!r} ({listed}): give {choose} a format, source or "
            "number that names one"
        )
    return matches[0]


def read_footprint(
    path: Path, *, instead: str, pick: str | None = None, choose: str | None = None
) -> CapacityResult | Estimate:
    """The `capacity estimate` result (an :class:`Estimate`) or the GPU
    :class:`CapacityResult` ``path`` holds (of several, the one ``pick`` names: see
    :func:`sizing_result`); a host-memory one is refused (CPU figures never project onto a
    GPU card), pointing to ``instead``: the option that gives the figure directly."""
    result = sizing_result(path, pick=pick, choose=choose)
    if not isinstance(result, (CapacityResult, Estimate)):
        raise UserInputError(
            f"{path}: no per-model footprint (a GPU result of `mmelocal capacity --json FILE`, "
            f"or a result of `mmelocal capacity estimate --json FILE`), or pass {instead}"
        )
    if isinstance(result, CapacityResult) and result.on_host_memory:
        raise UserInputError(host_memory_refusal(path, instead))
    return result


def _rows(path: Path, pick: str | None, choose: str) -> tuple[ProjectionRow, ...]:
    """The count per instance type of the projection, capacity or estimate result ``path``
    holds (of several, the one ``pick`` names; ``choose``: how the caller gives it)."""
    try:
        found = sizing_result(path, pick=pick, choose=choose)
        if isinstance(found, Projection):
            return found.rows
        result = read_footprint(path, instead="--instance-type", pick=pick, choose=choose)
        return footprint_rows(result, path=path, instead="--instance-type")
    except UserInputError as exc:
        raise DeployError(str(exc)) from None


def footprint_rows(
    result: CapacityResult | Estimate,
    *,
    path: Path | str,
    instead: str,
    threshold: float | None = None,
) -> tuple[ProjectionRow, ...]:
    """The copies per instance type a capacity or estimate result (read from ``path``)
    gives: the one reading ``deploy --capacity`` and ``traffic --capacity`` share.

    An estimate gives its own count on each card it records (:attr:`CardCount.copies
    <mmelocal.bench.estimate.core.CardCount.copies>`: the measured count where a
    measurement of the same format and precision stands beside it, as ``capacity
    estimate``'s table marks it, else the point), for the instance types it records there:
    ``capacity estimate --instance-type T`` records T's card with T alone, and no other
    type is sized (an estimate with no cards, as the Python API's ``estimate_from_facts``
    returns it, is counted on every packaged card). The number of cards of each type comes
    from the packaged table; a type it lacks (a card of ``--gpus FILE``) is passed over. A
    capacity result gives its own projection onto every packaged card (each copy its
    marginal part, the shared runtime once). Both count under the threshold the result
    records, or ``threshold`` when given. A :class:`UserInputError` (naming ``instead``,
    the option that gives the count directly) when nothing is sized."""
    gpus = load_gpus()
    target = result.threshold if threshold is None else threshold
    recount = target != result.threshold
    if isinstance(result, CapacityResult):
        measured = replace(result, threshold=target) if recount else result
        projection = with_projection(measured, None).projection
        if projection is None:
            raise UserInputError(f"{path}: the capacity result loaded no copy; pass {instead}")
        return projection.rows
    per_instance = {t: n for gpu in gpus for t, n in gpu.instances.items()}
    cards = result.cards or result.with_cards(gpus).cards
    if recount:
        types = [t for card in cards for t in card.instance_types if t in per_instance]
        cards = replace(result, threshold=target).with_cards(gpus, types).cards if types else ()
    nominal = {gpu.name: gpu.nominal for gpu in gpus}
    rows = tuple(
        ProjectionRow(
            gpu=card.gpu,
            nominal=nominal.get(card.gpu, ""),
            memory_bytes=card.memory_bytes,
            instance_type=instance,
            gpus_per_instance=per_instance[instance],
            models_per_gpu=card.copies,
        )
        for card in cards
        for instance in card.instance_types
        if instance in per_instance
    )
    if not rows:
        named = ", ".join(t for card in result.cards for t in card.instance_types) or "none"
        raise UserInputError(
            f"{path}: the estimate sizes no instance type mmelocal's GPU table knows "
            f"(its types: {named}): estimate again with --instance-type of an MME GPU type, "
            f"or pass {instead}"
        )
    return rows


def cheapest_instance(
    capacity: Path | str,
    *,
    hot_models: int,
    prices: PriceTable | None = None,
    pick: str | None = None,
    choose: str = "pick=",
) -> InstanceChoice:
    """The cheapest priced instance type that holds ``hot_models`` loaded at once, by the
    result ``capacity`` holds (of several, the one ``pick`` names: :func:`sizing_result`;
    ``choose``: how the caller's user gives ``pick``, named when it is missing)."""
    if hot_models < 1:
        raise DeployError(f"hot_models must be >= 1, got {hot_models}")
    rows = _rows(Path(capacity), pick, choose)
    prices = prices if prices is not None else load_prices()
    fitting = [row for row in rows if row.instance_type and row.models_per_instance >= hot_models]
    priced = [(prices.price_for(r.instance_type), r) for r in fitting]
    ranked = sorted(
        ((price, row) for price, row in priced if price is not None),
        key=lambda pair: (pair[0], -pair[1].models_per_instance),
    )
    if not ranked:
        best = max((r.models_per_instance for r in rows), default=0)
        raise DeployError(
            f"no priced instance type holds {hot_models} models at once (the largest holds "
            f"{best}): pass --instance-type, lower --hot-models, or add prices"
        )
    price, row = ranked[0]
    reason = (
        f"instance type {row.instance_type}: {row.models_per_instance} models fit "
        f"(on each of its {row.gpus_per_instance} {row.gpu}), >= {hot_models} hot; cheapest "
        f"at {price:g} "
        f"{prices.currency}/h in {prices.origin}"
    )
    return InstanceChoice(
        instance_type=row.instance_type, models_per_instance=row.models_per_instance, reason=reason
    )


__all__ = [
    "InstanceChoice",
    "cheapest_instance",
    "footprint_rows",
    "read_footprint",
    "sizing_result",
]
