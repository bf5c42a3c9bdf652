"""torch -> ONNX: readable names, dynamic batch and sequence axes, one file, checker-clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.builder.tensors import TensorSpec
from mmelocal.errors import ExportError


def test_text_model_has_dynamic_batch_and_sequence(artifact_of) -> None:
    art = artifact_of("tiny_bert", "onnx")
    assert art.format == "onnx" and art.platform == "onnxruntime_onnx"
    assert art.path.name == "model.onnx" and art.extra_files == ()
    assert sorted(p.name for p in art.path.parent.iterdir()) == ["model.onnx"]
    assert art.batch_dynamic
    assert art.signature.inputs == (
        TensorSpec("input_ids", "TYPE_INT64", (-1,)),
        TensorSpec("attention_mask", "TYPE_INT64", (-1,)),
    )
    assert art.signature.outputs == (
        TensorSpec("last_hidden_state", "TYPE_FP32", (-1, 32)),
        TensorSpec("pooler_output", "TYPE_FP32", (32,)),
    )


def test_graph_axes_are_symbolic(artifact_of) -> None:
    import onnx

    model = onnx.load(str(artifact_of("minilm", "onnx").path), load_external_data=False)
    dims = {
        vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in list(model.graph.input) + list(model.graph.output)
    }
    assert dims["input_ids"] == ["batch", "sequence"]
    assert dims["last_hidden_state"] == ["batch", "sequence", 384]
    assert dims["pooler_output"] == ["batch", 384]


def test_image_model(artifact_of) -> None:
    art = artifact_of("resnet", "onnx")
    assert art.signature.inputs == (TensorSpec("pixel_values", "TYPE_FP32", (3, 224, 224)),)
    assert art.signature.outputs == (TensorSpec("logits", "TYPE_FP32", (1000,)),)
    assert any("TorchScript-based" in n for n in art.notes)


def test_large_models_get_one_external_data_file(tmp_path: Path, monkeypatch) -> None:
    import torch

    from mmelocal.builder import torch2onnx
    from mmelocal.builder.sources import source_from_module

    monkeypatch.setattr(torch2onnx, "PROTOBUF_LIMIT_BYTES", 10_000)
    src = source_from_module(torch.nn.Linear(64, 64), {"x": torch.randn(2, 64)}, name="lin")
    art = torch2onnx.export_onnx(src, tmp_path / "model.onnx")
    assert art.extra_files == (tmp_path / "model.onnx.data",)
    assert (tmp_path / "model.onnx.data").stat().st_size >= 64 * 64 * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    from mmelocal.builder.verify import verify

    assert verify(src, art).max_abs_diff < 1e-5


def test_existing_onnx_is_copied(artifact_of, tmp_path: Path) -> None:
    from mmelocal.builder.sources import load_source
    from mmelocal.builder.torch2onnx import export_onnx

    original = artifact_of("resnet", "onnx")
    art = export_onnx(load_source(str(original.path)), tmp_path / "model.onnx")
    assert art.copied_from_source and art.signature == original.signature


def test_unexportable_module(tmp_path: Path) -> None:
    import torch

    from mmelocal.builder.sources import source_from_module
    from mmelocal.builder.torch2onnx import export_onnx

    class Unexportable(torch.nn.Module):
        def forward(self, x):
            return torch.from_numpy(x.numpy() * 2)

    src = source_from_module(Unexportable(), {"x": torch.randn(2, 3)}, name="bad")
    with pytest.raises(ExportError, match="the trace lost an input"):
        export_onnx(src, tmp_path / "model.onnx")


def test_dynamo_exporter_is_the_fallback(tmp_path: Path, monkeypatch) -> None:
    import torch

    from mmelocal.builder.sources import source_from_module
    from mmelocal.builder.torch2onnx import export_onnx
    from mmelocal.builder.verify import verify

    real_export = torch.onnx.export

    def legacy_fails(*args, **kwargs):
        if not kwargs.get("dynamo"):
            raise RuntimeError("unsupported operator (simulated)")
        return real_export(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", legacy_fails)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    src = source_from_module(net, {"x": torch.randn(2, 8)}, name="mlp")
    art = export_onnx(src, tmp_path / "model.onnx")
    assert any("dynamo" in n for n in art.notes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    assert art.signature.inputs == (TensorSpec("x", "TYPE_FP32", (8,)),)
    assert art.batch_dynamic
    assert verify(src, art, batch_sizes=(1, 5)).max_abs_diff < 1e-5
