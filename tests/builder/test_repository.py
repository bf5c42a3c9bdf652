"""add_model: atomic add/replace, versions kept, other models untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from builder_factories import FLOAT, make_onnx

from mmelocal.builder.model_config import build_model_config
from mmelocal.builder.repository import (
    add_model,
    artifact_filename,
    list_models,
    model_versions,
    onnx_external_files,
)
from mmelocal.builder.tensors import Signature, TensorSpec, inspect_onnx
from mmelocal.errors import UserInputError


@pytest.fixture
def onnx_file(tmp_path: Path) -> Path:
    return make_onnx(tmp_path / "src.onnx")


def _cfg(onnx_file: Path, name: str = "ignored") -> object:
    sig, _ = inspect_onnx(onnx_file)
    return build_model_config(name=name, platform="onnxruntime_onnx", signature=sig)


def test_add_replace_and_versions(tmp_path: Path, onnx_file: Path) -> None:
    repo = tmp_path / "repo"
    cfg = _cfg(onnx_file)
    a = add_model(repo, name="a", config=cfg, artifact=onnx_file, extra_files={"ref.npz": b"1"})
    b = add_model(repo, name="b", config=cfg, artifact=onnx_file)
    assert (a / "1" / "model.onnx").is_file() and (a / "ref.npz").read_bytes() == b"1"
    assert 'name: "a"' in (a / "config.pbtxt").read_text()
    b_inode = (b / "1" / "model.onnx").stat().st_ino
    v1_inode = (a / "1" / "model.onnx").stat().st_ino

    add_model(repo, name="a", config=cfg, artifact=onnx_file, version=2)
    assert model_versions(a) == [1, 2]
    assert (a / "1" / "model.onnx").stat().st_ino == v1_inode  # kept, not copied
    assert (a / "ref.npz").is_file()

    add_model(repo, name="a", config=cfg, artifact=onnx_file, version=1)
    assert model_versions(a) == [1, 2]
    assert (a / "1" / "model.onnx").stat().st_ino != v1_inode  # replaced
    assert (b / "1" / "model.onnx").stat().st_ino == b_inode  # untouched
    assert list_models(repo) == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo", "src.onnx"]  # no staging left


def test_failed_add_leaves_the_old_model(tmp_path: Path, onnx_file: Path) -> None:
    repo = tmp_path / "repo"
    cfg = _cfg(onnx_file)
    add_model(repo, name="a", config=cfg, artifact=onnx_file)
    before = (repo / "a" / "config.pbtxt").read_text()
    with pytest.raises(FileNotFoundError):
        add_model(
            repo, name="a", config=cfg, artifact=onnx_file, extra_files={"x": tmp_path / "missing"}
        )
    assert (repo / "a" / "config.pbtxt").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo", "src.onnx"]


def test_onnx_external_data_is_copied(tmp_path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", FLOAT, ["b", 4])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    src = tmp_path / "src" / "m.onnx"
    src.parent.mkdir()
    onnx.save(model, str(src), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    assert onnx_external_files(src) == ["m.onnx.data"]
    sig, _ = inspect_onnx(src)
    assert sig.input_names == ("x",)  # the initializer is not an input
    cfg = build_model_config(name="m", platform="onnxruntime_onnx", signature=sig)
    out = add_model(tmp_path / "repo", name="m", config=cfg, artifact=src)
    assert (out / "1" / "m.onnx.data").read_bytes() == (src.parent / "m.onnx.data").read_bytes()


def test_artifact_names_by_platform(tmp_path: Path) -> None:
    sig = Signature((TensorSpec("x", "TYPE_FP32", (4,)),), (TensorSpec("y", "TYPE_FP32", (4,)),))
    expected = {
        "pytorch_libtorch": "model.pt",
        "onnxruntime_onnx": "model.onnx",
        "tensorrt_plan": "model.plan",
    }
    for platform, filename in expected.items():
        cfg = build_model_config(name="m", platform=platform, signature=sig)
        assert artifact_filename(cfg) == filename
    py = build_model_config(name="m", backend="python", signature=sig)
    assert artifact_filename(py) == "model.py"
    script = tmp_path / "runner.py"
    script.write_text("class TritonPythonModel: pass\n")
    assert (
        add_model(tmp_path / "r", name="p", config=py, artifact=script) / "1" / "model.py"
    ).is_file()
    py.default_model_filename = "serve.py"
    assert artifact_filename(py) == "serve.py"


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", ".."])
def test_bad_names(tmp_path: Path, onnx_file: Path, name: str) -> None:
    with pytest.raises(UserInputError, match="model name"):
        add_model(tmp_path / "repo", name=name, config=_cfg(onnx_file), artifact=onnx_file)


def test_bad_version_and_missing_artifact(tmp_path: Path, onnx_file: Path) -> None:
    with pytest.raises(UserInputError, match="version must be an integer >= 1"):
        add_model(tmp_path / "r", name="a", config=_cfg(onnx_file), artifact=onnx_file, version=0)
    with pytest.raises(UserInputError, match="artifact not found"):
        add_model(tmp_path / "r", name="a", config=_cfg(onnx_file), artifact=tmp_path / "no")
