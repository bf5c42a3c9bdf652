"""Capacity on a tiny Python-backend model: the predictive stop on the real server, and NVML."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.bench.capacity.loop import CapacityOptions, measure_capacity

MIB = 1024 * 1024


def _payload() -> bytes:
    import json

    import numpy as np

    from mmelocal.testing.tiny_model import request_json

    return json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()


@pytest.fixture(scope="module")
def tiny_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mmelocal.testing.tiny_model import write_tarball

    return write_tarball(tmp_path_factory.mktemp("tiny") / "tiny.tar.gz")


@pytest.mark.triton
@pytest.mark.slow
def test_predictive_stop_never_loads_over_the_threshold(tiny_tarball: Path) -> None:
    # each tiny copy is a Python stub of ~35-40 MiB RSS: 300 MiB (limit 270) holds ~6
    options = CapacityOptions(memory_budget_bytes=300 * MIB, verify_next=False, max_copies=20)
    result = measure_capacity(tiny_tarball, options=options, payload=_payload())
    assert result.count >= 2 and result.next_copy is None
    assert "would cross" in result.stopped_reason
    assert all(load.used_bytes <= result.limit_bytes for load in result.loads)
    assert result.per_model_mean_bytes is not None
    last = result.loads[-1].used_bytes
    # the prediction held: the next copy adds what the copies after the first added
    later = [load.delta_bytes for load in result.loads[1:]]
    assert last + sum(later) / len(later) > result.limit_bytes
    assert result.projected_count is not None and abs(result.projected_count - result.count) <= 1
    assert all(load.warmup_s > 0 for load in result.loads)  # an inference before each reading


@pytest.mark.mmelocal_gpu
@pytest.mark.triton
def test_gpu_capacity_reads_nvml(tiny_tarball: Path) -> None:
    options = CapacityOptions(max_copies=2, use_gpu=True)
    result = measure_capacity(tiny_tarball, options=options, payload=_payload())
    assert result.probe.startswith("nvml") and result.total_bytes > 0
    assert result.count >= 1
