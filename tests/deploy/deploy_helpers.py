"""Constants and builders the deploy tests share (imported by name, not as fixtures)."""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

import numpy as np

from mmelocal.testing.tiny_model import expected, write_model

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
#: a GPU type moto's (lagging) instance list accepts
INSTANCE_TYPE = "ml.g4dn.xlarge"


def write_reference_tarball(path: Path, *, scale: float, name: str = "tiny") -> Path:
    """The tiny model as ``path`` with the reference data a build records (inputs and the
    outputs the model must answer)."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    with tempfile.TemporaryDirectory() as work:
        model = write_model(Path(work), name=name, scale=scale)
        np.savez(
            model / "mmelocal_reference.npz",
            **{"input:INPUT0": x, "output:OUTPUT0": expected(x, scale)},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz") as tar:
            tar.add(model, arcname=name)
    return path
