"""Package a model folder as MME tarballs and validate the store, from Python.

    .venv/bin/python examples/package_and_validate.py [WORKDIR]

Any model folder works (a build's ``result.model_dir``); this example writes the tiny
Python-backend model mmelocal's tests use, so that it runs in a second.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from mmelocal import package_copies, validate_path
from mmelocal.testing.tiny_model import write_model


def main(workdir: Path) -> list[Path]:
    """Three copies of one model as ``model-{0,1,2}.tar.gz``, validated as a store."""
    model_dir = write_model(workdir / "repo", name="tiny")
    tarballs = package_copies(model_dir, workdir / "store", copies=3)
    report = validate_path(workdir / "store")  # the layout rules SageMaker's Triton applies
    for problem in report.problems:
        print(f"{problem.severity}: {problem.code}: {problem.path}: {problem.message}")
    if not report.ok:
        raise SystemExit(f"{workdir / 'store'} would not be served")
    print(f"{len(tarballs)} tarballs in {workdir / 'store'}: {report.kind} ok")
    return tarballs


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
