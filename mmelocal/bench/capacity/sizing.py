"""The instance type a store needs: the cheapest whose GPUs hold its hot set, per a
capacity measurement's projection (``count = floor((threshold*total - baseline) /
per_model)``, the count of one card whatever the instance's number of cards: Triton
places every model on each of them) and the price table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def read_footprint(path: Path, *, instead: str) -> CapacityResult | Estimate:
    """The `capacity estimate` result (an :class:`Estimate`) or the GPU
    :class:`CapacityResult` ``path`` holds (the first, in a file of several); a host-memory
    one is refused (CPU figures never project onto a GPU card), pointing to ``instead``:
    the option that gives the figure directly."""
    found = read_results(path)
    result = found[0] if found else None
    if not isinstance(result, (CapacityResult, Estimate)):
        raise UserInputError(
            f"{path}: no per-model footprint (a GPU result of `mmelocal capacity --json FILE`, "
            f"or a result of `mmelocal capacity estimate --json FILE`), or pass {instead}"
        )
    if isinstance(result, CapacityResult) and result.on_host_memory:
        raise UserInputError(host_memory_refusal(path, instead))
    return result


def _rows(path: Path) -> tuple[ProjectionRow, ...]:
    """The count per instance type of the projection, capacity or estimate result ``path``
    holds."""
    found = read_results(path)
    if found and isinstance(found[0], Projection):
        return found[0].rows
    try:
        result = read_footprint(path, instead="--instance-type")
    except UserInputError as exc:
        raise DeployError(str(exc)) from None
    if isinstance(result, Estimate):
        # the estimate's own count on each card: its per-copy parts and what it pays once
        gpus = load_gpus()
        cards = result.with_cards(gpus).cards
        return tuple(
            ProjectionRow(
                gpu=gpu.name,
                nominal=gpu.nominal,
                memory_bytes=gpu.memory_bytes,
                instance_type=instance,
                gpus_per_instance=count,
                models_per_gpu=card.point,
            )
            for gpu, card in zip(gpus, cards, strict=True)
            for instance, count in gpu.instances.items()
        )
    # the marginal / shared-runtime split of capacity's own projection, onto every card
    projection = with_projection(result, None).projection
    if projection is None:
        raise DeployError(f"{path}: the capacity result loaded no copy; pass --instance-type")
    return projection.rows


def cheapest_instance(
    capacity: Path | str, *, hot_models: int, prices: PriceTable | None = None
) -> InstanceChoice:
    """The cheapest priced instance type that holds ``hot_models`` loaded at once."""
    if hot_models < 1:
        raise DeployError(f"hot_models must be >= 1, got {hot_models}")
    rows = _rows(Path(capacity))
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


__all__ = ["InstanceChoice", "cheapest_instance", "read_footprint"]
