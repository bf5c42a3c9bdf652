"""The wheel built from pyproject.toml works on its own (not only the editable install)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("mmelocal-*.whl")
    return built


def test_wheel_carries_templates_and_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "mmelocal/model_repo_templates/python_runner/model.py" in names
    assert "mmelocal/model_repo_templates/presets/bert.yaml" in names
    assert "mmelocal/facts/gpus.yaml" in names
    assert "mmelocal/bench/data/published.yaml" in names  # read at import of bench.estimate
    assert any(n.endswith("entry_points.txt") for n in names)


def test_installed_wheel_finds_its_templates(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    probe = (
        "import mmelocal, mmelocal.builder.presets as p, mmelocal.runtime.python_copies as n;"
        "print(mmelocal.__file__); print(p.templates_dir()); print(n.runner_template());"
        "print(sorted(p.list_presets()))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    module_file, templates, runner, presets = result.stdout.strip().splitlines()
    assert module_file.startswith(str(target))
    assert templates.startswith(str(target)), templates
    assert runner.startswith(str(target)), runner
    assert "bert" in presets and "resnet" in presets


def test_console_script_declared(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        entry = next(n for n in zf.namelist() if n.endswith("entry_points.txt"))
        text = zf.read(entry).decode()
    assert "mmelocal = mmelocal.cli.main:main" in text
    assert "pytest11" in text
