"""mmelocal's generic Python-backend runner: serves a TorchScript, ONNX or TensorRT artifact.

mmelocal copies this file as ``<version>/model.py`` beside the artifact when the server
lacks the model's native backend (the pip ``tritonserver`` has only the Python backend).
Triton's own scheduling stays real: dynamic batching hands ``execute`` several requests,
which are concatenated along the batch dimension, run once and split back; each
``instance_group`` copy is its own stub process; warmup requests arrive like any other.

The config's ``parameters`` tell the runner what to run:
``mmelocal_artifact_format`` (torchscript | onnx | tensorrt), ``mmelocal_artifact``
(file name inside the version folder), optional ``mmelocal_threads`` (per instance).
Input and output names, data types and ``max_batch_size`` come from the model config.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

_INDEXED = re.compile(r"^(.*)__(\d+)$")


def _param(config: dict, key: str, default: str | None = None) -> str | None:
    entry = config.get("parameters", {}).get(key)
    if not entry:
        return default
    return entry.get("string_value", default)


def _instance_count(config: dict) -> int:
    groups = config.get("instance_group") or [{"count": 1}]
    return max(1, sum(int(g.get("count", 1) or 1) for g in groups))


def _numpy_dtype(triton_type: str) -> np.dtype:
    name = triton_type if triton_type.startswith("TYPE_") else f"TYPE_{triton_type}"
    return np.dtype(pb_utils.triton_string_to_numpy(name))


def _index_order(names: list[str]) -> list[str]:
    """``INPUT__0, INPUT__1`` style names sorted by index; other names keep config order."""
    indexes = []
    for name in names:
        match = _INDEXED.match(name)
        if match is None:
            return list(names)
        indexes.append(int(match.group(2)))
    return [name for _, name in sorted(zip(indexes, names, strict=True))]


class _TorchScriptRunner:
    def __init__(self, path: Path, device: str, threads: int, input_names: list[str]) -> None:
        import torch

        self.torch = torch
        try:
            torch.set_num_threads(threads)
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        self.device = torch.device(device)
        self.module = torch.jit.load(str(path), map_location=self.device)
        self.module.eval()
        self.arg_order = self._argument_order(input_names)

    def _argument_order(self, input_names: list[str]) -> list[str]:
        try:
            schema_args = [a.name for a in self.module.forward.schema.arguments][1:]
        except Exception:
            schema_args = []
        if schema_args and set(input_names) <= set(schema_args):
            return [n for n in schema_args if n in input_names]
        return _index_order(input_names)

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        torch = self.torch
        args = [torch.from_numpy(inputs[name]).to(self.device) for name in self.arg_order]
        with torch.inference_mode():
            result = self.module(*args)
        return _name_outputs(result, output_names, to_numpy=lambda t: t.detach().cpu().numpy())


class _OnnxRunner:
    def __init__(self, path: Path, device: str, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        providers = ["CPUExecutionProvider"]
        if device.startswith("cuda"):
            index = device.split(":")[1] if ":" in device else "0"
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": int(index)}))  # type: ignore[arg-type]
        self.session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
        self.graph_outputs = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        names = [n for n in output_names if n in self.graph_outputs] or self.graph_outputs
        values = self.session.run(names, inputs)
        return _name_outputs(list(values), output_names, to_numpy=np.asarray, given=names)


class _TensorRTRunner:
    def __init__(self, path: Path, device: str) -> None:
        if not device.startswith("cuda"):
            raise RuntimeError(
                "TensorRT plans need an NVIDIA GPU and this instance runs on CPU; check the "
                "ONNX or TorchScript build of this model instead, or run on a GPU machine"
            )
        try:
            import tensorrt as trt
            import torch
        except ImportError as exc:
            raise RuntimeError(
                f"serving a TensorRT plan needs tensorrt and torch: pip install tensorrt ({exc})"
            ) from exc
        self.torch = torch
        self.device = torch.device(device)
        logger = trt.Logger(trt.Logger.WARNING)
        with open(path, "rb") as fh:
            self.engine = trt.Runtime(logger).deserialize_cuda_engine(fh.read())
        if self.engine is None:
            raise RuntimeError(f"TensorRT could not deserialize {path} (built for another GPU?)")
        self.context = self.engine.create_execution_context()
        self.trt = trt

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        torch, trt = self.torch, self.trt
        keep = []
        for name, array in inputs.items():
            tensor = torch.from_numpy(array).to(self.device).contiguous()
            keep.append(tensor)
            self.context.set_input_shape(name, tuple(tensor.shape))
            self.context.set_tensor_address(name, tensor.data_ptr())
        outputs = {}
        for name in output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = trt.nptype(self.engine.get_tensor_dtype(name))
            tensor = torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype)
            tensor = tensor.to(self.device)
            self.context.set_tensor_address(name, tensor.data_ptr())
            outputs[name] = tensor
        stream = torch.cuda.current_stream(self.device)
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError("TensorRT execution failed")
        stream.synchronize()
        return {name: t.cpu().numpy() for name, t in outputs.items()}


def _name_outputs(result, output_names, *, to_numpy, given=None) -> dict[str, np.ndarray]:
    if isinstance(result, dict):
        missing = [n for n in output_names if n not in result]
        if missing:
            raise RuntimeError(
                f"the model returned outputs {sorted(result)}, the config names {missing}"
            )
        return {n: to_numpy(result[n]) for n in output_names}
    if not isinstance(result, (list, tuple)):
        result = [result]
    flat = []
    for item in result:
        if isinstance(item, (list, tuple)):
            flat.extend(item)
        elif hasattr(item, "to_tuple"):
            flat.extend(item.to_tuple())
        else:
            flat.append(item)
    order = given or _index_order(output_names)
    if len(flat) < len(order):
        raise RuntimeError(
            f"the model returned {len(flat)} outputs, the config declares {len(order)} ({order})"
        )
    return {name: to_numpy(flat[i]) for i, name in enumerate(order)}


class TritonPythonModel:
    """Triton entry point (see the module docstring)."""

    def initialize(self, args: dict) -> None:
        """Load the artifact named by the config for this instance's device."""
        self.config = json.loads(args["model_config"])
        self.model_name = self.config.get("name", "model")
        self.max_batch_size = int(self.config.get("max_batch_size", 0) or 0)
        self.inputs = {i["name"]: _numpy_dtype(i["data_type"]) for i in self.config["input"]}
        self.outputs = {o["name"]: _numpy_dtype(o["data_type"]) for o in self.config["output"]}
        version_dir = Path(args["model_repository"]) / str(args["model_version"])
        fmt = _param(self.config, "mmelocal_artifact_format")
        artifact = version_dir / (_param(self.config, "mmelocal_artifact") or "")
        if not fmt or not artifact.is_file():
            raise RuntimeError(f"mmelocal runner: artifact {artifact} ({fmt}) not found")
        kind = args.get("model_instance_kind", "CPU")
        device = f"cuda:{args.get('model_instance_device_id', '0')}" if kind == "GPU" else "cpu"
        default_threads = max(1, (os.cpu_count() or 1) // _instance_count(self.config))
        threads = int(_param(self.config, "mmelocal_threads", str(default_threads)) or 1)
        if fmt == "torchscript":
            self.runner = _TorchScriptRunner(artifact, device, threads, list(self.inputs))
        elif fmt == "onnx":
            self.runner = _OnnxRunner(artifact, device, threads)
        elif fmt == "tensorrt":
            self.runner = _TensorRTRunner(artifact, device)
        else:
            raise RuntimeError(f"mmelocal runner: unknown artifact format {fmt!r}")

    def _read(self, request) -> dict[str, np.ndarray]:
        arrays = {}
        for name, dtype in self.inputs.items():
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise ValueError(
                    f"request has no input {name!r}; the model takes {list(self.inputs)}"
                )
            array = tensor.as_numpy()
            if array.dtype != dtype:
                array = array.astype(dtype)
            if not array.flags.writeable or not array.flags.c_contiguous:
                array = np.array(array, copy=True, order="C")
            arrays[name] = array
        return arrays

    def _respond(self, outputs: dict[str, np.ndarray]):
        tensors = [
            pb_utils.Tensor(name, np.ascontiguousarray(outputs[name].astype(dtype, copy=False)))
            for name, dtype in self.outputs.items()
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        """Run the requests as one batch when their shapes allow, else one by one."""
        output_names = list(self.outputs)
        batch, responses = [], [None] * len(requests)
        for index, request in enumerate(requests):
            try:
                batch.append((index, self._read(request)))
            except Exception as exc:
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        if len(batch) > 1 and self.max_batch_size > 0 and _stackable([a for _, a in batch]):
            sizes = [next(iter(a.values())).shape[0] for _, a in batch]
            merged = {n: np.concatenate([a[n] for _, a in batch]) for n in self.inputs}
            try:
                result = self.runner.run(merged, output_names)
                splits = np.cumsum(sizes)[:-1]
                parts = {n: np.split(v, splits) for n, v in result.items()}
                for k, (index, _) in enumerate(batch):
                    responses[index] = self._respond({n: parts[n][k] for n in output_names})
                return responses
            except Exception:
                pass  # fall back to one by one: the failing request gets its own error
        for index, arrays in batch:
            try:
                responses[index] = self._respond(self.runner.run(arrays, output_names))
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}"
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
        return responses

    def finalize(self) -> None:
        """Drop the model so its memory goes back before the stub exits."""
        self.runner = None


def _stackable(batches: list[dict[str, np.ndarray]]) -> bool:
    first = batches[0]
    return all(
        a[n].shape[1:] == first[n].shape[1:] and a[n].ndim > 0 for a in batches for n in first
    )
