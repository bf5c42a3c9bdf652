"""Data-type maps and signature inspection of ONNX / TorchScript artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builder_factories import FLOAT, INT64, make_onnx

from mmelocal.builder.tensors import (
    TRITON_TYPES,
    Signature,
    TensorSpec,
    inspect_onnx,
    numpy_to_triton,
    onnx_to_triton,
    specs_from_arrays,
    torch_to_triton,
    triton_to_numpy,
    triton_to_onnx,
)
from mmelocal.errors import ConfigError, UserInputError


@pytest.mark.parametrize("triton", [t for t in TRITON_TYPES if t not in ("TYPE_BF16",)])
def test_numpy_round_trip(triton: str) -> None:
    assert numpy_to_triton(triton_to_numpy(triton)) == triton


@pytest.mark.parametrize("triton", TRITON_TYPES)
def test_onnx_round_trip(triton: str) -> None:
    assert onnx_to_triton(triton_to_onnx(triton)) == triton


def test_onnx_numbers_match_onnx() -> None:
    from onnx import TensorProto

    assert triton_to_onnx("TYPE_FP32") == TensorProto.FLOAT
    assert triton_to_onnx("TYPE_INT64") == TensorProto.INT64
    assert triton_to_onnx("TYPE_BF16") == TensorProto.BFLOAT16
    assert triton_to_onnx("TYPE_BOOL") == TensorProto.BOOL


def test_torch_names_without_importing_torch() -> None:
    assert torch_to_triton("torch.float32") == "TYPE_FP32"
    assert torch_to_triton("torch.long") == "TYPE_INT64"
    assert torch_to_triton("torch.bfloat16") == "TYPE_BF16"
    with pytest.raises(ConfigError, match="complex64"):
        torch_to_triton("torch.complex64")


def test_bad_types() -> None:
    with pytest.raises(ConfigError, match="no Triton data type"):
        numpy_to_triton(np.complex64)
    with pytest.raises(ConfigError, match="has no numpy dtype"):
        triton_to_numpy("TYPE_BF16")
    with pytest.raises(ConfigError, match="data_type must be one of"):
        TensorSpec("x", "FP32", (1,))
    with pytest.raises(ConfigError, match="positive or -1"):
        TensorSpec("x", "TYPE_FP32", (0,))
    with pytest.raises(ConfigError, match="unique names"):
        spec = TensorSpec("x", "TYPE_FP32", (1,))
        Signature((spec, spec), ())


def test_inspect_onnx_symbolic_and_fixed_dims(tmp_path: Path) -> None:
    path = make_onnx(
        tmp_path / "m.onnx",
        inputs=(("input_ids", INT64, ("batch", "seq")), ("mask", INT64, ("batch", None))),
        outputs=(("hidden", FLOAT, ("batch", "seq", 8)),),
    )
    sig, batch_dynamic = inspect_onnx(path)
    assert batch_dynamic
    assert sig.inputs == (
        TensorSpec("input_ids", "TYPE_INT64", (-1,)),
        TensorSpec("mask", "TYPE_INT64", (-1,)),
    )
    assert sig.outputs == (TensorSpec("hidden", "TYPE_FP32", (-1, 8)),)
    full, _ = inspect_onnx(path, strip_batch=False)
    assert full.outputs[0].dims == (-1, -1, 8)

    fixed = make_onnx(
        tmp_path / "f.onnx", inputs=(("x", FLOAT, (1, 3)),), outputs=(("y", FLOAT, (1, 3)),)
    )
    sig, batch_dynamic = inspect_onnx(fixed)
    assert not batch_dynamic and sig.inputs[0].dims == (1, 3)


def test_inspect_onnx_errors(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="not found"):
        inspect_onnx(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 5)
    with pytest.raises(UserInputError, match="not a readable ONNX model"):
        inspect_onnx(bad)


def test_specs_from_arrays() -> None:
    specs = specs_from_arrays([("a", np.zeros((2, 5), np.int64))], batch=True)
    assert specs == (TensorSpec("a", "TYPE_INT64", (5,)),)
    assert Signature(specs, ()).without_batch().inputs[0].dims == ()


def test_inspect_torchscript(tmp_path: Path) -> None:
    torch: Any = pytest.importorskip("torch")
    from mmelocal.builder.tensors import inspect_torchscript, torchscript_forward_args

    class Three(torch.nn.Module):
        def forward(self, a, b, c):  # type: ignore[no-untyped-def]
            return a + b + c

    path = tmp_path / "m.pt"
    x = torch.ones(1, 2)
    with pytest.warns(Warning):
        torch.jit.trace(Three(), (x, x, x)).save(str(path))
    assert inspect_torchscript(path) == 3
    assert torchscript_forward_args(path) == ("a", "b", "c")
    (tmp_path / "bad.pt").write_bytes(b"nope")
    with pytest.raises(UserInputError, match="not a loadable TorchScript model"):
        inspect_torchscript(tmp_path / "bad.pt")
