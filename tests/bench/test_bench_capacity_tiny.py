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
    # each tiny copy (a Python stub) adds ~22 MiB of PSS, the first ~45: 200 MiB (limit 180)
    # holds ~6 (57, 81, ..., 167 MiB measured)
    options = CapacityOptions(memory_budget_bytes=200 * MIB, verify_next=False, max_copies=20)
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


#: the used memory of each GPU of the stand-in NVML (no GPU here)
GPU_USED = {0: 5 * 2**30, 1: 7 * 2**30}


@pytest.mark.triton
def test_capacity_measures_the_gpu_cuda_visible_devices_names(
    tiny_tarball: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With CUDA_VISIBLE_DEVICES=1 on a two-GPU host, Triton runs on GPU 1 (by its UUID)
    and the readings are GPU 1's: a real Triton (CPU) and loads, NVML a stand-in."""
    import sys

    from shared_helpers import StandInNvml

    import mmelocal.runtime.launchers as launchers

    nvml = StandInNvml(GPU_USED, names=("NVIDIA A10G",) * 2)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    envs: list[dict[str, str]] = []
    real = launchers.make_launcher

    def seen(kind: str, config: object, **kw: object) -> object:
        envs.append(dict(config.env))  # type: ignore[attr-defined]
        return real(kind, config, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr("mmelocal.emulator.emulator.make_launcher", seen)
    options = CapacityOptions(max_copies=1, verify_next=False)
    result = measure_capacity(tiny_tarball, options=options, payload=_payload())
    assert result.probe == "nvml:1"
    assert result.baseline_bytes == GPU_USED[1]
    assert [e.get("CUDA_VISIBLE_DEVICES") for e in envs] == [nvml.nvmlDeviceGetUUID(1)]


def test_capacity_with_every_gpu_hidden_measures_host_memory(
    tiny_tarball: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA_VISIBLE_DEVICES set to nothing hides the GPUs from Triton: the run is a host
    memory run, which needs a budget (not a GPU run that reads a card Triton cannot use)."""
    import sys

    from shared_helpers import StandInNvml

    from mmelocal.errors import UserInputError

    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml(GPU_USED, names=("T4",) * 2))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(UserInputError, match=r"no GPU \(CUDA_VISIBLE_DEVICES=\).*memory budget"):
        measure_capacity(tiny_tarball, options=CapacityOptions(max_copies=1))
