"""A tiny pure-numpy Python-backend model for tests and benchmarks (fast to load, small RSS).

``OUTPUT0 = INPUT0 * scale + 1`` where ``scale`` comes from the config's parameters, so
every copy answers differently and a request routed to the wrong model is caught.
``compute_ms`` (a config parameter, default 0) makes every execution wait that long
without using the CPU, as a host thread waits for a GPU kernel: a stand-in for a real
model's latency in benchmarks.
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

import numpy as np

MODEL_PY = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.scale = float(parameters["scale"]["string_value"])
        compute_ms = parameters.get("compute_ms", {}).get("string_value", "0")
        self.compute_s = float(compute_ms) / 1e3

    def execute(self, requests):
        if self.compute_s:
            time.sleep(self.compute_s)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            y = (x * self.scale + 1.0).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
"""

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "scale" value {{ string_value: "{scale}" }} }}
"""
COMPUTE_PARAMETER = 'parameters {{ key: "compute_ms" value {{ string_value: "{}" }} }}\n'


def write_model(
    folder: Path,
    *,
    name: str = "tiny",
    scale: float = 2.0,
    compute_ms: float = 0.0,
    dynamic_batching: bool = False,
) -> Path:
    """Write the model folder ``folder/name`` and return it (``dynamic_batching``: Triton
    gathers concurrent requests into one execution)."""
    if compute_ms < 0:
        raise ValueError(f"compute_ms must be >= 0, got {compute_ms}")
    model = folder / name
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "1" / "model.py").write_text(MODEL_PY)
    config = CONFIG.format(name=name, scale=scale)
    if compute_ms:
        config += COMPUTE_PARAMETER.format(compute_ms)
    if dynamic_batching:
        config += "dynamic_batching { }\n"
    (model / "config.pbtxt").write_text(config)
    return model


def write_tarball(
    path: Path,
    *,
    name: str = "tiny",
    scale: float = 2.0,
    compute_ms: float = 0.0,
    dynamic_batching: bool = False,
) -> Path:
    """A ``model.tar.gz`` holding the model folder at its top level."""
    with tempfile.TemporaryDirectory() as work:
        model = write_model(
            Path(work),
            name=name,
            scale=scale,
            compute_ms=compute_ms,
            dynamic_batching=dynamic_batching,
        )
        with tarfile.open(path, "w:gz") as tar:
            tar.add(model, arcname=name)
    return path


def expected(x: np.ndarray, scale: float) -> np.ndarray:
    """What the model answers for ``x``."""
    return (x * scale + 1.0).astype(np.float32)


def request_json(x: np.ndarray) -> dict[str, object]:
    """A KServe v2 JSON request body for ``x`` (shape [batch, 4])."""
    return {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": list(x.shape),
                "datatype": "FP32",
                "data": x.ravel().tolist(),
            }
        ]
    }


__all__ = ["expected", "request_json", "write_model", "write_tarball"]
