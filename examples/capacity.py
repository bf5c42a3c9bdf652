"""How many copies of a model fit: measure on this machine (projected onto GPU cards on a GPU).

    .venv/bin/python examples/capacity.py [WORKDIR]

``measure_capacity`` serves copies of the model through the emulator's own loading path
and loads one after another until memory would cross the threshold (here at most three
copies, to keep the example short). Measured on a GPU, the result carries the projection
onto the cards of ``mmelocal/facts/gpus.yaml``. On a machine without a GPU the memory is the
host memory of Triton's process tree, not a GPU footprint, and nothing is projected onto a
GPU: measure on a GPU, or run ``mmelocal capacity estimate``, for GPU numbers.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from mmelocal import CapacityOptions, measure_capacity, mib
from mmelocal.testing.tiny_model import request_json, write_tarball


def main(workdir: Path) -> None:
    """Measure three copies of the tiny model; print the summary and, on a GPU, two cards."""
    tarball = write_tarball(workdir / "tiny.tar.gz")
    payload = json.dumps(request_json(np.ones((1, 4), np.float32))).encode()
    result = measure_capacity(
        tarball,
        options=CapacityOptions(
            max_copies=3, memory_budget_bytes=2 * 1024**3, verify_next=False, workdir=workdir
        ),
        payload=payload,
    )
    print(f"baseline {mib(result.baseline_bytes)}, per copy {mib(result.per_model_mean_bytes)}")
    for load in result.loads:
        print(f"copy {load.copies}: {mib(load.used_bytes)} in use, load {load.load_s:.2f} s")
    print(f"measured: {result.measured_where}")
    if result.projection is None:
        print("no projection onto GPU cards from host memory")
    for row in result.projection.rows[:2] if result.projection else ():
        print(f"{row.gpu}: {row.models_per_gpu} copies per GPU")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
