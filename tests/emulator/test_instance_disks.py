"""Each instance's own disk, on real Triton servers: as each SageMaker instance has its
own ML storage volume, a model is downloaded by every instance that loads it, kept under
that instance's own disk budget, and published per instance (``DiskUtilization``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from emulator_helpers import payload

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import write_tarball

pytestmark = pytest.mark.triton

MiB = 1024 * 1024


def test_each_instance_downloads_and_keeps_its_own_artifacts(tmp_path: Path) -> None:
    """A model loaded on a second instance is downloaded there too, into that instance's
    own folder and budget (one cache served every instance: the second load found the
    first instance's artifact 'on disk' and downloaded nothing, and one budget held both
    instances' artifacts); DiskUtilization is each instance's own share."""
    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / "model-0.tar.gz", scale=2.0)
    config = EmulatorConfig(
        store=str(store),
        cache_dir=tmp_path / "cache",
        instances=2,
        memory_budget_bytes=1024 * MiB,
        disk_budget_bytes=64 * MiB,
    )
    target = "model-0.tar.gz"
    with EmulatorServer(config) as server:
        mme = MmeEndpoint(url=server.url, store=store, server=server)
        _, body = payload(rows=1)
        mme.invoke(target, body)
        emulator = server.emulator
        first = next(i for i in emulator.instances if i.is_ready(target))
        second = next(i for i in emulator.instances if i is not first)

        async def load_on_second() -> None:
            await second.acquire(target, wait_timeout_s=120.0)
            second.release(target)

        server.call(load_on_second(), timeout_s=180.0)
        downloads = [e for e in emulator.events.recent(limit=200) if e.kind == "download"]
        assert sorted(e.instance for e in downloads) == sorted([first.index, second.index])
        assert first.cache.root != second.cache.root
        assert {first.cache.root.name, second.cache.root.name} == {"artifacts", "artifacts-1"}
        for inst in (first, second):
            art = inst.cache.lookup(target)
            assert art is not None and art.entry_dir.is_relative_to(inst.cache.root)
        per_instance = emulator.disk_utilization_per_instance()
        share = 100.0 * first.cache.used_bytes / (64 * MiB)
        assert per_instance == [pytest.approx(share)] * 2
        assert server.call(_gauges(emulator))["DiskUtilization"] == pytest.approx(share)
        state = mme.state()
        assert state["cache_dir"] == str((tmp_path / "cache" / "artifacts").resolve())
        assert [i["cache_dir"] for i in state["instances"]] == [
            str(emulator.artifact_dir(i).resolve()) for i in (0, 1)
        ]
        # a scale-in takes the newest instance out, and its volume with it
        assert server.call(emulator.remove_instance(drain_timeout_s=30.0), timeout_s=120.0)
        assert not emulator.artifact_dir(1).exists() and emulator.artifact_dir(0).is_dir()


async def _gauges(emulator: object) -> dict[str, float]:
    return emulator.gauges()  # type: ignore[attr-defined,no-any-return]
