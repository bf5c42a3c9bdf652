"""Hugging Face image models: pixel_values in, logits (or hidden states) out."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.builder.sources import load_source
from mmelocal.builder.tensors import TensorSpec
from mmelocal.builder.verify import verify
from mmelocal.errors import SourceError


@pytest.fixture(scope="module")
def tiny_vit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config = tf.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=5,  # type: ignore[call-arg]  # PretrainedConfig's, not in ViTConfig's stubs
    )
    folder = tmp_path_factory.mktemp("vit") / "tiny-vit"
    tf.ViTForImageClassification(config).eval().save_pretrained(folder)
    return folder


def test_vit_classifier_exports_and_verifies(tiny_vit_dir: Path, tmp_path: Path) -> None:
    from mmelocal.builder.torch2onnx import export_onnx
    from mmelocal.builder.torch2torchscript import export_torchscript

    src = load_source(str(tiny_vit_dir))
    assert (src.kind, src.family, src.task) == ("cv", "vit", "image-classification")
    assert src.input_names == ("pixel_values",) and src.output_names == ("logits",)
    assert tuple(src.example_inputs["pixel_values"].shape) == (2, 3, 32, 32)
    ts = export_torchscript(src, tmp_path / "ts" / "model.pt")
    assert ts.signature.inputs == (TensorSpec("pixel_values", "TYPE_FP32", (3, 32, 32)),)
    assert ts.signature.outputs == (TensorSpec("logits__0", "TYPE_FP32", (5,)),)
    onnx = export_onnx(src, tmp_path / "onnx" / "model.onnx")
    assert onnx.signature.outputs == (TensorSpec("logits", "TYPE_FP32", (5,)),)
    for art in (ts, onnx):
        assert verify(src, art, batch_sizes=(1, 3)).max_abs_diff < 1e-5


def test_vit_backbone_as_feature_extraction(tiny_vit_dir: Path) -> None:
    src = load_source(str(tiny_vit_dir), task="feature-extraction")
    assert src.output_names == ("last_hidden_state", "pooler_output")
    out = src.run(src.make_inputs(3))
    assert out["last_hidden_state"].shape == (3, 17, 32)  # 16 patches + [CLS]


def test_text_task_on_an_image_model(tiny_vit_dir: Path) -> None:
    with pytest.raises(SourceError, match="cannot load"):
        load_source(str(tiny_vit_dir), task="sequence-classification")
