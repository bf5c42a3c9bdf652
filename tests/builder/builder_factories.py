"""Small builders for the builder tests: tiny ONNX graphs, model folders and raw tarballs."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

from mmelocal.builder.model_config import ConfigOptions, build_model_config, write_config
from mmelocal.builder.repository import add_model
from mmelocal.builder.tensors import inspect_onnx

Tensor = tuple[str, int, Sequence[int | str | None]]
FLOAT, INT64 = 1, 7  # onnx.TensorProto.FLOAT / INT64


def make_onnx(
    path: Path,
    inputs: Sequence[Tensor] = (("x", FLOAT, ("batch", 4)),),
    outputs: Sequence[Tensor] = (("y", FLOAT, ("batch", 4)),),
) -> Path:
    """Write a tiny ONNX graph (Identity nodes; never run) with the given signature."""
    from onnx import helper, save

    ins = [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in outputs]
    nodes = [helper.make_node("Identity", [inputs[0][0]], [o[0]]) for o in outputs]
    graph = helper.make_graph(nodes, "tiny", ins, outs)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def make_onnx_model_dir(
    repo: Path,
    name: str = "tiny",
    *,
    options: ConfigOptions | None = None,
    inputs: Sequence[Tensor] = (("x", FLOAT, ("batch", 4)),),
    outputs: Sequence[Tensor] = (("y", FLOAT, ("batch", 4)),),
) -> Path:
    """A valid ONNX model folder in ``repo`` whose config is read from the graph."""
    repo.mkdir(parents=True, exist_ok=True)
    onnx_path = make_onnx(repo.parent / f"{name}-src.onnx", inputs, outputs)
    signature, batch_dynamic = inspect_onnx(onnx_path)
    opts = options or ConfigOptions(
        max_batch_size=8 if batch_dynamic else 0, dynamic_batching=batch_dynamic
    )
    cfg = build_model_config(
        name=name, platform="onnxruntime_onnx", signature=signature, options=opts
    )
    return add_model(repo, name=name, config=cfg, artifact=onnx_path)


def rewrite_config(model_dir: Path, **changes: object) -> None:
    """Re-read a model's config, set top-level fields, write it back."""
    from mmelocal.builder.model_config import read_config

    cfg = read_config(model_dir / "config.pbtxt")
    for key, value in changes.items():
        setattr(cfg, key, value)
    write_config(cfg, model_dir / "config.pbtxt")


def member(
    name: str,
    data: bytes | None = None,
    *,
    type_: bytes = tarfile.REGTYPE,
    linkname: str = "",
    size: int | None = None,
) -> tuple[tarfile.TarInfo, bytes | None]:
    """A raw tar member; ``size`` may lie about the data length."""
    info = tarfile.TarInfo(name)
    info.type = type_
    info.linkname = linkname
    info.mode = 0o755 if type_ == tarfile.DIRTYPE else 0o644
    if data is not None:
        info.size = len(data) if size is None else size
    return info, data


def make_tar(path: Path, members: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    """Write a gzip tar with exactly these members (no safety filtering)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path.write_bytes(gzip.compress(buf.getvalue()))
    return path


def tar_of_dir(path: Path, folder: Path, arcname: str | None = None) -> Path:
    """``tar -czf path -C folder.parent folder.name`` with tarfile."""
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname=arcname or folder.name)
    return path


def snapshot(root: Path) -> set[str]:
    """Every path under ``root`` (relative), for before/after comparisons."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}
