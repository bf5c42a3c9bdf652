"""A simulation set up from a replay (mmelocal.traffic.compare) and the replay's record of
the emulator's loaded set, read from a real HTTP server."""

from __future__ import annotations

import asyncio
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


def test_the_replay_records_the_most_one_instance_held() -> None:
    aiohttp = pytest.importorskip("aiohttp")
    from aiohttp import web

    from mmelocal.traffic.replay import STATE_PATH, _poll_state

    def entry(state: str) -> dict[str, str]:
        return {"state": state}

    states = [
        [[entry("ready")] * 3 + [entry("loading")], [entry("ready")] * 2],  # 5 in all, 3 max
        [[entry("ready")], [entry("ready")] * 2],
    ]
    served: list[int] = []
    both_served = asyncio.Event()

    async def state(request: web.Request) -> web.Response:
        instances = states[min(len(served), len(states) - 1)]
        served.append(1)
        if len(served) == len(states):
            both_served.set()
        return web.json_response(
            {"instances": [{"loaded": i} for i in instances], "events": [], "event_counts": {}}
        )

    async def run() -> dict[str, Any]:
        app = web.Application()
        app.router.add_get(STATE_PATH, state)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        out: dict[str, Any] = {}
        stop = asyncio.Event()
        try:
            async with aiohttp.ClientSession() as session:
                poll = asyncio.ensure_future(
                    _poll_state(session, f"http://127.0.0.1:{port}", 0.001, stop, out)
                )
                await asyncio.wait_for(both_served.wait(), timeout=30)
                stop.set()
                await poll
        finally:
            await runner.cleanup()
        return out

    out = asyncio.run(run())
    assert max(count for _, count in out["samples"]) == 5
    assert out["max_loaded_per_instance"] == 3 and out["instance_count"] == 2
