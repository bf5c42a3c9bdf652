"""Model sources: Hugging Face folders, the packaged MiniLM, torchvision/timm, modules, files."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from mmelocal.builder.sources import ACCEPTED_FORMS, load_source, source_from_module
from mmelocal.errors import DownloadError, SourceError

SEQ_LEN = 16  # as in tests/builder/conftest.py


def test_tiny_bert_folder_is_a_text_source(tiny_bert_source) -> None:
    src = tiny_bert_source
    assert src.kind == "nlp"
    assert src.family == "bert"
    assert src.task == "feature-extraction"
    assert src.input_names == ("input_ids", "attention_mask")
    assert src.output_names == ("last_hidden_state", "pooler_output")
    ids = src.example_inputs["input_ids"]
    mask = src.example_inputs["attention_mask"]
    assert tuple(ids.shape) == (2, SEQ_LEN) and str(ids.dtype) == "torch.int64"
    assert str(mask.dtype) == "torch.int64"
    # tokenizer-made: [CLS] first, padding at the end of the short sentence
    assert int(ids[0, 0]) == 2 and int(mask[1].sum()) < SEQ_LEN
    assert src.dynamic_axes["input_ids"] == {0: "batch", 1: "sequence"}
    assert src.dynamic_axes["last_hidden_state"] == {0: "batch", 1: "sequence"}
    assert src.dynamic_axes["pooler_output"] == {0: "batch"}
    assert src.notes == ()


def test_make_inputs_is_seeded_and_padded(tiny_bert_source) -> None:
    a = tiny_bert_source.make_inputs(4, 8, seed=3)
    b = tiny_bert_source.make_inputs(4, 8, seed=3)
    assert (a["input_ids"] == b["input_ids"]).all()
    assert tuple(a["attention_mask"].shape) == (4, 8)
    assert int(a["attention_mask"][0].sum()) == 8
    outputs = tiny_bert_source.run(a)
    assert outputs["last_hidden_state"].shape == (4, 8, 32)
    assert outputs["pooler_output"].shape == (4, 32)


def test_sequence_classification_task(tiny_bert_dir: Path) -> None:
    src = load_source(str(tiny_bert_dir), task="sequence-classification", seq_len=8)
    assert src.output_names == ("logits",)
    assert src.run(src.example_inputs)["logits"].shape == (2, 2)
    alias = load_source(str(tiny_bert_dir), task="text-classification", seq_len=8)
    assert alias.task == "sequence-classification"


def test_folder_without_tokenizer_uses_random_ids(tiny_bert_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "no-tok"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert_dir / name, folder / name)
    src = load_source(str(folder), seq_len=8)
    assert src.name == "no-tok"
    assert any("no tokenizer" in n for n in src.notes)
    ids = src.example_inputs["input_ids"]
    assert tuple(ids.shape) == (2, 8) and int(ids.max()) < 1000


def test_minilm_is_the_packaged_model(minilm_source) -> None:
    src = minilm_source
    assert src.name == "minilm" and src.family == "bert" and src.kind == "nlp"
    out = src.run(src.example_inputs)
    assert out["last_hidden_state"].shape == (2, SEQ_LEN, 384)
    assert out["pooler_output"].shape == (2, 384)
    assert src.max_seq_len == 512


def test_seq_len_beyond_the_model_limit(tiny_bert_dir: Path) -> None:
    with pytest.raises(SourceError, match=r"seq_len must lie in 1\.\.256"):
        load_source(str(tiny_bert_dir), seq_len=300)


def test_hub_name_not_cached_fails_fast_offline(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    start = time.perf_counter()
    with pytest.raises(DownloadError, match="not in the Hugging Face cache") as info:
        load_source("some-org/not-a-cached-model")
    assert time.perf_counter() - start < 5  # no network, no retries
    assert "HF_HUB_OFFLINE" in str(info.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "non-empty"),
        ("s3://bucket/model", "unknown source prefix"),
        ("torchvision:", "names no model"),
        ("./no/such/dir", "does not exist"),
        ("/no/such/model.onnx", "does not exist"),
        ("a/b/c", "does not exist"),
        ("torchvision:resnet1800", "did you mean resnet18"),
        ("timm:not_a_model_xyz", "unknown timm model"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        load_source(spec)


@pytest.mark.parametrize("spec", ["model-7.tar.gz", "team/model-7.tgz"])
def test_a_missing_tarball_is_a_missing_file_not_a_hub_name(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name ending in .tar.gz is a file the user mistyped: it was looked up on the
    Hugging Face hub ('cannot download model-7.tar.gz from https://huggingface.co')."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # old code asked the hub: never leave the host
    with pytest.raises(SourceError, match=rf"^{re.escape(spec)} does not exist \(no such file"):
        load_source(spec)


def test_error_lists_accepted_forms() -> None:
    with pytest.raises(SourceError) as info:
        load_source("ftp:thing")
    assert all(form in str(info.value) for form in ACCEPTED_FORMS)


def test_bad_task_for_each_kind(tiny_bert_dir: Path) -> None:
    with pytest.raises(SourceError, match="task must be one of feature-extraction"):
        load_source(str(tiny_bert_dir), task="translation")
    with pytest.raises(SourceError, match="image-classification"):
        load_source("torchvision:resnet18", task="feature-extraction")


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"no config\.json"):
        load_source(str(tmp_path))


def test_pretrained_weights_unreachable(tmp_path: Path, monkeypatch, refused_port: int) -> None:
    port = refused_port
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setenv("MMELOCAL_TORCHVISION_MIRROR", f"http://127.0.0.1:{port}/weights")
    with pytest.raises(DownloadError, match="--weights none for random weights") as info:
        load_source("torchvision:resnet18", weights="DEFAULT")
    assert f"127.0.0.1:{port}/weights/resnet18-" in str(info.value)
    assert not any((tmp_path / "hub" / "checkpoints").iterdir())


def test_resnet18_source(resnet_source) -> None:
    src = resnet_source
    assert src.kind == "cv" and src.family == "resnet18" and src.name == "resnet18"
    assert tuple(src.example_inputs["pixel_values"].shape) == (1, 3, 224, 224)
    assert src.dynamic_axes == {"pixel_values": {0: "batch"}, "logits": {0: "batch"}}
    assert src.seq_len is None
    assert src.run(src.make_inputs(2))["logits"].shape == (2, 1000)


def test_timm_source() -> None:
    pytest.importorskip("timm")
    src = load_source("timm:resnet10t", batch_size=1)
    assert src.kind == "cv" and src.output_names == ("logits",)
    assert src.run(src.example_inputs)["logits"].shape == (1, 1000)


def test_source_from_module() -> None:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(6, 3)

        def forward(self, x, scale):
            return self.lin(x) * scale, x.sum(dim=1)

    src = source_from_module(
        Net(),
        {"x": torch.randn(2, 6), "scale": torch.ones(2, 1)},
        name="My Net",
        output_names=["y", "total"],
    )
    assert src.name == "my-net" and src.kind == "generic"
    assert src.dynamic_axes == {
        "x": {0: "batch"},
        "scale": {0: "batch"},
        "y": {0: "batch"},
        "total": {0: "batch"},
    }
    assert src.run(src.make_inputs(5))["y"].shape == (5, 3)


def test_source_from_module_bad_inputs() -> None:
    import torch

    net = torch.nn.Linear(4, 2)
    with pytest.raises(SourceError, match=r"torch\.nn\.Module"):
        source_from_module(object(), {"x": torch.randn(1, 4)}, name="n")
    with pytest.raises(SourceError, match="at least one input"):
        source_from_module(net, {}, name="n")
    with pytest.raises(SourceError, match="must be torch tensors"):
        source_from_module(net, {"x": [1, 2, 3, 4]}, name="n")
    with pytest.raises(SourceError, match="failed on its example inputs"):
        source_from_module(net, {"x": torch.randn(1, 5)}, name="n")
    with pytest.raises(SourceError, match="output_names must be 1 distinct"):
        source_from_module(net, {"x": torch.randn(1, 4)}, name="n", output_names=["a", "b"])


def test_existing_files_as_sources(artifact_of) -> None:
    onnx_art = artifact_of("tiny_bert", "onnx")
    src = load_source(str(onnx_art.path), seq_len=8)
    assert src.file_format == "onnx" and src.module is None and src.kind == "nlp"
    assert src.input_names == ("input_ids", "attention_mask")
    out = src.run(src.make_inputs(3, 8))
    assert out["last_hidden_state"].shape == (3, 8, 32)

    ts_art = artifact_of("resnet", "torchscript")
    ts = load_source(str(ts_art.path))
    assert ts.file_format == "torchscript" and ts.kind == "cv" and ts.module is not None
    assert ts.run(ts.make_inputs(1))["logits"].shape == (1, 1000)


def test_onnx_bert_with_token_type_ids_runs_on_its_random_inputs(
    tiny_bert_dir: Path, tmp_path: Path
) -> None:
    """An ONNX BERT exported with token_type_ids (the usual three-input export) gets segment
    ids its embedding holds (type_vocab_size 2): random ids 1..99 failed onnxruntime's Gather
    in the reference run, so such a file could not be built at all."""
    import torch

    names = ["input_ids", "attention_mask", "token_type_ids"]
    ids = torch.randint(1, 1000, (2, 8))
    path = tmp_path / "bert.onnx"
    with torch.no_grad():
        torch.onnx.export(
            _three_input_bert(tiny_bert_dir),
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(path),
            dynamo=False,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
            opset_version=17,
        )
    src = load_source(str(path), seq_len=8)
    inputs = src.make_inputs(3, 8, seed=5)
    assert not inputs["token_type_ids"].any()
    assert src.run(inputs)["last_hidden_state"].shape == (3, 8, 32)


def test_torchscript_bert_with_token_type_ids_is_a_text_source(
    tiny_bert_dir: Path, tmp_path: Path
) -> None:
    """A BERT traced with its three inputs (input_ids, attention_mask, token_type_ids: what
    tracing the model on its tokenizer's output gives) is a text model; it was refused as an
    unrecognised form. Its token_type_ids are segment 0."""
    import torch

    ids = torch.randint(1, 1000, (2, 8))
    path = tmp_path / "bert.pt"
    with torch.no_grad(), pytest.warns(Warning):
        torch.jit.trace(
            _three_input_bert(tiny_bert_dir), (ids, torch.ones_like(ids), torch.zeros_like(ids))
        ).save(str(path))
    src = load_source(str(path), seq_len=8)
    assert src.kind == "nlp"
    assert src.input_names == ("input_ids", "attention_mask", "token_type_ids")
    inputs = src.make_inputs(3, 8, seed=5)
    assert not inputs["token_type_ids"].any()
    assert src.run(inputs)["output"].shape == (3, 8, 32)


def test_bad_files(tmp_path: Path) -> None:
    bad_onnx = tmp_path / "model.onnx"
    bad_onnx.write_text("not onnx")
    with pytest.raises(SourceError, match="not a readable ONNX model"):
        load_source(str(bad_onnx))
    bad_pt = tmp_path / "model.pt"
    bad_pt.write_bytes(b"\x00\x01garbage")
    with pytest.raises(SourceError, match="not a loadable TorchScript model"):
        load_source(str(bad_pt))
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    with pytest.raises(SourceError, match=r"is a \.bin file"):
        load_source(str(other))


def test_hub_name_from_the_local_cache(tiny_bert_dir: Path, tmp_path: Path, monkeypatch) -> None:
    repo = tmp_path / "hub" / "models--some-org--tiny-bert"
    snapshot = repo / "snapshots" / "0123abcd"
    shutil.copytree(tiny_bert_dir, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = load_source("some-org/tiny-bert", seq_len=8)
    assert src.name == "tiny-bert" and src.spec == "some-org/tiny-bert"
    cache = tmp_path / "hub"
    assert src.notes == (f"some-org/tiny-bert@0123abcd from the Hugging Face cache ({cache})",)
    assert src.run(src.example_inputs)["last_hidden_state"].shape == (2, 8, 32)


def test_pretrained_torchvision_weights_from_the_cache(tmp_path: Path, monkeypatch) -> None:
    import torch
    from torchvision.models import ResNet18_Weights, resnet18

    torch.manual_seed(3)
    weights = resnet18().state_dict()
    (tmp_path / "hub" / "checkpoints").mkdir(parents=True)
    name = ResNet18_Weights.DEFAULT.url.split("/")[-1]
    torch.save(weights, tmp_path / "hub" / "checkpoints" / name)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setenv("MMELOCAL_TORCHVISION_MIRROR", "http://127.0.0.1:9/never-asked")
    src = load_source("torchvision:resnet18", weights="IMAGENET1K_V1", batch_size=1)
    assert src.notes == ("pretrained weights ResNet18_Weights.IMAGENET1K_V1",)
    assert torch.equal(src.module.state_dict()["fc.weight"], weights["fc.weight"])


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("a/resnet50.onnx", "resnet50"),
        ("repo/bert_large/1/model.pt", "bert_large"),
        ("exports/minilm/model.onnx", "minilm"),
    ],
)
def test_file_model_names(path: str, name: str) -> None:
    from mmelocal.builder.sources.files import file_model_name

    assert file_model_name(Path(path)) == name


def _three_input_bert(tiny_bert_dir: Path) -> Any:
    """The tiny BERT taking its tokenizer's three outputs (input_ids, attention_mask,
    token_type_ids) and answering its last hidden state."""
    import torch
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(tiny_bert_dir)).eval()

    class ThreeInputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            out = self.bert(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=False,
            )
            return out[0]

    return ThreeInputs()


class _TinyVocab:
    """A text model whose embedding holds 10 token ids (vocab_size 10)."""

    VOCAB = 10

    @staticmethod
    def module() -> Any:
        import torch

        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embeddings = torch.nn.Embedding(_TinyVocab.VOCAB, 4)

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                return self.embeddings(input_ids) * attention_mask.unsqueeze(-1)

        torch.manual_seed(0)
        return Model().eval()


@pytest.mark.parametrize("via", ["gather", "config.json"])
def test_onnx_token_ids_stay_within_the_models_vocabulary(tmp_path: Path, via: str) -> None:
    """Random token ids were drawn from 1..99 whatever the model, so an ONNX text model
    with a vocabulary under 100 failed onnxruntime's Gather on its own example inputs (and
    its build's verification). Ids now stay below the vocabulary size, read from the
    embedding table the ids index (or, when the graph hides it, ``vocab_size`` of a
    ``config.json`` beside the file)."""
    import torch

    names = ["input_ids", "attention_mask"]
    ids = torch.randint(0, _TinyVocab.VOCAB, (2, 8))
    folder = tmp_path / "m"
    folder.mkdir()
    path = folder / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(
            _TinyVocab.module(),
            (ids, torch.ones_like(ids)),
            str(path),
            dynamo=False,
            input_names=names,
            output_names=["hidden"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "hidden"]},
            opset_version=17,
        )
    if via == "config.json":
        import onnx

        model = onnx.load(str(path))
        [gather] = [n for n in model.graph.node if n.op_type == "Gather"]
        # the table reaches the Gather through a node, as a quantized one does
        copy = onnx.helper.make_node("Identity", [gather.input[0]], ["table_copy"])
        gather.input[0] = "table_copy"
        model.graph.node.insert(0, copy)
        onnx.save(model, str(path))
        (folder / "config.json").write_text(json.dumps({"vocab_size": _TinyVocab.VOCAB}))
    src = load_source(str(path), seq_len=8)
    for seed in range(5):
        inputs = src.make_inputs(4, 8, seed=seed)
        assert int(inputs["input_ids"].max()) < _TinyVocab.VOCAB
        assert src.run(inputs)["hidden"].shape == (4, 8, 4)
    from mmelocal.builder.build import BuildOptions, build_model

    built = build_model(str(path), repo=tmp_path / "repo", options=BuildOptions(format="onnx"))
    assert (built.model_dir / "1" / "model.onnx").is_file()


def test_an_onnx_source_reads_its_graph_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signature and the index bounds were read from two loads of the same graph
    (``inspect_onnx`` then ``index_bounds``): a large model's graph was parsed twice."""
    import onnx
    import torch

    names = ["input_ids", "attention_mask"]
    ids = torch.randint(0, _TinyVocab.VOCAB, (2, 8))
    path = tmp_path / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(
            _TinyVocab.module(),
            (ids, torch.ones_like(ids)),
            str(path),
            dynamo=False,
            input_names=names,
            output_names=["hidden"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "hidden"]},
            opset_version=17,
        )
    loads: list[str] = []
    real_load = onnx.load

    def counted(f: Any, *args: Any, **kwargs: Any) -> Any:
        loads.append(str(f))
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(onnx, "load", counted)
    src = load_source(str(path), seq_len=8)
    assert loads == [str(path)]
    assert int(src.make_inputs(4, 8)["input_ids"].max()) < _TinyVocab.VOCAB  # bounds kept
