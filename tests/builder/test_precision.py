"""The precision of a model's weights, read from its artifact (what a capacity run records
beside its figures, so an estimate compares like with like)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mmelocal.builder.precision import weights_precision

torch = pytest.importorskip("torch")


def _folder(root: Path, name: str, platform: str) -> Path:
    model = root / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "{platform}"\n')
    return model


@pytest.mark.parametrize(("dtype", "expected"), [("float32", "fp32"), ("float16", "fp16")])
def test_torchscript_weights(tmp_path: Path, dtype: str, expected: str) -> None:
    model = _folder(tmp_path, "pt", "pytorch_libtorch")
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    torch.jit.script(module.to(getattr(torch, dtype))).save(str(model / "1" / "model.pt"))
    assert weights_precision(model) == expected


@pytest.mark.parametrize(("dtype", "expected"), [("float32", "fp32"), ("float16", "fp16")])
def test_onnx_weights(tmp_path: Path, dtype: str, expected: str) -> None:
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import helper, numpy_helper

    model = _folder(tmp_path, "ox", "onnxruntime_onnx")
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    weight = numpy_helper.from_array(np.ones((8, 8), dtype=dtype), name="W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", elem, [1, 8])],
        [helper.make_tensor_value_info("Y", elem, [1, 8])],
        initializer=[weight],
    )
    onnx.save(helper.make_model(graph), str(model / "1" / "model.onnx"))
    assert weights_precision(model) == expected


def test_unknown_when_the_artifact_cannot_say(tmp_path: Path) -> None:
    plan = _folder(tmp_path, "trt", "tensorrt_plan")
    (plan / "1" / "model.plan").write_bytes(b"not readable without TensorRT")
    python = tmp_path / "py"
    (python / "1").mkdir(parents=True)
    (python / "1" / "model.py").write_text("")
    assert weights_precision(plan) == "" and weights_precision(python) == ""


def test_a_traced_bert_whose_graph_cannot_load_on_meta(tmp_path: Path) -> None:
    """A traced Hugging Face BERT runs aten::equal when loaded, which has no meta kernel:
    its precision is read on the CPU instead of coming back unknown (the capacity run of
    the packaged MiniLM recorded "")."""
    import torch as th
    from transformers import BertModel

    from mmelocal.testing.tiny_bert import tiny_bert_config

    bert = BertModel(tiny_bert_config()).eval()

    class Wrapped(th.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.bert(input_ids=ids, attention_mask=mask, return_dict=False)[0]

    ids = torch.ones(1, 8, dtype=torch.long)
    model = _folder(tmp_path, "bert", "pytorch_libtorch")
    torch.jit.trace(Wrapped(), (ids, ids)).save(str(model / "1" / "model.pt"))
    with pytest.raises(NotImplementedError):  # the case: no meta load
        torch.jit.load(str(model / "1" / "model.pt"), map_location="meta")
    assert weights_precision(model) == "fp32"
