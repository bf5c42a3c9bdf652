"""Builders and waits the local AWS tests share (imported by name, not as fixtures;
``unique``, ``wait_for``, ``wait_gone`` and ``tritonservers`` come from ``shared_helpers``)."""

from __future__ import annotations

import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from shared_helpers import tritonservers, unique, wait_for, wait_gone  # noqa: F401 (re-exported)

TRITON_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
#: what SageMaker's Triton GPU MME example uses (the local AWS runs it on CPU here)
INSTANCE_TYPE = "ml.g5.2xlarge"
#: the CPU-sized stand-in for ResNet-50: 3 x 32 x 32 images, 10 classes
IMAGE_SHAPE = (3, 32, 32)


def _pack(folder: Path, dest: Path) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return dest


def write_cnn_tarball(dest: Path) -> Callable[[np.ndarray], np.ndarray]:
    """``resnet/`` with a TorchScript CNN (``pytorch_libtorch``, ``INPUT__0`` ->
    ``OUTPUT__0`` as in the example's ResNet-50 config) packed as ``dest``; its forward."""
    import torch

    torch.manual_seed(11)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    ).eval()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "resnet"
        (folder / "1").mkdir(parents=True)
        torch.jit.trace(module, torch.zeros(1, *IMAGE_SHAPE)).save(str(folder / "1" / "model.pt"))
        dims = ", ".join(str(d) for d in IMAGE_SHAPE)
        (folder / "config.pbtxt").write_text(
            'name: "resnet"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\n'
            f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
            'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
            "instance_group [ { kind: KIND_GPU count: 1 } ]\n"
        )
        _pack(folder, dest)

    def forward(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out: np.ndarray = module(torch.from_numpy(x)).numpy()
        return out

    return forward


def write_trt_tarball(dest: Path) -> Path:
    """``resnet/`` as a TensorRT plan (``input`` -> ``output``, as the example's TensorRT
    model), which only a GPU can run."""
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "resnet"
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.plan").write_bytes(b"ftrt" + bytes(64))
        dims = ", ".join(str(d) for d in IMAGE_SHAPE)
        (folder / "config.pbtxt").write_text(
            'name: "resnet"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n'
            f'input [ {{ name: "input" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
            'output [ { name: "output" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
        )
        return _pack(folder, dest)


def model_and_config(
    url: str,
    *,
    count: int = 1,
    image: str = TRITON_IMAGE,
    mode: str = "MultiModel",
    environment: dict[str, str] | None = None,
    instance_type: str = "ml.g5.xlarge",
) -> str:
    """A model and an endpoint config on ``url`` (same new name); the config name."""
    import boto3

    sm = boto3.client("sagemaker")
    name = unique("cfg")
    container: dict[str, Any] = {"Image": image, "ModelDataUrl": url, "Mode": mode}
    if environment:
        container["Environment"] = environment
    sm.create_model(ModelName=name, ExecutionRoleArn=ROLE, PrimaryContainer=container)
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": name,
        "InstanceType": instance_type,
        "InitialInstanceCount": count,
    }
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant])
    return name


def wait_status(sm: Any, name: str, *, leaving: str, timeout_s: float = 180.0) -> dict[str, Any]:
    """The example's describe loop: DescribeEndpoint until the status is not ``leaving``
    (polled every 0.2 s, as the example does every 60 s)."""

    def left() -> dict[str, Any] | None:
        described: dict[str, Any] = sm.describe_endpoint(EndpointName=name)
        return described if described["EndpointStatus"] != leaving else None

    return wait_for(left, timeout_s=timeout_s, interval_s=0.2, what=f"{name} leaving {leaving}")
