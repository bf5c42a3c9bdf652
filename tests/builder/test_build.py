"""build_model: source -> export -> verify -> config -> reference -> repository."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mmelocal.builder.build import STAGES, BuildOptions, build_model
from mmelocal.builder.model_config import read_config
from mmelocal.errors import ConfigError, ExportError, UserInputError


def _validate_ok(path: Path) -> None:
    from mmelocal.builder.validate import validate_path

    report = validate_path(path)
    assert report.ok, [p.message for p in report.problems]


def test_tiny_bert_to_torchscript_then_onnx(tiny_bert_source, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    stages: list[str] = []
    result = build_model(
        tiny_bert_source,
        repo=repo,
        progress=lambda stage, msg: stages.append(stage),
        options=BuildOptions(name="tiny"),
    )
    assert stages == list(STAGES)
    assert result.model_dir == repo / "tiny"
    assert result.artifact_path == repo / "tiny" / "1" / "model.pt"
    assert result.family == "bert" and result.options.max_batch_size == 8
    cfg = read_config(result.config_path)
    assert cfg == result.config
    assert cfg.platform == "pytorch_libtorch"
    assert [i.name for i in cfg.input] == ["input_ids", "attention_mask"]
    assert [list(i.dims) for i in cfg.input] == [[-1], [-1]]
    assert [o.name for o in cfg.output] == ["last_hidden_state__0", "pooler_output__1"]
    assert [list(o.dims) for o in cfg.output] == [[-1, 32], [32]]
    report = result.verify_report
    assert report is not None and report.ok and report.max_abs_diff < 1e-6
    assert {r.batch_size for r in report.rows} == {1, 2, 4}
    assert result.reference_path is not None
    with np.load(result.reference_path) as ref:
        assert sorted(ref.files) == [
            "input:attention_mask",
            "input:input_ids",
            "output:last_hidden_state__0",
            "output:pooler_output__1",
        ]
        assert ref["input:input_ids"].shape == (2, 16)
        assert ref["output:last_hidden_state__0"].shape == (2, 16, 32)
    _validate_ok(result.model_dir)

    other = build_model(
        tiny_bert_source, repo=repo, options=BuildOptions(name="neighbour", verify=False)
    )
    again = build_model(
        tiny_bert_source, repo=repo, options=BuildOptions(name="tiny", format="onnx")
    )
    assert sorted(p.name for p in (repo / "tiny" / "1").iterdir()) == ["model.onnx"]
    assert read_config(again.config_path).platform == "onnxruntime_onnx"
    assert again.verify_report is not None and again.verify_report.max_abs_diff < 2e-5
    assert (other.model_dir / "1" / "model.pt").is_file()
    assert other.verify_report is None
    _validate_ok(repo)


def test_minilm_onnx_with_overrides(minilm_source, tmp_path: Path) -> None:
    result = build_model(
        minilm_source,
        repo=tmp_path,
        options=BuildOptions(
            format="onnx",
            overrides={"max_batch_size": 4, "instance_count": 2, "kind": "cpu", "warmup": False},
        ),
    )
    cfg = result.config
    assert cfg.name == "minilm" and cfg.max_batch_size == 4
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4]
    assert cfg.instance_group[0].count == 2 and not cfg.model_warmup
    assert [o.name for o in cfg.output] == ["last_hidden_state", "pooler_output"]
    report = result.verify_report
    assert report is not None and report.max_abs_diff < 2e-5
    assert {r.batch_size for r in report.rows} == {1, 2, 4}
    _validate_ok(result.model_dir)


def test_resnet_no_batching(resnet_source, tmp_path: Path) -> None:
    result = build_model(
        resnet_source,
        repo=tmp_path,
        options=BuildOptions(name="rn", overrides={"max_batch_size": 0}),
    )
    cfg = result.config
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [-1, 3, 224, 224]
    assert cfg.input[0].name == "pixel_values__0" and cfg.output[0].name == "logits__0"
    assert list(cfg.model_warmup[0].inputs["pixel_values__0"].dims) == [1, 3, 224, 224]
    report = result.verify_report
    assert report is not None and report.max_abs_diff < 1e-6
    _validate_ok(result.model_dir)


def test_existing_onnx_file_is_reused(artifact_of, tmp_path: Path) -> None:
    src = artifact_of("resnet", "onnx").path
    result = build_model(
        str(src), repo=tmp_path, options=BuildOptions(name="from-file", format="onnx")
    )
    assert result.artifact.copied_from_source
    assert result.verify_report is not None and result.verify_report.skipped
    assert (tmp_path / "from-file" / "1" / "model.onnx").read_bytes() == src.read_bytes()
    _validate_ok(result.model_dir)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"overrides": {"max_batch_size": -1}}, ConfigError, "max_batch_size must be >= 0"),
        ({"overrides": {"kind": "tpu"}}, ConfigError, "kind must be one of"),
        ({"overrides": {"preferred_batch_sizes": (64,)}}, ConfigError, "preferred_batch_sizes"),
        ({"format": "tflite"}, UserInputError, "format must be one of"),
        ({"atol": -1.0}, UserInputError, "atol must be >= 0"),
        ({"seq_len": 0}, UserInputError, "seq_len must be >= 1"),
        ({"version": 0}, UserInputError, "version must be an integer >= 1"),
        ({"fp16": True}, UserInputError, "tensorrt only"),
        ({"name": "a\x00b"}, UserInputError, "name must be a folder name"),
        ({"name": "../up"}, UserInputError, "name must be a folder name"),
    ],
)
def test_bad_options_fail_before_loading(
    kwargs, error, message, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _forbid_loading(monkeypatch)
    with pytest.raises(error, match=message):
        build_model("torchvision:resnet18", repo=tmp_path, options=BuildOptions(**kwargs))
    assert not any(tmp_path.iterdir())


def _forbid_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loading a source fail loudly: "fails before loading" without a clock."""

    def load_source(*args: object, **kwargs: object) -> None:
        raise AssertionError("the source was loaded before the options were checked")

    monkeypatch.setattr("mmelocal.builder.sources.load_source", load_source)


def test_tensorrt_unavailable_fails_fast(tmp_path: Path, monkeypatch) -> None:
    from mmelocal.builder import onnx2trt

    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: False)
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: None)
    with pytest.raises(ExportError, match="TensorRT is not available"):
        build_model("minilm", repo=tmp_path, options=BuildOptions(format="tensorrt"))


def test_tensorrt_build_with_a_fake_trtexec(tiny_bert_source, tmp_path: Path, monkeypatch) -> None:
    from mmelocal.builder import onnx2trt

    commands: list[list[str]] = []

    def fake_run(cmd, timeout_s):
        commands.append(cmd)
        Path(cmd[2].split("=", 1)[1]).write_bytes(b"engine")

    monkeypatch.setattr(onnx2trt, "tensorrt_installed", lambda: False)
    monkeypatch.setattr(onnx2trt, "find_trtexec", lambda name: "/usr/bin/trtexec")
    monkeypatch.setattr(onnx2trt, "_run_local", fake_run)
    result = build_model(
        tiny_bert_source,
        repo=tmp_path,
        options=BuildOptions(name="trt", format="tensorrt", fp16=True),
    )
    assert result.artifact_path == tmp_path / "trt" / "1" / "model.plan"
    assert result.config.platform == "tensorrt_plan"
    assert "--optShapes=input_ids:8x16,attention_mask:8x16" in commands[0]
    assert "--fp16" in commands[0]
    assert result.verify_report is not None and result.verify_report.ok
    assert any("TensorRT plan itself runs only on a GPU" in n for n in result.verify_report.notes)


def test_existing_file_checked_against_a_reference(artifact_of, tmp_path: Path) -> None:
    first = build_model(
        str(artifact_of("resnet", "onnx").path),
        repo=tmp_path,
        options=BuildOptions(name="a", format="onnx"),
    )
    assert first.verify_report is not None and first.verify_report.skipped
    again = build_model(
        str(first.artifact_path),
        repo=tmp_path,
        options=BuildOptions(name="b", format="onnx", reference_npz=first.reference_path),
    )
    report = again.verify_report
    assert report is not None and not report.skipped and report.ok
    assert report.max_abs_diff == 0.0 and {r.output for r in report.rows} == {"logits"}
    # the recorded batch of 2, and its rows at the other batch sizes the model serves
    assert sorted(r.batch_size for r in report.rows) == [1, 2, 4]


def test_repository_that_cannot_be_written(tmp_path: Path) -> None:
    import torch

    from mmelocal.builder.sources import source_from_module

    src = source_from_module(torch.nn.Linear(4, 2), {"x": torch.randn(2, 4)}, name="lin")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UserInputError, match="exists and is not a folder"):
        build_model(src, repo=a_file)
    with pytest.raises(UserInputError, match="cannot write the model into"):
        build_model(src, repo=a_file / "sub" / "repo", options=BuildOptions(verify=False))


def test_source_failing_on_random_inputs_is_one_error(tmp_path: Path) -> None:
    import torch

    from mmelocal.builder.sources import source_from_module
    from mmelocal.errors import SourceError

    class FailsOnBatchThree(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] == 4:
                raise ValueError("batch 4 is not supported\nsecond line")
            return x * 2

    src = source_from_module(FailsOnBatchThree(), {"x": torch.randn(2, 3)}, name="odd")
    with pytest.raises(SourceError, match=r"failed on inputs \{'x': \[4, 3\]\}: batch 4 is not"):
        build_model(src, repo=tmp_path, options=BuildOptions(format="onnx"))


def test_overrides_are_checked_against_the_real_family(tmp_path: Path) -> None:
    """A bare folder name says nothing about the family: fitting some preset is enough
    before loading, then the detected family's preset decides."""
    import shutil

    import torch
    import transformers as tf

    folder = tmp_path / "my_model"
    torch.manual_seed(0)
    tf.ResNetForImageClassification(
        tf.ResNetConfig(  # type: ignore[call-arg]  # num_labels: PretrainedConfig's
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3
        )
    ).save_pretrained(folder)
    # 16 > generic max_batch_size 8, but fine for the resnet preset (32)
    result = build_model(
        str(folder),
        repo=tmp_path / "repo",
        options=BuildOptions(verify=False, overrides={"preferred_batch_sizes": (16,)}),
    )
    assert result.family == "resnet" and result.options.max_batch_size == 32
    assert list(result.config.dynamic_batching.preferred_batch_size) == [16]
    shutil.rmtree(tmp_path / "repo")
    with pytest.MonkeyPatch.context() as patch:
        _forbid_loading(patch)
        with pytest.raises(ConfigError, match="max_batch_size must be >= 0"):
            build_model(
                str(folder),
                repo=tmp_path / "repo",
                options=BuildOptions(overrides={"max_batch_size": -1}),
            )
