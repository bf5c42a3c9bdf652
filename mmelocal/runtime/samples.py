"""Sample requests built from a model config, and the checks on what comes back.

A dynamic dim (``-1``) takes a small concrete value; the batch dim (when
``max_batch_size > 0``) is ``batch_size``. Floating-point inputs are random normal,
integers are zeros (token ids must stay inside an embedding table), bools False, and
``TYPE_STRING`` inputs a short byte string. When the build recorded reference data
(``mmelocal_reference.npz`` with ``input:<name>`` / ``output:<name>``) those inputs are
used instead and the outputs are compared within tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.builder.repository import REFERENCE_FILE
from mmelocal.builder.tensors import triton_to_numpy


def _type_name(data_type: Any) -> str:
    if isinstance(data_type, str):
        return data_type if data_type.startswith("TYPE_") else f"TYPE_{data_type}"
    from tritonclient.grpc import model_config_pb2 as pb

    return str(pb.DataType.Name(data_type))


def sample_inputs(
    config: Any, *, batch_size: int = 1, dynamic_dim: int = 8, seed: int = 0
) -> dict[str, np.ndarray]:
    """One request's inputs for a ``ModelConfig`` (protobuf), made from its dims and types."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for tensor in config.input:
        dims = [dynamic_dim if d < 0 else int(d) for d in tensor.dims]
        shape = ([batch_size] if config.max_batch_size > 0 else []) + dims
        type_name = _type_name(tensor.data_type)
        if type_name == "TYPE_STRING":
            arrays[tensor.name] = np.full(shape, b"mmelocal", dtype=object)
            continue
        dtype = np.dtype(triton_to_numpy(type_name))
        if dtype.kind == "f":
            arrays[tensor.name] = rng.standard_normal(shape).astype(dtype)
        else:
            arrays[tensor.name] = np.zeros(shape, dtype=dtype)
    return arrays


def load_reference(model_dir: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """``(inputs, outputs)`` from the build's reference file, or None when absent."""
    path = Path(model_dir) / REFERENCE_FILE
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as data:
        inputs = {k[6:]: data[k] for k in data.files if k.startswith("input:")}
        outputs = {k[7:]: data[k] for k in data.files if k.startswith("output:")}
    return inputs, outputs


def check_outputs(
    config: Any, outputs: Mapping[str, np.ndarray], *, batch_size: int | None
) -> list[str]:
    """Problems with the outputs' names and shapes against the config ([] when fine)."""
    problems = []
    for tensor in config.output:
        if tensor.name not in outputs:
            problems.append(f"output {tensor.name!r} missing from the answer")
            continue
        if tensor.HasField("reshape"):
            continue
        expected = list(tensor.dims)
        if config.max_batch_size > 0:
            expected = [batch_size if batch_size is not None else -1, *expected]
        shape = list(outputs[tensor.name].shape)
        if len(shape) != len(expected) or any(
            e >= 0 and e != s for e, s in zip(expected, shape, strict=False)
        ):
            problems.append(
                f"output {tensor.name!r} has shape {shape}, the config says {expected} (-1 = any)"
            )
    return problems


def compare_outputs(
    expected: Mapping[str, np.ndarray],
    actual: Mapping[str, np.ndarray],
    *,
    atol: float,
    rtol: float,
) -> tuple[list[str], float]:
    """Compare reference outputs with Triton's; returns (problems, max abs diff)."""
    problems: list[str] = []
    worst = 0.0
    for name, ref in expected.items():
        got = actual.get(name)
        if got is None:
            problems.append(f"reference output {name!r} not in Triton's answer")
            continue
        if got.shape != ref.shape:
            problems.append(f"output {name!r}: shape {got.shape} vs reference {ref.shape}")
            continue
        if ref.dtype.kind in "fc" or got.dtype.kind in "fc":
            diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)), initial=0))
            worst = max(worst, diff)
            if not np.allclose(got, ref, atol=atol, rtol=rtol):
                problems.append(
                    f"output {name!r} differs from the reference: max |diff| {diff:.3g} "
                    f"(atol {atol:g}, rtol {rtol:g})"
                )
        elif not np.array_equal(got, ref):
            problems.append(f"output {name!r} differs from the reference")
    return problems, worst


__all__ = ["check_outputs", "compare_outputs", "load_reference", "sample_inputs"]
