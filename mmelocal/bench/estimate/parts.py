"""The parts of a model copy's GPU footprint: the constants, each with its source, and the
arithmetic that turns a traced model into parts (pure functions over plain data).

Used by :mod:`mmelocal.bench.estimate`, which turns parts into counts per card. Every
constant below names where it comes from: vendor documentation, the published MME runs in
:mod:`mmelocal.bench.estimate.published`, or "allowance"/"calibrated" where no figure exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmelocal.bench.estimate.allocator import reserved_bytes
from mmelocal.builder.backends import EXPORT_FORMATS
from mmelocal.errors import UserInputError
from mmelocal.facts.cards import published_readings
from mmelocal.units import MiB

PRECISION_BYTES = {"fp32": 4, "fp16": 2, "int8": 1}
ESTIMATE_FORMATS = EXPORT_FORMATS
PER_COPY = "per copy"
ONCE = "once per process"

# ---- constants, each with its source -----------------------------------------------------

#: PyTorch's default cuBLAS workspace per (handle, stream), CUBLAS_WORKSPACE_CONFIG
#: ":4096:2:16:8" = 2 x 4096 KiB + 8 x 16 KiB (PyTorch docs, "Reproducibility" and
#: aten/src/ATen/cuda/CublasHandlePool.cpp). It is allocated through the caching allocator
#: (a 1-10 MiB request: a 20 MiB segment unless a free block holds it; see
#: :mod:`mmelocal.bench.estimate.allocator`). Triton's PyTorch backend gives every instance its own
#: CUDA stream (pytorch_backend src/libtorch.cc, ``SetCurrentCudaStream(stream_, ...)``) and
#: the caching allocator keeps blocks per stream: workspace and activations are per instance.
CUBLAS_WORKSPACE_BYTES = 2 * 4096 * 1024 + 8 * 16 * 1024
CUBLAS_SEGMENT_BYTES = 20 * MiB

#: The prior for the cuDNN convolution workspace where no published model gives it (the
#: leave-one-model-out check of ResNet-50, the only published model with overlapping
#: convolutions). PyTorch allocates the workspace of the algorithm cuDNN's heuristics pick
#: for each convolution through the caching allocator and frees it after the call
#: (aten/src/ATen/native/cudnn/Conv_v7.cpp, ``Workspace``: ``CUDACachingAllocator::
#: raw_alloc``), with no upper limit (pytorch/pytorch#49207: the first algorithm whose
#: workspace can be allocated is taken); cuDNN documents the size only per algorithm and
#: shape (``cudnnGetConvolutionForwardWorkspaceSize``). What is known without a GPU is that a
#: freed workspace stays cached in at least one large-pool segment: 20 MiB (``kLargeBuffer``).
CUDNN_WORKSPACE_PRIOR_BYTES = 20 * MiB

#: The prior of a TensorRT context / eager-peak ratio where an operator family has no
#: published engine: 1.0. TensorRT plans one device-memory block for the activations of the
#: max profile shape and reuses it across layers whose tensors are dead (TensorRT developer
#: guide, "Memory: activation memory"; ``IExecutionContext::getDeviceMemorySize``), as the
#: eager caching allocator reuses freed blocks: the same live-tensor peak, no fusion credit.
TRT_CONTEXT_PRIOR = 1.0

#: ONNX Runtime's CUDA arena grows by powers of two (ORT CUDA EP docs,
#: ``arena_extend_strategy`` kNextPowerOfTwo): up to twice the activations. No published
#: MME figure for ONNX Runtime; its runtime loaded once is taken as libtorch's.
ORT_ARENA_FACTOR = (1.0, 1.0, 2.0)

#: CUDA context + Triton with nothing loaded (its CUDA memory pool, 64 MiB by default:
#: Triton docs ``--cuda-memory-pool-byte-size``), per card, as published
#: (sagemaker-tritonserver:22.10; ``baseline_mib`` of ``gpus.yaml``'s published readings).
SERVER_BASELINE_BYTES = {r.gpu: round(r.baseline_mib * MiB) for r in published_readings()}
#: the high end for a card with no published figure: an allowance for the bigger contexts
#: of newer cards
SERVER_BASELINE_ALLOWANCE_BYTES = 512 * MiB
#: a card with no published figure: the smallest and the largest reading, then the allowance
SERVER_BASELINE_RANGE = (
    min(SERVER_BASELINE_BYTES.values()),
    max(SERVER_BASELINE_BYTES.values()),
    SERVER_BASELINE_ALLOWANCE_BYTES,
)

Triple = tuple[int, int, int]


def _server_readings() -> str:
    """The published empty-server readings as the parts table says them ("T4 165 MiB, ...")."""
    return ", ".join(f"{gpu} {size / MiB:g} MiB" for gpu, size in SERVER_BASELINE_BYTES.items())


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The constants fitted on published rows (:mod:`mmelocal.bench.estimate.holdout` fits them).

    Bytes are (low, point, high); factors are (low, point, high) ratios. ``fitted_on`` names
    the published rows (``model/platform/GPU``) each constant was fitted on; a constant
    fitted on no row is its prior (``cudnn_workspace`` None: the prior above).
    """

    #: per copy, what a PyTorch copy holds beyond its simulated allocator blocks (weights,
    #: cuBLAS workspace, activations): min / mean / max over the rows without overlapping
    #: convolutions
    remainder: Triple
    #: per copy, the cuDNN workspace of a model with overlapping convolutions: what those
    #: rows hold beyond their blocks and the remainder (None: no row, use the prior)
    cudnn_workspace: Triple | None
    #: once per process: libtorch + cuBLAS (+ cuDNN with a convolution), TensorRT
    runtime_plain: Triple
    runtime_conv: Triple
    runtime_tensorrt: Triple
    #: TensorRT context / eager live-tensor peak at the profile's max shape: the point is
    #: the median of the models of the same operator family (overlapping convolutions:
    #: ``trt_context_conv``; others), the range spans every TensorRT row
    trt_context: tuple[float, float, float]
    trt_context_conv: tuple[float, float, float]
    #: relative half-width of the PyTorch / ONNX per-copy range (the largest held-out
    #: per-copy error, at least :data:`MIN_MARGIN`)
    margin: float
    fitted_on: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


#: The least relative half-width of a PyTorch / ONNX range: an allowance for a model unlike
#: the four published ones (other operators, other allocation orders).
MIN_MARGIN = 0.10

#: Fitted on every published row by :func:`mmelocal.bench.estimate.holdout.fit_calibration`
#: (``tests/bench/test_bench_estimate_holdout.py`` refits them and checks these values; the
#: rows each is fitted on are in ``fitted_on`` and in ``docs/estimate.md``).
_PT = ("resnet50/PyTorch/T4", "bert-base-uncased/PyTorch/T4", "vit_large_patch16_224/PyTorch/T4")
_PT_V100 = ("vit_large_patch16_224/PyTorch/V100", "roberta-large/PyTorch/V100")
_TRT = (
    "resnet50/TensorRT/T4",
    "bert-base-uncased/TensorRT/T4",
    "vit_large_patch16_224/TensorRT/V100",
    "roberta-large/TensorRT/V100",
)
SHIPPED = Calibration(
    remainder=(0, 14_208_767, 21_640_744),
    cudnn_workspace=(123_371_272, 123_371_272, 123_371_272),
    runtime_plain=(557_315_148, 564_360_003, 571_404_858),
    runtime_conv=(809_284_432, 812_097_947, 813_801_760),
    runtime_tensorrt=(301_797_715, 328_553_999, 385_561_574),
    trt_context=(0.76, 1.48, 1.52),
    trt_context_conv=(0.76, 0.76, 1.52),
    margin=0.10,
    fitted_on={
        "remainder": (*_PT[1:], *_PT_V100),
        "cudnn_workspace": _PT[:1],
        "runtime_plain": (_PT[1], _PT_V100[1]),
        "runtime_conv": (_PT[0], _PT[2], _PT_V100[0]),
        "runtime_tensorrt": _TRT,
        "trt_context": _TRT[1:],
        "trt_context_conv": _TRT[:1],
        "trt_context_range": _TRT,
        "margin": tuple(sorted((*_PT, *_PT_V100))),
    },
)


@dataclass(frozen=True, kw_only=True)
class Batches:
    """The batches Triton will run on a copy.

    ``warmup`` is the largest ``model_warmup`` batch (0: no warm-up); ``request`` the batch
    the user says the served requests carry (``--request-batch``, default 1: the published
    procedure loads and probes each copy with one batch-1 request); ``preferred`` and
    ``max`` come from ``config.pbtxt``. ``profile_max`` is the TensorRT optimisation
    profile's max batch (its context memory is sized for it); ``instances`` is
    ``instance_group`` count.
    """

    warmup: int
    preferred: int
    max: int
    instances: int = 1
    profile_max: int | None = None
    request: int = 1

    def __post_init__(self) -> None:
        for name in ("preferred", "max", "instances", "request"):
            if getattr(self, name) < 1:
                raise UserInputError(f"{name} batch must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise UserInputError(f"warm-up batch must be >= 0 (0: none), got {self.warmup}")

    @property
    def engine_max(self) -> int:
        """The batch a TensorRT engine is sized for."""
        return self.profile_max or self.max

    @property
    def activation(self) -> int:
        """The batch that sets the activation term: the largest run on the copy so far
        (PyTorch's caching allocator keeps it): load (1), warm-up, served requests."""
        return max(1, self.warmup, self.request)

    @property
    def activation_driver(self) -> str:
        """Which of load / warm-up / request set :attr:`activation`."""
        if self.request >= max(self.warmup, 1) and self.request > 1:
            return f"the served requests (batch {self.request})"
        if self.warmup > 1:
            return f"the warm-up (batch {self.warmup})"
        return "the batch-1 requests that load and serve each copy"

    def describe(self) -> str:
        """One line: the batch assumed for load, warm-up and serving."""
        warm = f"batch {self.warmup}" if self.warmup else "none"
        return (
            f"load: batch 1; warm-up: {warm}; served requests: batch {self.request} "
            f"(--request-batch; dynamic batching may merge them up to {self.max}); "
            f"activations sized by {self.activation_driver}"
        )

    def distinct(self) -> list[int]:
        """Every batch to trace, ascending."""
        return sorted({self.activation, self.preferred, self.max, self.engine_max})


@dataclass(frozen=True, kw_only=True)
class Part:
    """One row of the estimate: what it is, its scope, its range, where it comes from."""

    name: str
    scope: str
    low_bytes: int
    point_bytes: int
    high_bytes: int
    source: str

    @classmethod
    def of(cls, span: Sequence[int], *, name: str, scope: str, source: str) -> Part:
        """The part of ``span``: its (low, point, high) bytes."""
        low, point, high = span
        return cls(
            name=name,
            scope=scope,
            low_bytes=low,
            point_bytes=point,
            high_bytes=high,
            source=source,
        )

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
    """What the estimate needs from a traced model (see :mod:`mmelocal.bench.estimate.activations`).

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
    #: the size of every weight tensor at the precision, in load order (empty: unknown)
    weight_blocks: tuple[int, ...] = ()
    #: per traced batch, the sizes of the tensors live at the activation peak
    activation_blocks: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def simulated_blocks(facts: ModelFacts, batch: int) -> tuple[int, int]:
    """(weights, weights + cuBLAS workspace + activations at ``batch``) as PyTorch's caching
    allocator reserves them, loaded in that order (:mod:`mmelocal.bench.estimate.allocator`).

    Without block sizes (facts made by hand), every tensor is taken as one block."""
    weights = facts.weight_blocks or (facts.weight_bytes,)
    acts = facts.activation_blocks.get(batch) or (facts.activation_bytes[batch],)
    loaded = reserved_bytes(weights)
    return loaded, reserved_bytes((*weights, CUBLAS_WORKSPACE_BYTES, *acts))


def build_parts(
    facts: ModelFacts,
    *,
    model_format: str,
    batches: Batches,
    calibration: Calibration = SHIPPED,
) -> tuple[Part, ...]:
    """The parts of the footprint for ``model_format`` (see the module docstring)."""
    cal = calibration
    n = batches.instances
    server = Part.of(
        SERVER_BASELINE_RANGE,
        name="server: CUDA context + Triton",
        scope=ONCE,
        source=f"published empty-server readings: {_server_readings()} (aws-samples "
        "sagemaker-mme-gpu-benchmarking); others: allowance",
    )
    if model_format == "tensorrt":
        ratios = cal.trt_context_conv if facts.overlapping_convolutions else cal.trt_context
        peak = facts.activation_bytes[batches.engine_max]
        return _tensorrt_parts(facts, peak, n, server, ratios, cal.runtime_tensorrt)
    conv = facts.convolutions > 0
    batch = batches.activation
    loaded, with_acts = simulated_blocks(facts, batch)
    weights = Part.of(
        (loaded * n,) * 3,
        name=f"weights x {n} instance(s), in allocator segments",
        scope=PER_COPY,
        source=f"{facts.weight_bytes / MiB:,.1f} MiB of parameters and buffers, each tensor a "
        "block of PyTorch's caching allocator (512 B rounding; 2 MiB, 20 MiB or 2 MiB-rounded "
        "segments: c10/cuda/CUDACachingAllocator.cpp); each instance loads its own",
    )
    act = facts.activation_bytes[batch]
    if model_format == "onnx":
        extra = int(act * (ORT_ARENA_FACTOR[2] - 1))
        how = "; ONNX Runtime's arena may double them (kNextPowerOfTwo): high end"
    else:
        extra = 0
        how = ""
    activations = Part(
        name=f"cuBLAS workspace + activations at batch {batch} x {n}",
        scope=PER_COPY,
        low_bytes=(with_acts - loaded) * n,
        point_bytes=(with_acts - loaded) * n,
        high_bytes=(with_acts - loaded + extra) * n,
        source=f"8.1 MiB cuBLAS workspace (PyTorch default) and the {act / MiB:,.1f} MiB of "
        f"tensors live at the traced peak, set by {batches.activation_driver}, placed in the "
        "weights' free blocks or new segments; kept per instance stream" + how,
    )
    parts = [weights, activations]
    rem = cal.remainder
    parts.append(
        _per_instance(
            f"remainder x {n}",
            rem,
            n,
            "calibrated: what published PyTorch copies hold beyond their simulated "
            "blocks (fragmentation from freed temporaries); rows in docs/estimate.md",
        )
    )
    if facts.overlapping_convolutions:
        cudnn = cal.cudnn_workspace
        prior = cudnn is None
        if cudnn is None:
            cudnn = (CUDNN_WORKSPACE_PRIOR_BYTES,) * 3
        parts.append(
            _per_instance(
                f"cuDNN convolution workspace x {n}",
                cudnn,
                n,
                "prior: one 20 MiB allocator segment (Conv_v7.cpp allocates the "
                "workspace through the caching allocator; no published model to fit)"
                if prior
                else "calibrated on the published ResNet-50 curve (the only published "
                "model with overlapping convolutions): its copy less its simulated "
                "blocks and the remainder",
            )
        )
    point = sum(p.point_bytes for p in parts)
    margin = int(point * cal.margin)
    parts.append(
        Part(
            name=f"range: +/- {cal.margin:.0%}",
            scope=PER_COPY,
            low_bytes=-margin,
            point_bytes=0,
            high_bytes=margin,
            source="the largest leave-one-model-out per-copy error of the published rows "
            f"(at least {MIN_MARGIN:.0%}); docs/estimate.md",
        )
    )
    once = cal.runtime_conv if conv else cal.runtime_plain
    runtime = Part.of(
        once,
        name=f"runtime: {'ONNX Runtime' if model_format == 'onnx' else 'libtorch'}, cuBLAS"
        + (", cuDNN" if conv else ""),
        scope=ONCE,
        source="published first-copy minus later-copy footprints (PyTorch, T4 and V100)"
        + (
            "; ONNX Runtime: no published figure, libtorch's taken"
            if model_format == "onnx"
            else ""
        ),
    )
    return (*parts, runtime, server)


def _per_instance(name: str, span: Sequence[int], n: int, source: str) -> Part:
    """A per-copy part of ``span`` (low, point, high) bytes in each of ``n`` instances."""
    return Part.of([bytes_ * n for bytes_ in span], name=name, scope=PER_COPY, source=source)


def _tensorrt_parts(
    facts: ModelFacts,
    peak: int,
    instances: int,
    server: Part,
    ratios: tuple[float, float, float],
    once: Triple,
) -> tuple[Part, ...]:
    engine = Part(
        name="engine weights",
        scope=PER_COPY,
        low_bytes=min(facts.weight_bytes, facts.weight_bytes_fp32),
        point_bytes=facts.weight_bytes,
        high_bytes=facts.weight_bytes_fp32,
        source="parameters at the precision .. at FP32: reduced-precision flags allow, not "
        "force, FP16/INT8 layers (TensorRT developer guide; the published RoBERTa-large "
        "engine is FP32-sized); instances share the engine",
    )
    low, point, high = ratios
    context = Part.of(
        [int(peak * ratio) * instances for ratio in ratios],
        name=f"execution context at the profile's max shape x {instances}",
        scope=PER_COPY,
        source=f"live-tensor peak at the max shape x {low:.2f} / {point:.2f} / {high:.2f} "
        "(the published engines' context / peak ratios, tactic scratch included). The range "
        "is wider than PyTorch's because the context depends on the fusions TensorRT finds "
        "and the engine may keep FP32 layers: measure TensorRT models",
    )
    runtime = Part.of(
        once,
        name="runtime: TensorRT",
        scope=ONCE,
        source="published first-copy minus later-copy footprints (TensorRT, T4 and V100)",
    )
    return (engine, context, runtime, server)


__all__ = [
    "CUBLAS_SEGMENT_BYTES",
    "CUBLAS_WORKSPACE_BYTES",
    "CUDNN_WORKSPACE_PRIOR_BYTES",
    "ESTIMATE_FORMATS",
    "MIN_MARGIN",
    "ONCE",
    "ORT_ARENA_FACTOR",
    "PER_COPY",
    "PRECISION_BYTES",
    "SERVER_BASELINE_BYTES",
    "SERVER_BASELINE_RANGE",
    "SHIPPED",
    "TRT_CONTEXT_PRIOR",
    "Batches",
    "Calibration",
    "ModelFacts",
    "Part",
    "build_parts",
    "simulated_blocks",
    "sum_parts",
]
