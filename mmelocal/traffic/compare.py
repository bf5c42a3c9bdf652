"""Replayed vs simulated: a simulation set up from what a replay measured, and how far the
two agree (the validation the Traffic page reports)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmelocal.errors import UserInputError
from mmelocal.traffic.results import TrafficResult
from mmelocal.traffic.simulate import LoadTimes, SimConfig

#: the agreement the validation asks for
MAX_HIT_RATIO_POINTS = 5.0
MAX_COLD_STARTS_RELATIVE = 0.15


def config_from_replay(
    replayed: TrafficResult, *, instances: int | None = None, seed: int = 0
) -> SimConfig:
    """The simulation of the endpoint a replay measured: capacity per instance = the most
    models one emulator instance held ready at once (identical copies: memory-based
    eviction acts as a model count), load times = how long each load held its instance,
    service time = the warm p50. ``instances`` defaults to the emulator's instance count.

    A replay written before it recorded each instance's most (``max_loaded_per_instance``)
    has only the fleet's total: that is one instance's capacity only for one instance."""
    data = replayed.data
    count = instances if instances is not None else int(data.get("emulator_instances") or 1)
    if count < 1:
        raise UserInputError(f"instances must be >= 1, got {count}")
    per_instance = data.get("max_loaded_per_instance")
    if per_instance is None:
        if count > 1:
            raise UserInputError(
                "the replay records only the models loaded on all instances together (no "
                "max_loaded_per_instance), not what one instance holds: replay again with "
                "this version, or simulate one instance"
            )
        per_instance = data.get("max_loaded")
    capacity = int(per_instance or 0)
    if capacity < 1:
        raise UserInputError("the replay saw no model loaded: nothing to take a capacity from")
    cycles = tuple(data.get("load_cycle_s") or data.get("cold_load_s") or ())
    if not cycles:
        raise UserInputError("the replay recorded no load: nothing to take load times from")
    warm = data["latency_ms"]["warm"]["p50"]
    return SimConfig(
        instances=count,
        models_per_instance=capacity,
        load=LoadTimes(samples_s=cycles, source="measured by the replay"),
        service_s=None if warm is None else warm / 1e3,
        seed=seed,
    )


@dataclass(frozen=True)
class Agreement:
    """How far a simulation is from the replay it models."""

    hit_ratio_replayed: float
    hit_ratio_simulated: float
    cold_starts_replayed: int
    cold_starts_simulated: int

    @property
    def hit_ratio_points(self) -> float:
        """The difference in hit ratio, in percentage points."""
        return abs(self.hit_ratio_simulated - self.hit_ratio_replayed) * 100

    @property
    def cold_starts_relative(self) -> float:
        """The difference in cold starts relative to the replay's."""
        return abs(self.cold_starts_simulated - self.cold_starts_replayed) / max(
            1, self.cold_starts_replayed
        )

    @property
    def holds(self) -> bool:
        """Within 5 points of hit ratio and 15 % of cold starts."""
        return (
            self.hit_ratio_points <= MAX_HIT_RATIO_POINTS
            and self.cold_starts_relative <= MAX_COLD_STARTS_RELATIVE
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {
            "hit_ratio_replayed": self.hit_ratio_replayed,
            "hit_ratio_simulated": self.hit_ratio_simulated,
            "hit_ratio_points": self.hit_ratio_points,
            "cold_starts_replayed": self.cold_starts_replayed,
            "cold_starts_simulated": self.cold_starts_simulated,
            "cold_starts_relative": self.cold_starts_relative,
            "holds": self.holds,
        }


def agreement(replayed: TrafficResult, simulated: TrafficResult) -> Agreement:
    """Compare the headline figures of a replay and its simulation."""
    return Agreement(
        hit_ratio_replayed=float(replayed["hit_ratio"] or 0.0),
        hit_ratio_simulated=float(simulated["hit_ratio"] or 0.0),
        cold_starts_replayed=int(replayed["cold_starts"]),
        cold_starts_simulated=int(simulated["cold_starts"]),
    )


__all__ = [
    "MAX_COLD_STARTS_RELATIVE",
    "MAX_HIT_RATIO_POINTS",
    "Agreement",
    "agreement",
    "config_from_replay",
]
