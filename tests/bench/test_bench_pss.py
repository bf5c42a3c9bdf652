"""Acceptance: on CPU the emulator counts what the machine gives (PSS), not summed RSS.

One real tritonserver under the emulator, copies of a tiny TorchScript BERT (each copy a
Python-backend stub that imports torch): the emulator's used figure against PSS measured
independently (psutil), and a budget that holds N copies by PSS but not by RSS. Every
margin is a fraction of what the test measures here (one copy's own memory), so it holds
on machines whose torch runtime and copies weigh differently.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mmelocal.bench.capacity.footprint import marginal_bytes

pytestmark = [pytest.mark.triton, pytest.mark.slow]

MIB = 1024 * 1024
N = 4


@pytest.fixture(scope="module")
def bert_copies(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An emulator (real Triton, no budget limit yet) with N + 1 TorchScript BERT copies."""
    from mmelocal.bench.sources import resolve_model
    from mmelocal.builder.package import package_copies
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer

    root = tmp_path_factory.mktemp("pss")
    model = resolve_model(tiny_bert_dir, workdir=root, model_format="torchscript", verify=False)
    package_copies(model.path, root / "store", copies=N + 1)
    config = EmulatorConfig(
        store=str(root / "store"),
        cache_dir=root / "cache",
        memory_budget_bytes=64 * 1024**3,
        instances=1,
        gpus=(),
    )
    with EmulatorServer(config) as server:
        yield server


def _load(server: Any, target: str) -> None:
    inst = server.emulator.instances[0]

    async def load() -> None:
        await inst.acquire(target)
        inst.release(target)

    server.call(load(), timeout_s=300)


def _independent_tree(pid: int) -> tuple[int, int]:
    """(PSS, RSS) summed over ``pid`` and its descendants, read with psutil alone."""
    root = psutil.Process(pid)
    infos = [p.memory_full_info() for p in [root, *root.children(recursive=True)]]
    return sum(i.pss for i in infos), sum(i.rss for i in infos)


def test_pss_budget_loads_n_copies_without_eviction_and_reports_pss(bert_copies: Any) -> None:
    server = bert_copies
    emulator = server.emulator
    inst = emulator.instances[0]
    targets = [f"model-{i}.tar.gz" for i in range(N + 1)]
    empty = server.call(inst.read_memory())
    _load(server, targets[0])
    one = server.call(inst.read_memory())
    runtime = sum(inst.state.runtimes.values())  # what the first load kept apart, if any
    marginal = marginal_bytes(empty, one)
    assert marginal is not None and marginal > 10 * MIB
    assert one.rss_bytes is not None
    stub_rss = one.rss_bytes - (empty.rss_bytes or 0)
    # the budget: N copies by PSS plus 3/4 of one copy; the RSS sum of N copies exceeds it
    limit = one.used_bytes + int((N - 1 + 0.75) * marginal)
    assert one.rss_bytes + (N - 1) * stub_rss > limit, "RSS would not overstate here"
    inst.gauge.limit_override_bytes = limit  # copy 1 loaded alone: no budget evicts for it
    for target in targets[1:N]:
        _load(server, target)
    assert emulator.events.counts.get("evict", 0) == 0
    assert sorted(inst.loaded()) == sorted(targets[:N])

    # the used figure the emulator reports against PSS read independently just before and
    # just after it (no timing assumption: the band is what the tree itself did meanwhile)
    pss_before, _ = _independent_tree(inst.launcher.pid())
    reading = server.call(inst.read_memory())
    pss_after, rss = _independent_tree(inst.launcher.pid())
    low, high = sorted((pss_before, pss_after))
    assert 0.9 * low <= reading.used_bytes <= 1.1 * high, (low, reading.used_bytes, high)
    assert rss > limit >= reading.used_bytes, (rss / MIB, limit / MIB, reading.used_bytes / MIB)
    # the emulator kept each copy's own memory as its footprint, the runtime apart. Each
    # stub imports torch itself, so the runtime kept here is only what the server grew
    # by beside the first stub: none at all when other processes (more pytest workers)
    # map the same pages and the server's PSS shrinks. It is never more than the first
    # load grew the tree, and later loads do not add to it (tests/emulator/
    # test_loader_evictor.py checks the split itself from readings).
    assert all(b < 1.5 * marginal for b in inst.footprints.values()), inst.footprints
    assert 0 <= runtime <= one.used_bytes - empty.used_bytes, (runtime, one, empty)
    assert sum(inst.state.runtimes.values()) == runtime, inst.state.runtimes

    # one copy more than the budget holds: exactly one eviction, the least recently used
    _load(server, targets[N])
    assert emulator.events.counts.get("evict", 0) == 1
    assert sorted(inst.loaded()) == sorted(targets[1 : N + 1])
