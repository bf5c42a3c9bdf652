"""``mmelocal build``: a happy path per output mode, and bad inputs that end in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmelocal.cli.main import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["build", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().lower().startswith("error")]


def test_build_tiny_bert_json(capsys, tiny_bert_dir: Path, tmp_path: Path) -> None:
    code, out, err = run(
        capsys,
        str(tiny_bert_dir),
        "--repo",
        str(tmp_path),
        "--format",
        "onnx",
        "--seq-len",
        "16",
        "--max-batch-size",
        "4",
        "--preferred-batch-size",
        "2,4",
        "--instances",
        "2",
        "--kind",
        "cpu",
        "--json",
        "-",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == "tiny-bert" and data["platform"] == "onnxruntime_onnx"
    assert data["inputs"] == [
        {"name": "input_ids", "data_type": "TYPE_INT64", "dims": [-1]},
        {"name": "attention_mask", "data_type": "TYPE_INT64", "dims": [-1]},
    ]
    assert data["max_batch_size"] == 4
    assert data["verification"]["ok"] and data["verification"]["max_abs_diff"] < 2e-5
    assert Path(data["config_path"]).read_text().count("count: 2") == 1
    assert "export:" in err  # stage lines on stderr when not on a terminal


def test_build_table_output(capsys, tiny_bert_dir: Path, tmp_path: Path) -> None:
    code, out, err = run(
        capsys,
        str(tiny_bert_dir),
        "--repo",
        str(tmp_path),
        "--name",
        "tb",
        "--seq-len",
        "8",
        "--no-warmup",
        "--no-dynamic-batching",
    )
    assert code == 0, err
    for text in (
        "built tb",
        "pytorch_libtorch",
        "last_hidden_state__0",
        "verification",
        "max abs diff",
        "config.pbtxt",
        "mmelocal_reference.npz",
    ):
        assert text in out
    assert "dynamic_batching" not in (tmp_path / "tb" / "config.pbtxt").read_text()


BAD_INPUTS: list[tuple[list[str], str]] = [
    (["s3://bucket/model"], "unknown source prefix"),
    (["ftp:thing"], "unknown source prefix"),
    (["./no/such/dir"], "does not exist"),
    (["/no/such/model.onnx"], "does not exist"),
    (["torchvision:"], "names no model"),
    (["torchvision:resnet1800"], "unknown torchvision classification model"),
    (["timm:not_a_model_xyz"], "unknown timm model"),
    (["minilm", "--format", "tflite"], "Invalid value for '--format'"),
    (["minilm", "--max-batch-size", "-1"], "max_batch_size must be >= 0"),
    (["minilm", "--preferred-batch-size", "16"], "preferred_batch_sizes must lie in 1..max"),
    (["minilm", "--preferred-batch-size", "abc"], "not a comma-separated list"),
    (["minilm", "--preferred-batch-size", "0,4"], "batch sizes must be integers >= 1"),
    (["minilm", "--max-batch-size", "0", "--dynamic-batching"], "dynamic_batching needs"),
    (["minilm", "--kind", "tpu"], "Invalid value for '--kind'"),
    (["minilm", "--instances", "0"], "instance_count must be >= 1"),
    (["minilm", "--max-queue-delay-us", "-5"], "max_queue_delay_us must be >= 0"),
    (["minilm", "--task", "translation"], "Invalid value for '--task'"),
    (["minilm", "--seq-len", "0"], "seq_len must be >= 1"),
    (["minilm", "--atol", "-1"], "atol must be >= 0"),
    (["minilm", "--rtol", "-0.5"], "rtol must be >= 0"),
    (["minilm", "--version", "0"], "version must be an integer >= 1"),
    (["minilm", "--fp16"], "tensorrt only"),
    (["minilm", "--format", "tensorrt"], "TensorRT is not available"),
    (["minilm", "--name", "a/b"], "name must be a folder name"),
    (["minilm", "--name", ".hidden"], "name must be a folder name"),
    (["minilm", "--bogus-flag"], "No such option"),
    (["torchvision:resnet18", "--task", "feature-extraction"], "image-classification"),
    (["torchvision:resnet18", "--weights", "IMAGENET9K"], "has no weights 'IMAGENET9K'"),
    (["minilm", "--weights", "none"], "weights apply to torchvision:NAME"),
]


@pytest.mark.parametrize(("args", "reason"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_gives_one_line(capsys, tmp_path: Path, args: list[str], reason: str) -> None:
    code, out, err = run(capsys, *args, "--repo", str(tmp_path / "repo"))
    text = out + err
    assert code != 0
    assert "Traceback" not in text
    lines = error_lines(text)
    assert len(lines) == 1, text
    assert reason in lines[0], text
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_bad_files_and_folders(capsys, tmp_path: Path, tiny_bert_dir: Path) -> None:
    bad_onnx = tmp_path / "model.onnx"
    bad_onnx.write_text("not an onnx file")
    bad_pt = tmp_path / "model.pt"
    bad_pt.write_bytes(b"not torchscript")
    plain = tmp_path / "plain"
    plain.mkdir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    plain_pt = tmp_path / "folder.pt"
    plain_pt.mkdir()
    cases = [
        ([str(bad_onnx)], "not a readable ONNX model"),
        ([str(bad_pt)], "not a loadable TorchScript model"),
        ([str(plain)], "no config.json"),
        ([str(a_file)], "is a .txt file"),
        ([str(tiny_bert_dir), "--seq-len", "300"], "seq_len must lie in 1..256"),
        ([str(tiny_bert_dir), "--task", "image-classification"], "cannot load"),
        ([str(bad_onnx), "--task", "feature-extraction"], "task applies to"),
        (["minilm", "--repo", str(a_file)], "is a file"),
        ([str(plain_pt)], "is a folder, not a model file"),
    ]
    for args, reason in cases:
        repo = [] if "--repo" in args else ["--repo", str(tmp_path / "repo")]
        code, out, err = run(capsys, *args, *repo)
        text = out + err
        assert code != 0 and "Traceback" not in text, text
        lines = error_lines(text)
        assert len(lines) == 1 and reason in lines[0], (args, text)


def test_missing_repo_option(capsys) -> None:
    code, out, err = run(capsys, "minilm")
    assert code == 2 and error_lines(out + err) == ["Error: Missing option '--repo'."]
