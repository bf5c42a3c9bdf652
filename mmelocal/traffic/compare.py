"""Replayed vs simulated: a simulation set up from what a replay measured, and how far the
two agree (the validation the Traffic page reports).

A replay at ``--speed K`` sent the trace K times faster: the endpoint saw that compressed
traffic (its hit ratio and cold starts are those of it), against load times that were not
compressed. It is compared with a simulation of the same compressed traffic
(:func:`simulate_replay`); :func:`agreement` refuses a simulation at another speed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mmelocal.errors import UserInputError
from mmelocal.traffic.results import TrafficResult
from mmelocal.traffic.simulate import LoadTimes, SimConfig, simulate
from mmelocal.traffic.trace import Trace

#: the agreement the validation asks for
MAX_HIT_RATIO_POINTS = 5.0
MAX_COLD_STARTS_RELATIVE = 0.15


def config_from_replay(
    replayed: TrafficResult, *, instances: int | None = None, seed: int = 0
) -> SimConfig:
    """The simulation of the endpoint a replay measured: the capacity per instance
    (:func:`replay_capacity`: the emulator's memory rule when its state page gave it);
    load times = how long each load held its instance, service time = the warm p50; the
    emulator's load wait, load limit, busy wait and hot-model threshold
    (:func:`emulator_options`). A replay of another server, or an older result, has the
    platform's waits and limits and the count it saw. ``instances`` defaults to the
    emulator's instance count."""
    data = replayed.data
    count = instances if instances is not None else int(data.get("emulator_instances") or 1)
    if count < 1:
        raise UserInputError(f"instances must be >= 1, got {count}")
    cycles = tuple(data.get("load_cycle_s") or data.get("cold_load_s") or ())
    if not cycles:
        raise UserInputError("the replay recorded no load: nothing to take load times from")
    warm = data["latency_ms"]["warm"]["p50"]
    return SimConfig(
        instances=count,
        **replay_capacity(data, count),
        **emulator_options(data),
        load=LoadTimes(samples_s=cycles, source="measured by the replay"),
        service_s=None if warm is None else warm / 1e3,
        seed=seed,
    )


def replay_capacity(data: Mapping[str, Any], instances: int = 1) -> dict[str, Any]:
    """The capacity per instance of the endpoint a replay measured, as :class:`SimConfig`
    fields: the emulator's memory (:func:`replay_memory`) when its state page gave it, else
    the most models one instance held ready at once (a replay of another server, or one
    written before the replay recorded the memory)."""
    return replay_memory(data) or {"models_per_instance": _models_seen(data, instances)}


def replay_memory(data: Mapping[str, Any]) -> dict[str, Any]:
    """The emulator's own capacity rule, as :class:`SimConfig` fields (empty when the replay
    did not record it): a load fits when what the loaded models hold plus what the new
    model's load plans for stays within the memory limit (the threshold x the budget) less
    the idle server's memory and the runtimes its models brought (``memory_room_bytes``,
    the smallest of its instances, from ``mmelocal serve``'s ``/emulator/state``).

    A loaded model holds what the emulator last measured it at while loaded
    (``held_footprints_bytes``); a load plans for the most the model was measured at
    (``footprints_bytes``: its eviction plans with that). The two differ on a CPU host,
    where a stub's PSS divides the pages it shares among the stubs loaded beside it: the
    tiny model's stub holds 23-24.5 MiB beside two more and up to 28 MiB alone, so
    counting every loaded model at its most held 2 where the emulator held 3. A replay
    with no held figures counts loaded models at the most too. 0 is a measured figure (a
    GPU model whose processes hold none of the card); a model the emulator never loaded
    counts at the others' mean.

    Not a count: models of different sizes share the memory as in the emulator."""
    room = data.get("memory_room_bytes")
    most = _figures(data.get("footprints_bytes"))
    if room is None or int(room) <= 0 or not any(b > 0 for b in most.values()):
        return {}
    held = {**most, **_figures(data.get("held_footprints_bytes"))}
    return {
        "memory_limit_bytes": int(room),
        "footprint_bytes": held,
        "default_footprint_bytes": int(sum(held.values()) / len(held)),
        "load_footprint_bytes": most,
    }


def _figures(figures: Mapping[str, Any] | None) -> dict[str, int]:
    """A state page's bytes per target, the unknown ones left out."""
    return {str(t): int(b) for t, b in (figures or {}).items() if b is not None}


def _models_seen(data: Mapping[str, Any], count: int) -> int:
    """The most models one instance held ready at once, as the replay saw them.

    A replay written before it recorded each instance's most (``max_loaded_per_instance``)
    has only the fleet's total: that is one instance's capacity only for one instance."""
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
    return capacity


#: the emulator's option (its state page's name) -> the simulation's
_OPTIONS = {
    "load_wait_timeout_s": "load_wait_timeout_s",
    "load_timeout_s": "load_limit_s",
    "busy_wait_s": "busy_wait_s",
    "hot_rps_threshold": "hot_rps_threshold",
}


def emulator_options(data: Mapping[str, Any]) -> dict[str, Any]:
    """The emulator's waits and limits a replay recorded (its state page's ``options``), as
    :class:`SimConfig` fields (empty for a replay of another server, or an older one)."""
    options = data.get("emulator_options") or {}
    return {_OPTIONS[k]: float(v) for k, v in options.items() if k in _OPTIONS and v is not None}


def _speed(result: TrafficResult) -> float:
    """The speed a result's traffic ran at (a replay's ``--speed``; 1 when not recorded)."""
    return float(result.data.get("speed") or 1.0)


def simulate_replay(
    trace: Trace, replayed: TrafficResult, *, instances: int | None = None, seed: int = 0
) -> TrafficResult:
    """Simulate the traffic a replay of ``trace`` sent, on the endpoint it measured
    (:func:`config_from_replay`): the trace at the replay's speed (every time divided by
    it), so the result can be compared with the replay (:func:`agreement`). Its timeline
    and per-minute rates are on that sped-up clock; its ``speed`` says so."""
    speed = _speed(replayed)
    requests = replayed.data.get("requests")
    if requests is not None and int(requests) != len(trace):
        raise UserInputError(
            f"the replay sent {int(requests):,} requests and this trace has {len(trace):,}: "
            "give the trace that was replayed"
        )
    result = simulate(
        trace.sped_up(speed), config_from_replay(replayed, instances=instances, seed=seed)
    )
    result.data["speed"] = speed
    if speed != 1.0:
        result.data.setdefault("notes", []).append(
            f"Simulated the trace at the replay's --speed {speed:g} (every time divided by "
            f"{speed:g}), the traffic the replay sent: its timeline and rates are on that clock."
        )
    return result


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
    """Compare the headline figures of a replay and its simulation, which must have run the
    same traffic: a replay at ``--speed K`` against a simulation of the trace at speed K
    (:func:`simulate_replay`), else a UserInputError says so."""
    replay_speed, simulated_speed = _speed(replayed), _speed(simulated)
    if replay_speed != simulated_speed:
        raise UserInputError(
            f"the replay ran at --speed {replay_speed:g} and the simulation at "
            f"{simulated_speed:g}: the endpoint saw the trace {replay_speed:g} times faster, "
            "so its hit ratio and cold starts are those of that traffic; simulate the same "
            "(compare.simulate_replay(trace, replayed) divides the trace's times by the "
            "replay's speed)"
        )
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
    "emulator_options",
    "replay_capacity",
    "replay_memory",
    "simulate_replay",
]
