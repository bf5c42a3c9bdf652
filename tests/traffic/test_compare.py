"""A simulation set up from a replay (mmelocal.traffic.compare) and the replay's record of
the emulator's loaded set, read from a real HTTP server."""

from __future__ import annotations

from typing import Any

import pytest

from mmelocal.errors import UserInputError
from mmelocal.traffic.compare import config_from_replay
from mmelocal.traffic.results import TrafficResult


def _replayed(**data: Any) -> TrafficResult:
    base: dict[str, Any] = {
        "hit_ratio": 0.5,
        "max_loaded": 8,
        "load_cycle_s": [2.0, 3.0],
        "latency_ms": {"warm": {"p50": 5.0}},
    }
    return TrafficResult({**base, **data})


def test_a_replays_capacity_is_per_instance() -> None:
    """Two instances held 8 models at once between them, at most 4 each: each simulated
    instance holds 4, not the fleet's 8."""
    replayed = _replayed(max_loaded_per_instance=4, emulator_instances=2)
    config = config_from_replay(replayed)
    assert (config.instances, config.models_per_instance) == (2, 4)
    assert config_from_replay(replayed, instances=3).models_per_instance == 4
    one = _replayed(max_loaded_per_instance=8, emulator_instances=1)
    assert config_from_replay(one).models_per_instance == 8


def test_a_replay_without_per_instance_figures_is_refused_for_several_instances() -> None:
    old = _replayed()  # written before the replay recorded each instance's most
    assert config_from_replay(old).models_per_instance == 8  # one instance: the fleet's
    with pytest.raises(UserInputError, match="not what one instance holds"):
        config_from_replay(old, instances=2)
