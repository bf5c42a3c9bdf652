"""Routing across instances: affinity, most free memory for cold models, hot replicas."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from emulator_helpers import payload
from shared_helpers import wait_for_async

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.instance import InstanceUnavailableError
from mmelocal.emulator.model_state import LOADING, READY, UNLOADING, InstanceOptions
from mmelocal.emulator.router import Router
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import write_tarball


@dataclass
class _Entry:
    in_flight: int = 0
    ready: bool = True
    unloading: bool = False

    @property
    def state(self) -> str:
        return UNLOADING if self.unloading else READY if self.ready else LOADING


@dataclass
class FakeInstance:
    index: int
    free_bytes: int
    up: bool = True
    models: dict[str, _Entry] = field(default_factory=dict)
    acquired: list[str] = field(default_factory=list)
    options: InstanceOptions = field(default_factory=InstanceOptions)

    def is_ready(self, target: str) -> bool:
        entry = self.models.get(target)
        return entry is not None and entry.ready

    async def acquire(self, target: str, **_: Any) -> None:
        self.models[target] = _Entry()
        self.acquired.append(target)

    def release(self, target: str) -> None:
        pass


def router(*instances: FakeInstance, **kw: Any) -> Router:
    return Router(instances, **kw)  # type: ignore[arg-type]


def test_affinity_then_most_free_memory() -> None:
    a, b = FakeInstance(0, free_bytes=100), FakeInstance(1, free_bytes=500)
    r = router(a, b)
    assert r.pick("cold") is b
    a.models["m"] = _Entry()
    assert r.pick("m") is a
    b.models["m"] = _Entry(in_flight=0)
    a.models["m"].in_flight = 3
    assert r.pick("m") is b  # both hold it: the less busy one
    a.models["loading"] = _Entry(ready=False)
    assert r.pick("loading") is a  # join the load in progress


def test_a_model_being_unloaded_counts_as_cold() -> None:
    """An instance evicting the target is not 'loading' it: a cold call goes where memory
    is free (it went to the instance short of memory, to wait for the unload and load the
    model there again)."""
    a, b = FakeInstance(0, free_bytes=100), FakeInstance(1, free_bytes=500)
    a.models["m"] = _Entry(ready=False, unloading=True)
    assert router(a, b).pick("m") is b


def test_down_instances_are_skipped() -> None:
    a, b = FakeInstance(0, free_bytes=900, up=False), FakeInstance(1, free_bytes=10)
    assert router(a, b).pick("x") is b
    b.up = False
    with pytest.raises(InstanceUnavailableError):
        router(a, b).pick("x")


def test_hot_model_gets_a_second_instance() -> None:
    async def run() -> tuple[FakeInstance, FakeInstance]:
        a, b = FakeInstance(0, free_bytes=100), FakeInstance(1, free_bytes=500)
        a.models["hot"] = _Entry()
        r = router(a, b, hot_rps_threshold=50, rate_window_s=0.05)

        def burst() -> list[str]:
            for _ in range(10):  # bursts: well over 50 requests/s even on a slow loop
                r.pick("hot")
            return b.acquired

        # between bursts the loop runs the replication task
        await wait_for_async(burst, timeout_s=30, interval_s=0.001, what="a second instance")
        return a, b

    _, b = asyncio.run(run())
    assert b.acquired == ["hot"]


@pytest.mark.triton
def test_two_instances_spread_cold_models(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    for i in range(2):
        write_tarball(store / f"model-{i}.tar.gz", scale=float(i + 1))
    config = EmulatorConfig(
        store=str(store), cache_dir=tmp_path / "cache", instances=2, memory_budget_bytes=1024**3
    )
    with EmulatorServer(config) as server:
        mme = MmeEndpoint(url=server.url, store=store, server=server)
        _, body = payload(rows=1)
        mme.invoke("model-0.tar.gz", body)
        mme.invoke("model-1.tar.gz", body)
        placed = {
            m["target"]: inst["index"] for inst in mme.state()["instances"] for m in inst["loaded"]
        }
        assert placed == {
            "model-0.tar.gz": placed["model-0.tar.gz"],
            "model-1.tar.gz": 1 - placed["model-0.tar.gz"],
        }
        pids = {inst["pid"] for inst in mme.state()["instances"]}
        assert len(pids) == 2
