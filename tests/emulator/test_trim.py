"""The watchdog trims a loaded set that grew over the limit after its loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from emulator_helpers import payload, wait_for

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import write_tarball

pytestmark = pytest.mark.triton


def test_loaded_set_over_the_limit_is_trimmed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    for i in range(3):
        write_tarball(store / f"model-{i}.tar.gz", scale=float(i + 1))
    config = EmulatorConfig(store=str(store), cache_dir=tmp_path / "cache")
    with EmulatorServer(config) as server:
        mme = MmeEndpoint(url=server.url, store=store, server=server)
        _, body = payload(rows=1)
        for i in range(3):
            mme.invoke(f"model-{i}.tar.gz", body)
        state_page = mme.state()
        inst = state_page["instances"][0]
        used, footprint = inst["memory_used_bytes"], min(state_page["footprints_bytes"].values())
        # what each loaded model holds, beside the most it was measured at (its next load's)
        held = {e["target"]: e["footprint_bytes"] for e in inst["loaded"]}
        assert state_page["held_footprints_bytes"] == held
        # as if the models had grown: the limit now holds one model less
        server.emulator.instances[0].gauge.limit_override_bytes = used - footprint // 2

        def evicted() -> dict[str, Any] | None:
            state: dict[str, Any] = mme.state()
            return state if state["event_counts"]["evict"] >= 1 else None

        state = wait_for(evicted)
        evictions = [e for e in state["events"] if e["kind"] == "evict"]
        assert [e["target"] for e in evictions] == ["model-0.tar.gz"]
        assert "grew over the limit" in evictions[0]["reason"]
