"""Request bodies for load tests, made from what a built model already records.

``mmelocal build`` stores sample inputs in ``<model_dir>/mmelocal_reference.npz`` (keys
``input:<name>``); :func:`payload_from_model` turns them into a KServe v2 JSON request, the
body Triton's SageMaker front end and ``/v2/models/NAME/infer`` both accept.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from mmelocal.errors import UserInputError

REFERENCE_FILE = "mmelocal_reference.npz"
_V2_TYPES = {
    "bool": "BOOL",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
}
_NUMPY_TYPES = {v2: name for name, v2 in _V2_TYPES.items()}


def v2_json_payload(inputs: Mapping[str, np.ndarray]) -> bytes:
    """A KServe v2 JSON inference request for ``inputs`` (name -> array)."""
    tensors = []
    for name, array in inputs.items():
        datatype = _V2_TYPES.get(array.dtype.name)
        if datatype is None:
            raise UserInputError(f"input {name!r} has dtype {array.dtype}, not a v2 JSON type")
        tensors.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "data": array.reshape(-1).tolist(),
            }
        )
    return json.dumps({"inputs": tensors}).encode("utf-8")


def reference_inputs(path: Path | str, *, batch_size: int = 1) -> dict[str, np.ndarray]:
    """The recorded sample inputs of a built model folder or ``model.tar.gz`` (first rows)."""
    return reference_arrays(path, batch_size=batch_size)[0]


def reference_arrays(
    path: Path | str, *, batch_size: int = 1
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The recorded sample inputs and the source model's outputs for them (first rows),
    read from the folder or tarball once."""
    if batch_size < 1:
        raise UserInputError(f"batch_size must be >= 1, got {batch_size}")
    found: dict[str, dict[str, np.ndarray]] = {"input": {}, "output": {}}
    with np.load(io.BytesIO(_read_reference(Path(path)))) as npz:
        for key in npz.files:
            kind, _, name = key.partition(":")
            if kind in found:
                found[kind][name] = np.asarray(npz[key])[:batch_size]
    for kind, arrays in found.items():
        if not arrays:
            raise UserInputError(f"{path}: {REFERENCE_FILE} has no '{kind}:<name>' arrays")
    return found["input"], found["output"]


def v2_json_outputs(body: bytes) -> dict[str, np.ndarray]:
    """The output tensors of a KServe v2 JSON answer (name -> array of its shape)."""
    try:
        answer = json.loads(body)
        outputs = {}
        for tensor in answer["outputs"]:
            dtype = _NUMPY_TYPES.get(str(tensor.get("datatype")), "float64")
            data = np.asarray(tensor["data"], dtype=dtype)
            outputs[str(tensor["name"])] = data.reshape(tensor["shape"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UserInputError(f"not a KServe v2 JSON answer ({exc}): {body[:200]!r}") from exc
    return outputs


def payload_from_model(path: Path | str, *, batch_size: int = 1) -> bytes:
    """A v2 JSON request body made from the model's recorded sample inputs."""
    return v2_json_payload(reference_inputs(path, batch_size=batch_size))


def _read_reference(path: Path) -> bytes:
    if path.is_dir():
        candidates = [path / REFERENCE_FILE, *sorted(path.glob(f"*/{REFERENCE_FILE}"))]
        for candidate in candidates:
            if candidate.is_file():
                return candidate.read_bytes()
        raise UserInputError(
            f"{path}: no {REFERENCE_FILE} (build the model with mmelocal build, or pass --payload)"
        )
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.isfile() and Path(member.name).name == REFERENCE_FILE:
                        handle = tar.extractfile(member)
                        if handle is not None:
                            return handle.read()
        except (OSError, tarfile.TarError) as exc:
            raise UserInputError(f"cannot read {path}: {exc}") from exc
        raise UserInputError(f"{path}: no {REFERENCE_FILE} inside (or pass --payload)")
    raise UserInputError(f"{path}: expected a model folder or a .tar.gz")


__all__ = [
    "REFERENCE_FILE",
    "payload_from_model",
    "reference_arrays",
    "reference_inputs",
    "v2_json_outputs",
    "v2_json_payload",
]
