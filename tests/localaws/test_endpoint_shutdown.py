"""The endpoint manager at the local AWS's shutdown (``EndpointManager.close``): creations
under way are given up, not waited for, and the whole close is bounded. Fleets here are
stand-ins: a start that waits until the fleet is stopped (a Triton not ready yet), or a
transition that does not end (a delete waiting for a call in flight)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shared_helpers import wait_for

from mmelocal.errors import EndpointFailedError
from mmelocal.localaws.endpoints import EndpointManager, EndpointState
from mmelocal.localaws.fleet import FleetPlan
from mmelocal.localaws.variants import EndpointPlan, VariantFleets


def _variant(endpoint: str, name: str) -> FleetPlan:
    return FleetPlan(
        endpoint_name=endpoint, config_name="c", bucket="b", prefix="p/", instances=1,
        instance_type="ml.g5.xlarge", variant_name=name,
    )  # fmt: skip


def _plan(endpoint: str, variants: int) -> EndpointPlan:
    plans = tuple(_variant(endpoint, f"V{i}") for i in range(variants))
    return EndpointPlan(endpoint_name=endpoint, config_name="c", variants=plans)


class SlowFleet:
    """A fleet whose start waits until it is stopped (its Triton never answers here)."""

    def __init__(self, plan: FleetPlan) -> None:
        self.plan = plan
        self.entered = threading.Event()
        self.stopped = threading.Event()

    def start(self) -> None:
        self.entered.set()
        if self.stopped.wait(timeout=60):
            raise EndpointFailedError("stopped while starting")

    def stop(self) -> None:
        self.stopped.set()


def test_close_stops_the_creations_under_way_at_once(tmp_path: Path) -> None:
    """Two endpoints Creating (one of two variants), their Triton not ready: close() stops
    every fleet being started and returns, rather than waiting for their start (30 s per
    endpoint, and their Triton went on running); no fleet starts after it, and neither
    endpoint is shown in service."""
    fleets: list[SlowFleet] = []

    def start_fleet(plan: FleetPlan, _: Path) -> Any:
        fleet = SlowFleet(plan)
        fleets.append(fleet)
        manager.launches.start(fleet)  # type: ignore[arg-type]
        return fleet

    manager = EndpointManager(
        describe=lambda _r, name, _c: _plan(name, 2 if name == "two" else 1),
        start_fleet=start_fleet,
        forget=lambda *_: None,
        work_dir=tmp_path,
    )
    states = []
    for name in ("one", "two"):
        state = manager.create("r", name, "c")
        assert state is not None
        manager.start(state)
        states.append(state)
    wait_for(lambda: len(fleets) == 3 and all(f.entered.is_set() for f in fleets), timeout_s=30)
    t0 = time.monotonic()
    manager.close(timeout_s=30)
    assert time.monotonic() - t0 < 10
    assert all(f.stopped.is_set() for f in fleets)
    assert not any(w.is_alive() for s in states for w in s.workers)
    assert [s.status for s in states] == ["Creating", "Creating"]  # as saved before the stop
    with pytest.raises(EndpointFailedError, match="stopped while the endpoint was being created"):
        manager.launches.start(SlowFleet(_variant("late", "V0")))  # type: ignore[arg-type]


def test_close_waits_its_timeout_in_all_not_per_endpoint(tmp_path: Path) -> None:
    """Four endpoints being deleted, each waiting for a call in flight that does not end:
    close(timeout_s=1) returns after about 1 s in all (it waited the timeout once per
    endpoint, 4 s here; 30 s each by default)."""
    release = threading.Event()
    manager = EndpointManager(
        describe=lambda *_: _plan("e", 1),
        start_fleet=lambda *_: None,  # type: ignore[arg-type, return-value]
        forget=lambda *_: None,
        work_dir=tmp_path,
    )
    for i in range(4):
        fleet = SimpleNamespace(
            plan=_variant(f"e{i}", "V0"), instance_count=1, inflight=1,
            drain=lambda _timeout_s: release.wait(30), stop=lambda: None,
        )  # fmt: skip
        fleets = VariantFleets(_plan(f"e{i}", 1), [fleet])  # type: ignore[list-item]
        manager._endpoints[("r", f"e{i}")] = EndpointState(
            region="r", name=f"e{i}", status="InService", fleets=fleets
        )
        assert manager.delete("r", f"e{i}")
    try:
        t0 = time.monotonic()
        manager.close(timeout_s=1.0)
        assert time.monotonic() - t0 < 2.5
    finally:
        release.set()
