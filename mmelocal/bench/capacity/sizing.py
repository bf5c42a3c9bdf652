"""The instance type a store needs: the cheapest whose GPUs hold its hot set, per a
capacity measurement's projection (``count = floor((threshold*total - baseline) /
per_model)``, the count of one card whatever the instance's number of cards: Triton
places every model on each of them) and the price table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mmelocal.bench.capacity.loop import with_projection
from mmelocal.bench.capacity.projection import Projection
from mmelocal.bench.capacity.result import CapacityResult, host_memory_refusal
from mmelocal.bench.prices import PriceTable, load_prices
from mmelocal.bench.results import read_results
from mmelocal.errors import DeployError


@dataclass(frozen=True, kw_only=True)
class InstanceChoice:
    """The chosen instance type and one sentence that says why."""

    instance_type: str
    models_per_instance: int
    reason: str


def _projection(path: Path) -> Projection:
    for result in read_results(path):
        if isinstance(result, Projection):
            return result
        if isinstance(result, CapacityResult):
            if result.on_host_memory:
                raise DeployError(host_memory_refusal(path, "--instance-type"))
            # the marginal / shared-runtime split of capacity's own projection, onto every card
            projection = with_projection(result, None).projection
            if projection is not None:
                return projection
    raise DeployError(
        f"{path} holds no capacity or projection result with a per-model footprint: "
        "run 'mmelocal capacity ... --json FILE' or pass --instance-type"
    )


def cheapest_instance(
    capacity: Path | str, *, hot_models: int, prices: PriceTable | None = None
) -> InstanceChoice:
    """The cheapest priced instance type that holds ``hot_models`` loaded at once."""
    if hot_models < 1:
        raise DeployError(f"hot_models must be >= 1, got {hot_models}")
    projection = _projection(Path(capacity))
    prices = prices if prices is not None else load_prices()
    fitting = [
        row
        for row in projection.rows
        if row.instance_type and row.models_per_instance >= hot_models
    ]
    priced = [(prices.price_for(r.instance_type), r) for r in fitting]
    ranked = sorted(
        ((price, row) for price, row in priced if price is not None),
        key=lambda pair: (pair[0], -pair[1].models_per_instance),
    )
    if not ranked:
        best = max((r.models_per_instance for r in projection.rows), default=0)
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


__all__ = ["InstanceChoice", "cheapest_instance"]
