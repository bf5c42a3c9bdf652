"""Verification: artifact vs source on random inputs at several batch sizes / sequence lengths."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmelocal.builder.verify import default_tolerances, verify
from mmelocal.errors import UserInputError, VerificationError

CASES = [
    ("tiny_bert", "torchscript"),
    ("tiny_bert", "onnx"),
    ("minilm", "torchscript"),
    ("minilm", "onnx"),
    ("resnet", "torchscript"),
    ("resnet", "onnx"),
]


@pytest.mark.parametrize(("model", "fmt"), CASES)
def test_exported_models_match_their_source(request, artifact_of, model: str, fmt: str) -> None:
    source = request.getfixturevalue(f"{model}_source")
    artifact = artifact_of(model, fmt)
    batches = (1, 2) if model == "resnet" else (1, 2, 4)
    report = verify(source, artifact, batch_sizes=batches)
    assert report.ok and not report.skipped
    shapes = len(batches) * (1 if model == "resnet" else 2)  # seq_len 8 and 16 for text
    assert len(report.rows) == shapes * len(source.output_names)
    # fp32 exports: TorchScript is bit-exact or nearly, ONNX Runtime within a few 1e-6
    assert report.max_abs_diff < 2e-5, report.per_output()
    limit = 1e-6 if fmt == "torchscript" else 2e-5
    for output, (abs_diff, _rel) in report.per_output().items():
        assert abs_diff < limit, (output, abs_diff)
    assert {r.seq_len for r in report.rows} == ({None} if model == "resnet" else {8, 16})


def test_tolerance_zero_fails_with_the_numbers(minilm_source, artifact_of) -> None:
    with pytest.raises(VerificationError, match="raise --atol/--rtol") as info:
        verify(minilm_source, artifact_of("minilm", "onnx"), atol=0, rtol=0, batch_sizes=(2,))
    err = info.value
    assert err.max_abs_diff is not None and 0 < err.max_abs_diff < 1e-4
    assert not err.report.ok  # type: ignore[attr-defined]


def test_wrong_weights_are_caught(tmp_path: Path) -> None:
    import torch

    from mmelocal.builder.sources import source_from_module
    from mmelocal.builder.torch2onnx import export_onnx

    torch.manual_seed(1)
    a = source_from_module(torch.nn.Linear(8, 4), {"x": torch.randn(2, 8)}, name="a")
    b = source_from_module(torch.nn.Linear(8, 4), {"x": torch.randn(2, 8)}, name="b")
    art = export_onnx(a, tmp_path / "model.onnx")
    assert verify(a, art).max_abs_diff < 1e-5
    report = verify(b, art, raise_on_failure=False)
    assert not report.ok and report.max_abs_diff > 0.01
    with pytest.raises(VerificationError, match="output 'output' at batch 1"):
        verify(b, art)


def test_another_output_dtype_is_caught(tmp_path: Path) -> None:
    """An artifact that returns the source's values in another dtype (float64 for float32:
    the config then says TYPE_FP64 and clients read other bytes) is not the source."""
    import torch

    from mmelocal.builder.sources import source_from_module
    from mmelocal.builder.torch2onnx import export_onnx

    class Double(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.inner(x).double()

    linear = torch.nn.Linear(8, 4)
    source = source_from_module(linear, {"x": torch.randn(2, 8)}, name="a")
    wide = source_from_module(Double(linear), {"x": torch.randn(2, 8)}, name="a")
    art = export_onnx(wide, tmp_path / "model.onnx")
    assert art.signature.outputs[0].data_type == "TYPE_FP64"
    report = verify(source, art, raise_on_failure=False)
    assert not report.ok
    assert "dtype float64 != source float32" in report.rows[0].problem


def test_copied_file_and_tensorrt_are_skipped(artifact_of) -> None:
    from mmelocal.builder.sources import load_source

    onnx_art = artifact_of("resnet", "onnx")
    copied = dataclasses.replace(onnx_art, copied_from_source=True)
    src = load_source(str(onnx_art.path))
    report = verify(src, copied)
    assert report.skipped and report.ok and "nothing independent" in report.notes[0]
    plan = dataclasses.replace(onnx_art, format="tensorrt")
    assert verify(src, plan).skipped


def test_reference_npz(resnet_source, artifact_of, tmp_path: Path) -> None:
    art = artifact_of("resnet", "onnx")
    inputs = resnet_source.make_inputs(2, seed=5)
    outputs = resnet_source.run(inputs)
    npz = tmp_path / "ref.npz"
    np.savez(
        npz,
        **{
            "input:pixel_values": inputs["pixel_values"].numpy(),
            "output:logits": outputs["logits"],
        },
    )
    report = verify(resnet_source, art, reference_npz=npz, max_batch_size=8)
    # the recorded batch of 2, and its rows served alone and batched 4 at a time, as
    # Triton's dynamic batcher may run them
    assert report.ok and sorted(r.batch_size for r in report.rows) == [1, 2, 4]
    np.savez(
        npz,
        **{
            "input:pixel_values": inputs["pixel_values"].numpy(),
            "output:logits": outputs["logits"] + 1,
        },
    )
    with pytest.raises(VerificationError):
        verify(resnet_source, art, reference_npz=npz)


def test_default_tolerances_and_bad_values(resnet_source, artifact_of) -> None:
    assert default_tolerances("fp32") == (1e-4, 1e-3)
    assert default_tolerances("fp16") == (1e-2, 1e-2)
    with pytest.raises(UserInputError, match="precision"):
        default_tolerances("fp8")
    with pytest.raises(UserInputError, match="atol and rtol must be >= 0"):
        verify(resnet_source, artifact_of("resnet", "onnx"), atol=-1)


def test_report_table_rows(tiny_bert_source, artifact_of) -> None:
    report = verify(
        tiny_bert_source, artifact_of("tiny_bert", "onnx"), batch_sizes=(1,), seq_lens=(4,)
    )
    rows = report.table()
    assert [r["output"] for r in rows] == ["last_hidden_state", "pooler_output"]
    assert rows[0]["shape"] == [1, 4, 32] and rows[0]["ok"] is True


def _tiny_family(family: str, folder: Path) -> Path:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    small: dict[str, Any] = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "vocab_size": 500,
        "max_position_embeddings": 130,
    }
    model = {
        "roberta": lambda: tf.RobertaModel(tf.RobertaConfig(**small)),
        "distilbert": lambda: tf.DistilBertModel(
            tf.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=500)
        ),
        "electra": lambda: tf.ElectraForSequenceClassification(
            tf.ElectraConfig(embedding_size=16, **small)
        ),
    }[family]()
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("family", "outputs"),
    [
        ("roberta", ("last_hidden_state", "pooler_output")),
        ("distilbert", ("last_hidden_state",)),
        ("electra", ("logits",)),  # a ...ForSequenceClassification checkpoint picks its task
    ],
)
def test_other_text_families_export_and_verify(family, outputs, tmp_path: Path) -> None:
    from mmelocal.builder.sources import load_source
    from mmelocal.builder.torch2onnx import export_onnx
    from mmelocal.builder.torch2torchscript import export_torchscript

    source = load_source(str(_tiny_family(family, tmp_path / family)), seq_len=16)
    assert source.family == family and source.output_names == outputs
    for art in (
        export_torchscript(source, tmp_path / "ts" / "model.pt"),
        export_onnx(source, tmp_path / "onnx" / "model.onnx"),
    ):
        report = verify(source, art, batch_sizes=(1, 3))
        assert report.ok and report.max_abs_diff < 2e-5, (art.format, report.per_output())


def test_reference_npz_checks_the_rows_at_every_batch_size(tmp_path: Path) -> None:
    """A reference recorded at one batch size also checks each of its rows at the other
    batch sizes the model serves: a model whose outputs depend on the batch's other rows
    (here it subtracts the batch mean, as a BatchNorm left in training mode does) matched
    a batch-2 reference and was reported verified, yet answers a request served alone
    differently."""
    import torch

    from mmelocal.builder.sources import load_source
    from mmelocal.builder.torch2torchscript import export_torchscript

    class MixesRows(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x - x.mean()

    pt = tmp_path / "mixes.pt"
    torch.jit.script(MixesRows()).save(str(pt))
    source = load_source(str(pt))
    art = export_torchscript(source, tmp_path / "out" / "model.pt")
    x = np.random.default_rng(3).standard_normal((2, 3, 224, 224)).astype(np.float32)
    npz = tmp_path / "ref.npz"
    names = {"input": art.artifact_name("pixel_values"), "output": art.artifact_name("logits")}
    np.savez(npz, **{f"input:{names['input']}": x, f"output:{names['output']}": x - x.mean()})
    with pytest.raises(VerificationError, match="at batch 1"):
        verify(source, art, reference_npz=npz, max_batch_size=8)
    # a model that batches only what it was given: the reference is checked as recorded
    report = verify(source, art, reference_npz=npz, max_batch_size=0)
    assert report.ok and [r.batch_size for r in report.rows] == [2]


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_reference_npz_with_names_the_artifact_lacks_says_its_names(
    tmp_path: Path, fmt: str
) -> None:
    """A reference whose arrays are not named after the artifact's tensors (the source's
    names, say, for a ``.pt`` file whose outputs are ``output0__0`` ...) is bad input that
    names the artifact's tensors: it was a KeyError traceback for an input (TorchScript),
    an "onnxruntime failed" export error (ONNX), and for an output a verification failure
    that said to raise --atol/--rtol."""
    import torch

    from mmelocal.builder.sources import source_from_module
    from mmelocal.builder.torch2onnx import export_onnx
    from mmelocal.builder.torch2torchscript import export_torchscript

    source = source_from_module(torch.nn.Linear(4, 2), {"x": torch.randn(2, 4)}, name="lin")
    export = export_torchscript if fmt == "torchscript" else export_onnx
    art = export(source, tmp_path / ("model.pt" if fmt == "torchscript" else "model.onnx"))
    (input_name,), (output_name,) = art.signature.input_names, art.signature.output_names
    x = np.ones((2, 4), dtype=np.float32)
    y = source.run({"x": torch.from_numpy(x)})["output"]
    good = tmp_path / "good.npz"
    np.savez(good, **{f"input:{input_name}": x, f"output:{output_name}": y})
    assert verify(source, art, reference_npz=good, max_batch_size=8).ok
    cases = {
        "input": {"input:ids": x, f"output:{output_name}": y},
        "output": {f"input:{input_name}": x, "output:logits": y},
    }
    for kind, arrays in cases.items():
        npz = tmp_path / f"bad_{kind}.npz"
        np.savez(npz, **arrays)
        with pytest.raises(UserInputError) as info:
            verify(source, art, reference_npz=npz, max_batch_size=8)
        text = str(info.value)
        assert str(npz) in text and ("'ids'" if kind == "input" else "'logits'") in text
        assert f"its {kind}s: {input_name if kind == 'input' else output_name}" in text, text
