"""torch -> TorchScript: names by Triton's PyTorch-backend conventions, dims measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.builder.tensors import TensorSpec
from mmelocal.errors import ExportError


def test_text_model_keeps_forward_argument_names(artifact_of) -> None:
    art = artifact_of("tiny_bert", "torchscript")
    assert art.format == "torchscript" and art.platform == "pytorch_libtorch"
    assert art.path.name == "model.pt" and art.path.stat().st_size > 0
    assert art.batch_dynamic
    assert art.signature.inputs == (
        TensorSpec("input_ids", "TYPE_INT64", (-1,)),
        TensorSpec("attention_mask", "TYPE_INT64", (-1,)),
    )
    assert art.signature.outputs == (
        TensorSpec("last_hidden_state__0", "TYPE_FP32", (-1, 32)),
        TensorSpec("pooler_output__1", "TYPE_FP32", (32,)),
    )
    assert art.artifact_name("pooler_output") == "pooler_output__1"
    assert not art.copied_from_source


def test_minilm_signature(artifact_of) -> None:
    art = artifact_of("minilm", "torchscript")
    assert [s.name for s in art.signature.outputs] == ["last_hidden_state__0", "pooler_output__1"]
    assert art.signature.outputs[0].dims == (-1, 384)


def test_image_model_uses_indexed_names(artifact_of) -> None:
    art = artifact_of("resnet", "torchscript")
    assert art.signature.inputs == (TensorSpec("pixel_values__0", "TYPE_FP32", (3, 224, 224)),)
    assert art.signature.outputs == (TensorSpec("logits__0", "TYPE_FP32", (1000,)),)


def test_signature_for_max_batch_size_zero(artifact_of) -> None:
    art = artifact_of("resnet", "torchscript")
    full = art.signature_for(0)
    assert full.inputs[0].dims == (-1, 3, 224, 224)
    assert art.signature_for(8) == art.signature


def test_existing_torchscript_is_copied(artifact_of, tmp_path: Path) -> None:
    from mmelocal.builder.sources import load_source
    from mmelocal.builder.torch2torchscript import export_torchscript

    original = artifact_of("resnet", "torchscript")
    src = load_source(str(original.path), batch_size=1)
    art = export_torchscript(src, tmp_path / "model.pt")
    assert art.copied_from_source
    assert art.path.read_bytes() == original.path.read_bytes()
    assert art.signature == original.signature


def test_onnx_source_cannot_become_torchscript(artifact_of, tmp_path: Path) -> None:
    from mmelocal.builder.sources import load_source
    from mmelocal.builder.torch2torchscript import export_torchscript

    src = load_source(str(artifact_of("resnet", "onnx").path))
    with pytest.raises(ExportError, match="cannot become TorchScript"):
        export_torchscript(src, tmp_path / "model.pt")


def test_trace_that_bakes_in_a_shape_is_refused(tmp_path: Path) -> None:
    import torch

    from mmelocal.builder.sources import source_from_module
    from mmelocal.builder.torch2torchscript import export_torchscript

    class ShapeBaked(torch.nn.Module):
        def forward(self, x):
            # Python int from the shape: the trace freezes it
            return x.reshape(int(x.shape[0]) * 4)

    src = source_from_module(
        ShapeBaked(),
        {"x": torch.randn(2, 4)},
        name="baked",
        dynamic_axes={"x": {0: "batch"}, "output": {0: "batch"}},
    )
    with pytest.raises(ExportError, match=r"torch\.jit\.trace failed"):
        export_torchscript(src, tmp_path / "model.pt")


@pytest.mark.parametrize("model", ["tiny_bert", "minilm"])
def test_no_cpu_device_baked_into_the_trace(artifact_of, model: str) -> None:
    """A GPU instance gets CUDA inputs: created tensors must follow the input's device."""
    from mmelocal.builder.runners import load_torchscript
    from mmelocal.builder.torch2torchscript import cpu_device_constants

    module = load_torchscript(artifact_of(model, "torchscript").path)
    assert cpu_device_constants(module) == 0
    assert "prim.device(input_ids)" in module.code


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_follow_input_device_counts_replacements() -> None:
    import torch

    from mmelocal.builder.torch2torchscript import cpu_device_constants, follow_input_device

    class MakesTensors(torch.nn.Module):
        def forward(self, x):
            return x + torch.arange(x.shape[1], device=x.device)

    traced = torch.jit.trace(MakesTensors(), (torch.zeros(2, 3),))
    assert cpu_device_constants(traced) == 1
    assert follow_input_device(traced) == 1
    assert cpu_device_constants(traced) == 0
    assert traced(torch.zeros(1, 4)).tolist() == [[0.0, 1.0, 2.0, 3.0]]


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.mmelocal_gpu
@pytest.mark.skipif(not _cuda(), reason="needs an NVIDIA GPU")
def test_cpu_traced_text_model_runs_on_the_gpu(tiny_bert_source, artifact_of) -> None:
    import torch

    module = torch.jit.load(str(artifact_of("tiny_bert", "torchscript").path), map_location="cuda")
    inputs = tiny_bert_source.make_inputs(2, 8)
    out = module(*(t.cuda() for t in inputs.values()))
    want = tiny_bert_source.run(inputs)["last_hidden_state"]
    assert out[0].device.type == "cuda"
    assert float((out[0].cpu() - torch.from_numpy(want)).abs().max()) < 1e-4
