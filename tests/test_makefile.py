"""The Makefile's targets pass what they are given (read with ``make -n``: nothing runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def dry_run(*args: str) -> str:
    """What ``make -n ARGS`` would run, with the install stamp taken as up to date."""
    # a clean environment of make's own: under `make test` the parent's MAKEFLAGS and
    # MAKELEVEL would make this make print "Entering directory" lines around the commands
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", ".venv/.installed", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.replace("\\\n", " ")  # continued lines as one


def test_repo_passes_weights_and_revision_when_set() -> None:
    line = dry_run("repo", "MODEL=timm:resnet18", "WEIGHTS=none", "REVISION=v2").splitlines()[-1]
    assert "mmelocal build timm:resnet18" in line
    assert "--weights none" in line and "--revision v2" in line


def test_repo_leaves_the_build_defaults_alone_otherwise() -> None:
    line = dry_run("repo").splitlines()[-1]
    assert "mmelocal build minilm" in line
    assert "--weights" not in line and "--revision" not in line


def test_test_runs_the_strict_docs_build() -> None:
    out = dry_run("test")
    assert "mkdocs build --strict" in out
    assert out.index("mkdocs build --strict") < out.index("pytest")
