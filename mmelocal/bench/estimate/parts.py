"""The parts of a model copy's GPU footprint: the constants, each with its source, and the
arithmetic that turns a traced model into parts (pure functions over plain data).

Used by :mod:`mmelocal.bench.estimate`, which turns parts into counts per card. Every
constant below names where it comes from: vendor documentation, the published MME runs in
:mod:`mmelocal.bench.published`, or "allowance"/"calibrated" where no figure exists.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmelocal.bench.estimate.published import PUBLISHED
from mmelocal.builder.backends import EXPORT_FORMATS
from mmelocal.errors import UserInputError
from mmelocal.units import MiB

PRECISION_BYTES = {"fp32": 4, "fp16": 2, "int8": 1}
ESTIMATE_FORMATS = EXPORT_FORMATS
PER_COPY = "per copy"
ONCE = "once per process"

# ---- constants, each with its source -----------------------------------------------------

#: PyTorch's default cuBLAS workspace per (handle, stream), CUBLAS_WORKSPACE_CONFIG
#: ":4096:2:16:8" = 2 x 4096 KiB + 8 x 16 KiB (PyTorch docs, "Reproducibility" and
#: aten/src/ATen/cuda/CublasHandlePool.cpp). It is allocated through the caching allocator,
#: which serves 1-10 MiB requests from 20 MiB segments (PyTorch docs, "CUDA semantics: memory
#: management"; c10/cuda/CUDACachingAllocator.cpp kLargeBuffer), so one workspace holds a
#: segment of 20 MiB. Triton's PyTorch backend gives every instance its own CUDA stream
#: (pytorch_backend src/libtorch.cc, ``SetCurrentCudaStream(stream_, ...)``) and the caching
#: allocator keeps blocks per stream: workspace and activations are per instance, kept.
CUBLAS_WORKSPACE_BYTES = 2 * 4096 * 1024 + 8 * 16 * 1024
CUBLAS_SEGMENT_BYTES = 20 * MiB

#: The caching allocator rounds every block (512 B, 2 MiB for large ones) and splits
#: segments; an allowance of up to 10 % of weights and activations covers it (the published
#: BERT-base PyTorch copy is 7.8 % above its weights + batch-1 activations + cuBLAS segment).
ALLOCATOR_SLACK = 0.10

#: cuDNN convolution workspace the caching allocator keeps for a model with overlapping
#: convolutions (kernel > stride: 3x3, 7x7; not a ViT's patchify convolution). cuDNN docs:
#: the workspace size depends on the algorithm chosen per layer; no published figure per
#: model. Calibrated: the published ResNet-50 PyTorch curve on a T4 (271 MiB per copy) less
#: its weights (98 MiB), its batch-1 activations (one 20 MiB segment) and the cuBLAS segment
#: (20 MiB) leaves 133 MiB.
CUDNN_WORKSPACE_BYTES = (0, 128 * MiB, 256 * MiB)


def _once_from_published(platform: str, with_conv: bool | None) -> tuple[int, int, int]:
    """(low, point, high) of what the first copy adds beyond a later one: the runtime.

    Read from the published curves (:data:`mmelocal.bench.published.PUBLISHED`): libtorch
    and cuBLAS kernels load on the first PyTorch model (531-545 MiB), cuDNN too when the
    model has a convolution (772-776 MiB); TensorRT's runtime 288-368 MiB.
    """
    convs = {"resnet50", "vit_large_patch16_224"}
    values = [
        p.runtime_once_mib
        for p in PUBLISHED
        if p.platform == platform and (with_conv is None or (p.model in convs) == with_conv)
    ]
    return (
        int(min(values) * MiB),
        int(statistics.fmean(values) * MiB),
        int(max(values) * MiB),
    )


#: CUDA context + Triton with nothing loaded (its CUDA memory pool, 64 MiB by default:
#: Triton docs ``--cuda-memory-pool-byte-size``), as published: 165 MiB on a T4, 370 MiB on
#: a V100 (sagemaker-tritonserver:22.10). Other cards: no published figure; the point is
#: the larger reading and the high end an allowance for bigger contexts on newer cards.
SERVER_BASELINE_BYTES = {"T4": 165 * MiB, "V100": 370 * MiB}
SERVER_BASELINE_RANGE = (165 * MiB, 370 * MiB, 512 * MiB)

#: TensorRT context memory relative to the eager live-tensor peak at the profile's max
#: shape: fusion (conv+BN+ReLU, GELU) shrinks it, attention that the ONNX export spells as
#: MatMul+Softmax grows it (TensorRT developer guide: activations share one device-memory
#: block sized for the max profile; builder flags *allow* FP16, layers may stay FP32).
#: Published ratios: ResNet-50 0.76, ViT-L 1.24, BERT-base 1.5 (fp16 weights).
TRT_CONTEXT_FACTOR = (0.5, 0.75, 1.5)
#: Tactic scratch memory inside the context (TensorRT workspace memory pool): allowance.
TRT_SCRATCH_BYTES = (0, 0, 64 * MiB)

#: ONNX Runtime's CUDA arena grows by powers of two (ORT CUDA EP docs,
#: ``arena_extend_strategy`` kNextPowerOfTwo): up to twice the activations. No published
#: MME figure for ONNX Runtime; the runtime loaded once is taken as libtorch's.
ORT_ARENA_FACTOR = (1.0, 1.0, 2.0)


@dataclass(frozen=True, kw_only=True)
class Batches:
    """The batches Triton will run: largest warm-up (or first request), preferred, max.

    ``profile_max`` is the TensorRT optimisation profile's max batch (its context memory
    is sized for it); ``instances`` is ``instance_group`` count.
    """

    warmup: int
    preferred: int
    max: int
    instances: int = 1
    profile_max: int | None = None

    def __post_init__(self) -> None:
        for name in ("warmup", "preferred", "max", "instances"):
            if getattr(self, name) < 1:
                raise UserInputError(f"{name} batch must be >= 1, got {getattr(self, name)}")

    @property
    def engine_max(self) -> int:
        """The batch a TensorRT engine is sized for."""
        return self.profile_max or self.max

    def distinct(self) -> list[int]:
        """Every batch to trace, ascending."""
        return sorted({self.warmup, self.preferred, self.max, self.engine_max})


@dataclass(frozen=True, kw_only=True)
class Part:
    """One row of the estimate: what it is, its scope, its range, where it comes from."""

    name: str
    scope: str
    low_bytes: int
    point_bytes: int
    high_bytes: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return dict(vars(self))


def sum_parts(parts: Sequence[Part], scope: str) -> tuple[int, int, int]:
    """(low, point, high) summed over the parts of ``scope``."""
    chosen = [p for p in parts if p.scope == scope]
    return (
        sum(p.low_bytes for p in chosen),
        sum(p.point_bytes for p in chosen),
        sum(p.high_bytes for p in chosen),
    )


@dataclass(frozen=True, kw_only=True)
class ModelFacts:
    """What the estimate needs from a traced model (see :mod:`mmelocal.bench.activations`).

    ``activation_bytes`` maps each traced batch to its live-tensor peak at the precision;
    ``weight_bytes`` holds parameters and buffers at the precision, and ``weight_bytes_fp32``
    the same at 4 bytes (a TensorRT engine may keep FP32 layers).
    """

    params: int
    weight_bytes: int
    weight_bytes_fp32: int
    activation_bytes: Mapping[int, int]
    convolutions: int = 0
    overlapping_convolutions: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)


def _segments(size: float) -> int:
    """``size`` rounded up to whole caching-allocator segments (20 MiB, kLargeBuffer)."""
    return -(-int(size) // CUBLAS_SEGMENT_BYTES) * CUBLAS_SEGMENT_BYTES


def build_parts(facts: ModelFacts, *, model_format: str, batches: Batches) -> tuple[Part, ...]:
    """The parts of the footprint for ``model_format`` (see the module docstring)."""
    act = facts.activation_bytes
    n = batches.instances
    server = Part(
        name="server: CUDA context + Triton",
        scope=ONCE,
        low_bytes=SERVER_BASELINE_RANGE[0],
        point_bytes=SERVER_BASELINE_RANGE[1],
        high_bytes=SERVER_BASELINE_RANGE[2],
        source="published empty-server readings: T4 165 MiB, V100 370 MiB (aws-samples "
        "sagemaker-mme-gpu-benchmarking); others: allowance",
    )
    if model_format == "tensorrt":
        return _tensorrt_parts(facts, act[batches.engine_max], n, server)
    conv = facts.convolutions > 0
    weights = Part(
        name=f"weights x {n} instance(s)",
        scope=PER_COPY,
        low_bytes=facts.weight_bytes * n,
        point_bytes=facts.weight_bytes * n,
        high_bytes=facts.weight_bytes * n,
        source="sum of parameters and buffers x bytes per element; each instance loads its own",
    )
    low_act, high_act = act[batches.warmup], act[batches.max]
    if model_format == "onnx":
        held = (low_act, low_act, high_act * ORT_ARENA_FACTOR[2])
        how = "; ONNX Runtime arena up to 2x (kNextPowerOfTwo)"
    else:
        held = (low_act, _segments(low_act), _segments(high_act))
        how = "; held in whole 20 MiB allocator segments"
    activations = Part(
        name=f"activations at batch {batches.warmup} (warm-up) .. {batches.max} (max) x {n}",
        scope=PER_COPY,
        low_bytes=int(held[0]) * n,
        point_bytes=int(held[1]) * n,
        high_bytes=int(held[2]) * n,
        source="peak of live tensors traced on fake tensors; the caching allocator keeps the "
        "largest batch run so far, per instance stream" + how,
    )
    cudnn = CUDNN_WORKSPACE_BYTES if facts.overlapping_convolutions else (0, 0, 0)
    slack = int(ALLOCATOR_SLACK * (weights.high_bytes + activations.high_bytes))
    backend = Part(
        name=f"backend: cuBLAS workspace{' + cuDNN workspace' if cudnn[1] else ''}"
        f" + allocator rounding x {n}",
        scope=PER_COPY,
        low_bytes=(CUBLAS_WORKSPACE_BYTES + cudnn[0]) * n,
        point_bytes=(CUBLAS_SEGMENT_BYTES + cudnn[1]) * n,
        high_bytes=(CUBLAS_SEGMENT_BYTES + cudnn[2]) * n + slack,
        source="PyTorch default cuBLAS workspace 8.1 MiB in a 20 MiB allocator segment per "
        "stream; cuDNN convolution workspace calibrated on the published ResNet-50 curve; "
        "up to 10 % allocator rounding and fragmentation"
        + (
            "; ONNX Runtime's taken as PyTorch's (no published figure)"
            if model_format == "onnx"
            else ""
        ),
    )
    once = _once_from_published("pytorch_libtorch", conv)
    runtime = Part(
        name=f"runtime: {'ONNX Runtime' if model_format == 'onnx' else 'libtorch'}, cuBLAS"
        + (", cuDNN" if conv else ""),
        scope=ONCE,
        low_bytes=once[0],
        point_bytes=once[1],
        high_bytes=once[2],
        source="published first-copy minus later-copy footprints (PyTorch, T4 and V100)"
        + (
            "; ONNX Runtime: no published figure, libtorch's taken"
            if model_format == "onnx"
            else ""
        ),
    )
    return (weights, activations, backend, runtime, server)


def _tensorrt_parts(facts: ModelFacts, peak: int, instances: int, server: Part) -> tuple[Part, ...]:
    engine = Part(
        name="engine weights",
        scope=PER_COPY,
        low_bytes=min(facts.weight_bytes, facts.weight_bytes_fp32),
        point_bytes=facts.weight_bytes,
        high_bytes=facts.weight_bytes_fp32,
        source="parameters x bytes per element; reduced-precision flags allow, not force, "
        "FP16/INT8 layers (TensorRT developer guide), so up to FP32; instances share the engine",
    )
    low, point, high = TRT_CONTEXT_FACTOR
    context = Part(
        name=f"execution context at the profile's max shape x {instances}",
        scope=PER_COPY,
        low_bytes=int(peak * low) * instances,
        point_bytes=int(peak * point) * instances,
        high_bytes=(int(peak * high) + TRT_SCRATCH_BYTES[2]) * instances,
        source="live-tensor peak at the max shape x 0.5-1.5 (fusion, attention as MatMul) "
        "+ up to 64 MiB tactic scratch; ratios from the published TensorRT curves",
    )
    once = _once_from_published("tensorrt_plan", None)
    runtime = Part(
        name="runtime: TensorRT",
        scope=ONCE,
        low_bytes=once[0],
        point_bytes=once[1],
        high_bytes=once[2],
        source="published first-copy minus later-copy footprints (TensorRT, T4 and V100)",
    )
    return (engine, context, runtime, server)


__all__ = [
    "ALLOCATOR_SLACK",
    "CUBLAS_SEGMENT_BYTES",
    "CUBLAS_WORKSPACE_BYTES",
    "CUDNN_WORKSPACE_BYTES",
    "ESTIMATE_FORMATS",
    "ONCE",
    "ORT_ARENA_FACTOR",
    "PER_COPY",
    "PRECISION_BYTES",
    "SERVER_BASELINE_BYTES",
    "SERVER_BASELINE_RANGE",
    "TRT_CONTEXT_FACTOR",
    "TRT_SCRATCH_BYTES",
    "Batches",
    "ModelFacts",
    "Part",
    "build_parts",
    "sum_parts",
]
