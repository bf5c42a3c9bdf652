"""``make gpu-proof``: its no-GPU path, and the format of its report.

The report test fills the report with synthetic numbers: it checks the JSON and markdown
writer only (a format test, not a measurement; no GPU result is claimed here).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mmelocal.bench.capacity.projection import project
from mmelocal.bench.capacity.result import CapacityResult, LoadRecord

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_proof.py"
MIB = 1024 * 1024


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_proof", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_it_says_so_in_one_line_and_fails(tmp_path: Path) -> None:
    if _script().nvidia_smi() is not None:  # the script's own test for a GPU
        pytest.skip("this machine has an NVIDIA GPU: the no-GPU path cannot be shown here")
    out = tmp_path / "out"
    done = subprocess.run(
        ["make", "-s", "gpu-proof", f"GPU_PROOF_OUT={out}", f"WHEELS={tmp_path / 'none'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stdout.strip().splitlines()
    assert lines == [
        "gpu-proof: no NVIDIA GPU here (nvidia-smi absent or reports none); nothing run"
    ]
    assert not out.exists()  # nothing installed, nothing written


def test_report_format_with_synthetic_numbers(tmp_path: Path) -> None:
    gpu_proof = _script()
    loads = tuple(
        LoadRecord(
            copies=i,
            target=f"model-{i}.tar.gz",
            used_bytes=(500 + 100 * i + (400 if i else 0)) * MIB,
            delta_bytes=(500 if i == 1 else 100) * MIB,
            load_s=1.0,
            warmup_s=0.1,
            marginal_bytes=100 * MIB,
        )
        for i in (1, 2, 3)
    )
    capacity = CapacityResult(
        source="synthetic",
        label="synthetic model",
        model_format="torchscript",
        probe="nvml:0",
        total_bytes=4000 * MIB,
        threshold=0.9,
        baseline_bytes=500 * MIB,
        loads=loads,
        next_copy=None,
        stopped_reason="reached max copies (3)",
        projection=project(per_model_bytes=100 * MIB, baseline_bytes=500 * MIB, threshold=0.9),
    )
    report = gpu_proof.GpuProofReport(
        gpu={"name": "Synthetic GPU", "driver": "0.0"},
        started_at="2026-01-01T00:00:00+00:00",
        nvml={"used_mib": 1000, "total_mib": 4000, "used_minus_smi_mib": 0},
        nvidia_smi={"used_mib": 1000, "total_mib": 4000},
        gpu_tests={"exit_code": 0, "summary": "3 passed"},
        capacity=[capacity.to_dict()],
        format_only=True,
    )
    json_path, md_path = gpu_proof.write_report(report, tmp_path / "out")
    data = json.loads(json_path.read_text())
    assert data["kind"] == "gpu-proof" and data["format_only"] is True
    assert data["capacity"][0]["implied_count"] == capacity.implied_count == 27
    markdown = md_path.read_text()
    assert "Format test with synthetic numbers: not a measurement." in markdown
    assert "| NVML probe | 1000 | 4000 |" in markdown
    assert "| nvidia-smi | 1000 | 4000 |" in markdown
    # copy 100 MiB, runtime once 400 MiB: floor((3600 - 500 - 400) / 100) = 27 copies
    assert "| synthetic model | 3 | 500 | 100 | 400 | 27 |" in markdown
    assert "| H100 |" in markdown and "gpu tests: 3 passed" in markdown


def test_a_gpu_test_module_that_needs_what_does_not_travel_is_listed_not_run(
    tmp_path: Path,
) -> None:
    """On the GPU machine a marked module that imports boto3 (absent there) failed the
    whole proof as a collection error; it is listed as not run, with what it needs (the
    tests' own helper modules are not packages to install)."""
    gpu_proof = _script()
    module = tmp_path / "test_needs.py"
    module.write_text(
        "import json\nimport no_such_package_here\nfrom shared_helpers import unique\n"
        "from no_such_other.sub import x\n"
    )
    found = gpu_proof.missing_imports(module, gpu_proof.tests_own_modules())
    assert found == ["no_such_other", "no_such_package_here"]
    report = gpu_proof.GpuProofReport(gpu={"name": "T"}, started_at="now")
    report.gpu_tests = {
        "summary": "4 passed",
        "not_run": {"tests/x/test_needs.py": "needs boto3, which does not travel"},
    }
    assert "- not run here: tests/x/test_needs.py (needs boto3, which does not travel)" in (
        report.markdown()
    )
