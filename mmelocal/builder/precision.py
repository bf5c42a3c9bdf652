"""The precision of a model's weights (``fp32``, ``fp16``, ``bf16``, ``int8``), read from its
artifact: what a capacity measurement records beside its figures, so that an estimate is
compared only with a measurement of the same precision (FP16 weights take half the bytes).

Read where the artifact says it without a GPU: a TorchScript ``model.pt`` (its parameters
and buffers, loaded on the meta device where its graph allows: no weight is read) and an
ONNX ``model.onnx`` (its initializers). A TensorRT plan holds its precision in the engine,
readable only with TensorRT; a Python-backend model has no artifact of its own: both are
``""`` (unknown). The precision is that of most weight elements (a model keeps some tensors
in FP32 under FP16, e.g. a norm's statistics)."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

logger = logging.getLogger(__name__)

#: ONNX TensorProto data types -> precision (FLOAT, FLOAT16, BFLOAT16, DOUBLE, INT8, UINT8)
_ONNX_TYPES = {1: "fp32", 10: "fp16", 16: "bf16", 11: "fp64", 3: "int8", 2: "int8"}
#: torch dtypes (by name) -> precision
_TORCH_TYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "qint8": "int8",
    "int8": "int8",
}


def _artifact(model_dir: Path) -> Path | None:
    """The ``model.pt`` or ``model.onnx`` of the highest numbered version folder."""
    versions = sorted(
        (p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    for version in reversed(versions):
        for name in ("model.pt", "model.onnx"):
            if (version / name).is_file():
                return version / name
    return None


def weights_precision(model_dir: Path | str) -> str:
    """The precision of most of the weights of the model folder ``model_dir`` (see the
    module); ``""`` when the artifact cannot say or cannot be read here."""
    artifact = _artifact(Path(model_dir))
    if artifact is None:
        return ""
    try:
        counts = _onnx_counts(artifact) if artifact.suffix == ".onnx" else _torch_counts(artifact)
    except Exception as exc:  # a missing framework or an unreadable file: unknown, not fatal
        logger.info("precision of %s unknown: %s", artifact, exc)
        return ""
    return counts.most_common(1)[0][0] if counts else ""


def _onnx_counts(path: Path) -> Counter[str]:
    import math

    import onnx

    model = onnx.load(str(path), load_external_data=False)
    counts: Counter[str] = Counter()
    for tensor in model.graph.initializer:
        if tensor.data_type in _ONNX_TYPES:
            counts[_ONNX_TYPES[tensor.data_type]] += math.prod(tensor.dims)
    return counts


def _torch_counts(path: Path) -> Counter[str]:
    import warnings

    import torch

    with warnings.catch_warnings():  # torch 2.9+ calls torch.jit.load deprecated
        warnings.simplefilter("ignore")
        try:
            # on the meta device: dtypes and shapes, no weight is read into memory
            module = torch.jit.load(str(path), map_location="meta")
        except NotImplementedError:
            # a graph that runs an operator at load that has no meta kernel (a traced
            # Hugging Face model's aten::equal): on the CPU, weights and all
            module = torch.jit.load(str(path), map_location="cpu")
    counts: Counter[str] = Counter()
    for tensor in [*module.parameters(), *module.buffers()]:
        name = str(tensor.dtype).removeprefix("torch.")
        if name in _TORCH_TYPES:
            counts[_TORCH_TYPES[name]] += tensor.numel()
    return counts


__all__ = ["weights_precision"]
