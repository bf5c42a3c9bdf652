"""Every Python example in examples/ runs, as a user runs it: its own process, its own
folder, and it checks its own answers (an example that fails exits non-zero).

The docs include these files (pymdownx.snippets), so what the docs show is what runs here.
The deploy example runs in tests/deploy/test_deploy_example.py (it needs moto's server),
test_my_endpoint.py in tests/testing/test_remote_endpoint.py (on the emulator and on a
deployed endpoint).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, timeout_s: float = 600) -> str:
    """Run ``examples/NAME`` with this Python; its stdout (stderr in the failure)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def test_every_example_is_run_by_a_test() -> None:
    here = "".join(
        (Path(__file__).parent / name).read_text()
        for name in (
            "test_examples.py",
            "deploy/test_deploy_example.py",
            "testing/test_remote_endpoint.py",
        )
    )
    python_examples = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert python_examples and all(f'"{name}"' in here for name in python_examples)


def test_package_and_validate(tmp_path: Path) -> None:
    out = run_example("package_and_validate.py", str(tmp_path))
    assert "3 tarballs" in out and "store ok" in out
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [
        "model-0.tar.gz",
        "model-1.tar.gz",
        "model-2.tar.gz",
    ]


def test_build_from_module(tmp_path: Path) -> None:
    out = run_example("build_from_module.py", str(tmp_path / "repo"))
    assert "verified: max abs diff" in out
    assert (tmp_path / "repo" / "mean-pooled" / "1" / "model.onnx").is_file()


@pytest.mark.triton
def test_serve_and_invoke(tmp_path: Path) -> None:
    out = run_example("serve_and_invoke.py", str(tmp_path))
    assert "model-1.tar.gz (warm): [1.0, 3.0, 5.0, 7.0]" in out
    assert "model-2.tar.gz (warm): [1.0, 4.0, 7.0, 10.0]" in out
    assert "loaded: 2" in out


@pytest.mark.triton
def test_capacity(tmp_path: Path) -> None:
    out = run_example("capacity.py", str(tmp_path))
    assert "copy 1:" in out and "copy 3:" in out
    if "GPU memory" in out:  # measured on a GPU: projected onto the cards
        assert "copies per GPU" in out
    else:  # host memory is never projected onto a GPU
        assert "CPU host memory" in out and "copies per GPU" not in out
        assert "no projection onto GPU cards" in out


@pytest.mark.triton
@pytest.mark.slow
def test_my_model_example_passes_under_pytest(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), str(EXAMPLES / "test_my_model.py")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout  # the GPU test skips here, with its reason


BENCH = EXAMPLES / "bench"


def test_the_bench_gpu_table_adds_its_card(tmp_path: Path) -> None:
    from mmelocal.bench.capacity.projection import Projection
    from mmelocal.bench.results import read_results

    out = tmp_path / "projection.json"
    done = subprocess.run(
        [sys.executable, "-m", "mmelocal", "capacity", "project", "--per-model-mib", "420",
         "--baseline-mib", "300", "--gpus", str(BENCH / "my_gpus.yaml"), "--json", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [projection] = read_results(out)
    assert isinstance(projection, Projection)
    assert {r.instance_type for r in projection.rows if r.gpu == "L40S"} == {
        "ml.g6e.xlarge",
        "ml.g6e.12xlarge",
    }


def test_the_spike_shape_fits_the_duration_its_comment_gives() -> None:
    from mmelocal.bench.loadtest.shape import load_shape

    shape = load_shape(BENCH / "spike_shape.yaml")
    assert [s.name for s in shape.stages] == ["base", "spike", "recovery"]
    assert shape.max_users == 150
    assert shape.fitted(60.0).duration_s == pytest.approx(60.0)


@pytest.mark.triton
@pytest.mark.slow
def test_capacity_then_report_script(tmp_path: Path) -> None:
    """The shell example, as its comment says: CPU capacity (never projected onto a GPU),
    the model's GPU estimate, one report with both. Against a 768 MiB budget (its
    MEMORY_BUDGET): the same steps with few copies loaded (under 90 %, 691 MiB: one
    TorchScript copy of about 500 MiB, about three ONNX copies of about 175 MiB)."""
    import json
    import os
    import shutil

    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "MEMORY_BUDGET": "768MiB"}
    sh = shutil.which("sh")
    assert sh is not None
    done = subprocess.run(
        [sh, str(BENCH / "capacity_then_report.sh")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "bench-report" / "results.json").read_text())
    assert sorted(r["kind"] for r in results) == ["capacity", "capacity", "estimate"]
    measured = [r for r in results if r["kind"] == "capacity"]
    assert sorted(r["model_format"] for r in measured) == ["onnx", "torchscript"]
    assert all(r["total_bytes"] == 768 * 1024**2 and r["count"] >= 1 for r in measured), measured
    assert "FutureWarning" not in done.stderr
