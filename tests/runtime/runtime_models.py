"""Small models for the runtime tests: a tiny MLP (TorchScript / ONNX), Python-backend models
(good, raising at load, raising at inference) and broken repositories for ``mmelocal check``."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np

from mmelocal.builder.model_config import ConfigOptions, build_model_config, write_config
from mmelocal.builder.repository import REFERENCE_FILE
from mmelocal.builder.tensors import Signature, TensorSpec

IN_FEATURES = 4
OUT_FEATURES = 3


def mlp():
    """A deterministic tiny torch MLP in eval mode."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(IN_FEATURES, 8), torch.nn.ReLU(), torch.nn.Linear(8, OUT_FEATURES)
    ).eval()


def write_mlp(
    repo: Path,
    name: str,
    fmt: str,
    *,
    instance_count: int = 1,
    max_queue_delay_us: int = 100,
    input_name: str | None = None,
    reference: bool = True,
) -> Path:
    """Write the MLP as a TorchScript or ONNX model folder with config and reference data."""
    import torch

    model = mlp()
    example = torch.randn(2, IN_FEATURES)
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    if fmt == "torchscript":
        in_name, out_name, platform = "INPUT__0", "OUTPUT__0", "pytorch_libtorch"
        torch.jit.trace(model, example).save(str(folder / "1" / "model.pt"))
    else:
        in_name, out_name, platform = "x", "y", "onnxruntime_onnx"
        torch.onnx.export(
            model,
            (example,),
            str(folder / "1" / "model.onnx"),
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
            dynamo=False,
        )
    signature = Signature(
        inputs=(
            TensorSpec(name=input_name or in_name, data_type="TYPE_FP32", dims=(IN_FEATURES,)),
        ),
        outputs=(TensorSpec(name=out_name, data_type="TYPE_FP32", dims=(OUT_FEATURES,)),),
    )
    options = ConfigOptions(
        instance_count=instance_count,
        max_queue_delay_us=max_queue_delay_us,
        preferred_batch_sizes=(4, 8),
    )
    write_config(
        build_model_config(name=name, platform=platform, signature=signature, options=options),
        folder,
    )
    if reference:
        x = np.random.default_rng(1).standard_normal((3, IN_FEATURES)).astype(np.float32)
        with torch.inference_mode():
            y = model(torch.from_numpy(x)).numpy()
        np.savez(folder / REFERENCE_FILE, **{f"input:{in_name}": x, f"output:{out_name}": y})
    return folder


PY_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

PY_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        {init}

    def execute(self, requests):
        {execute}
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + 1.0).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def write_python_model(
    repo: Path, name: str, *, init: str = "pass", execute: str = "pass", config: str | None = None
) -> Path:
    """A Python-backend model: ``OUTPUT0 = INPUT0 + 1`` unless ``init``/``execute`` raise."""
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config or PY_CONFIG.format(name=name))
    (folder / "1" / "model.py").write_text(PY_MODEL.format(init=init, execute=execute))
    return folder


def broken_repositories(root: Path) -> dict[str, tuple[Path, str]]:
    """Five broken repositories: case -> (repo path, text the check must report)."""
    cases: dict[str, tuple[Path, str]] = {}

    repo = root / "bad_config"
    folder = write_python_model(repo, "bad_config")
    text = (folder / "config.pbtxt").read_text().replace("max_batch_size", "max_batch_sizes")
    (folder / "config.pbtxt").write_text(text)
    cases["bad_config"] = (repo, "max_batch_sizes")

    repo = root / "wrong_input_name"
    write_mlp(repo, "wrong_input", "onnx", input_name="features", reference=False)
    cases["wrong_input_name"] = (repo, "features")

    repo = root / "missing_file"
    folder = write_mlp(repo, "missing_file", "onnx", reference=False)
    (folder / "1" / "model.onnx").unlink()
    cases["missing_file"] = (repo, "model.onnx")

    repo = root / "raise_at_load"
    write_python_model(
        repo, "raise_at_load", init='raise RuntimeError("weights are corrupt (test)")'
    )
    cases["raise_at_load"] = (repo, "weights are corrupt (test)")

    repo = root / "raise_at_infer"
    write_python_model(
        repo, "raise_at_infer", execute='raise ValueError("cannot run this input (test)")'
    )
    cases["raise_at_infer"] = (repo, "cannot run this input (test)")
    return cases


def copy_model(folder: Path, dest_repo: Path) -> Path:
    """Copy a model folder into another repository."""
    target = dest_repo / folder.name
    shutil.copytree(folder, target)
    return target


def dedent(text: str) -> str:
    """textwrap.dedent, re-exported for tests."""
    return textwrap.dedent(text)
