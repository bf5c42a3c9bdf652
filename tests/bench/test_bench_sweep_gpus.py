"""A local sweep starts its Triton on exactly the GPUs it checked against the instance type
(NVML is the stand-in: no GPU here; the server, the load test and the process are real)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from shared_helpers import StandInNvml, tritonservers

from mmelocal.bench.sweep.runner import SweepOptions, run_sweep, users_shape
from mmelocal.builder.payload import REFERENCE_FILE
from mmelocal.testing.tiny_model import write_model

pytestmark = pytest.mark.triton


def _model(root: Path) -> Path:
    folder = write_model(root, name="plus_one", scale=1.0)
    x = np.ones((1, 4), np.float32)
    np.savez(folder / REFERENCE_FILE, **{"input:INPUT0": x, "output:OUTPUT0": x + 1})
    return folder


def _server_environment(before: set[int]) -> dict[str, str]:
    """The environment of the tritonserver started since ``before`` (pids of those running
    then: a session's own test server, started by an earlier test, is not the sweep's)."""
    started = [p for p in tritonservers() if p.pid not in before]
    assert len(started) == 1, f"tritonservers started by the sweep: {started}"
    return started[0].environ()


@pytest.mark.parametrize(
    ("chosen", "visible", "expected"),
    [
        ((2,), "0,1,2,3", "GPU-00000002-0000-0000-0000-000000000002"),
        (None, "GPU-00000001", "GPU-00000001"),
    ],
)
def test_the_server_runs_on_the_gpus_the_sweep_sized(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    chosen: tuple[int, ...] | None,
    visible: str,
    expected: str,
) -> None:
    """On a 4-T4 machine, ml.g4dn.xlarge (1 T4) is swept on one card, and the Triton the
    load test measures sees that card alone (CUDA_VISIBLE_DEVICES in its environment)."""
    four_t4 = StandInNvml(
        dict.fromkeys(range(4), 0), names=("Tesla T4",) * 4, total_bytes=15360 * 2**20
    )
    monkeypatch.setitem(sys.modules, "pynvml", four_t4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    seen: list[dict[str, str]] = []
    before = {p.pid for p in tritonservers()}

    def progress(message: str) -> None:
        if "load test" in message:  # the server is up, the variant loaded
            seen.append(_server_environment(before))

    options = SweepOptions(
        instance_type="ml.g4dn.xlarge",
        gpu_indices=chosen,
        dynamic_batching=(False,),
        instances=(1,),
        shape=users_shape((1,), step_s=1.0),
        workdir=tmp_path,
        verify=False,
    )
    result = run_sweep(_model(tmp_path / "repo"), options=options, progress=progress)
    assert [row.status for row in result.rows] == ["ok"], [r.reason for r in result.rows]
    assert len(seen) == 1 and seen[0]["CUDA_VISIBLE_DEVICES"] == expected
    assert "1 x Tesla T4" in result.machine
