"""What the remote bench tests share: the names of the deployment, and the tiny model as a
tarball carrying the reference inputs a build records."""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

import numpy as np
from shared_helpers import write_reference_tarball  # noqa: F401 (re-exported)

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
#: a GPU type moto's instance list accepts
INSTANCE_TYPE = "ml.g4dn.xlarge"


def write_onnx_reference_tarball(path: Path, *, name: str = "tiny") -> Path:
    """A tiny ONNX model (``y = x``, float [batch, 4]) as a tarball with reference data: a
    second framework for the benchmark (onnxruntime, run in the Python backend here)."""
    from onnx import TensorProto, helper, save

    from mmelocal.builder.model_config import ConfigOptions, build_model_config
    from mmelocal.builder.repository import add_model
    from mmelocal.builder.tensors import inspect_onnx

    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "identity.onnx"
        x_info, y_info = (
            helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 4]) for n in "xy"
        )
        node = helper.make_node("Identity", ["x"], ["y"])
        graph = helper.make_graph([node], name, [x_info], [y_info])
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(source))
        signature, _ = inspect_onnx(source)
        config = build_model_config(
            name=name, platform="onnxruntime_onnx", signature=signature,
            options=ConfigOptions(max_batch_size=8, dynamic_batching=False),
        )  # fmt: skip
        model = add_model(Path(work) / "repo", name=name, config=config, artifact=source)
        np.savez(model / "mmelocal_reference.npz", **{"input:x": x, "output:y": x})
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz") as tar:
            tar.add(model, arcname=name)
    return path
