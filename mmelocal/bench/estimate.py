"""The GPU footprint of one model copy and the copies per card, estimated from the model.

No GPU and no AWS: the weights come from the parameters, the activations from a trace on
fake tensors (:mod:`mmelocal.bench.activations`), and what the backend and the process add
from the constants below, each with where it comes from. Every part is a range
(``low``/``point``/``high``); the count per card follows the projection formula with the
"once per process" parts as the baseline::

    count = floor((threshold x card - once per process) / per copy)

``high`` copies come from the ``low`` footprint and the other way round. Counts were checked
against the published runs in :mod:`mmelocal.bench.published` (``tests/bench/
test_bench_estimate_published.py``; table in ``docs/estimate.md``). A measurement, when one
exists, wins: :meth:`Estimate.with_measurement` keeps it beside the estimate.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from mmelocal.bench.projection import GpuSpec, project_count, validate_threshold
from mmelocal.bench.published import PUBLISHED
from mmelocal.errors import UserInputError

MIB = 1024 * 1024

PRECISION_BYTES = {"fp32": 4, "fp16": 2, "int8": 1}
ESTIMATE_FORMATS = ("torchscript", "onnx", "tensorrt")
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
CUBLAS_SEGMENT_BYTES = 20 * MIB

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
CUDNN_WORKSPACE_BYTES = (0, 128 * MIB, 256 * MIB)


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
        int(min(values) * MIB),
        int(statistics.fmean(values) * MIB),
        int(max(values) * MIB),
    )


#: CUDA context + Triton with nothing loaded (its CUDA memory pool, 64 MiB by default:
#: Triton docs ``--cuda-memory-pool-byte-size``), as published: 165 MiB on a T4, 370 MiB on
#: a V100 (sagemaker-tritonserver:22.10). Other cards: no published figure; the point is
#: the larger reading and the high end an allowance for bigger contexts on newer cards.
SERVER_BASELINE_BYTES = {"T4": 165 * MIB, "V100": 370 * MIB}
SERVER_BASELINE_RANGE = (165 * MIB, 370 * MIB, 512 * MIB)

#: TensorRT context memory relative to the eager live-tensor peak at the profile's max
#: shape: fusion (conv+BN+ReLU, GELU) shrinks it, attention that the ONNX export spells as
#: MatMul+Softmax grows it (TensorRT developer guide: activations share one device-memory
#: block sized for the max profile; builder flags *allow* FP16, layers may stay FP32).
#: Published ratios: ResNet-50 0.76, ViT-L 1.24, BERT-base 1.5 (fp16 weights).
TRT_CONTEXT_FACTOR = (0.5, 0.75, 1.5)
#: Tactic scratch memory inside the context (TensorRT workspace memory pool): allowance.
TRT_SCRATCH_BYTES = (0, 0, 64 * MIB)

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


@dataclass(frozen=True, kw_only=True)
class CardCount:
    """Copies per card (low, point, high) and the instance types carrying the card."""

    gpu: str
    memory_bytes: int
    instance_types: tuple[str, ...]
    low: int
    point: int
    high: int
    measured: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {**vars(self), "instance_types": list(self.instance_types)}


@dataclass(frozen=True, kw_only=True)
class Measured:
    """A capacity measurement of the same model (per copy, baseline), with its origin."""

    per_copy_bytes: int
    baseline_bytes: int
    count: int
    total_bytes: int
    probe: str
    origin: str

    @property
    def on_gpu(self) -> bool:
        """True for GPU device memory (host-memory readings do not project to a GPU)."""
        return not self.probe.startswith("host")


def sum_parts(parts: Sequence[Part], scope: str) -> tuple[int, int, int]:
    """(low, point, high) summed over the parts of ``scope``."""
    chosen = [p for p in parts if p.scope == scope]
    return (
        sum(p.low_bytes for p in chosen),
        sum(p.point_bytes for p in chosen),
        sum(p.high_bytes for p in chosen),
    )


def card_count(
    parts: Sequence[Part], *, memory_bytes: int, threshold: float, gpu: str = ""
) -> tuple[int, int, int]:
    """Copies on a card of ``memory_bytes``: (low, point, high).

    The server baseline of a card with a published figure replaces the generic range.
    """
    per = sum_parts(parts, PER_COPY)
    once = list(sum_parts(parts, ONCE))
    server = next((p for p in parts if p.name.startswith("server")), None)
    if gpu in SERVER_BASELINE_BYTES and server is not None:
        generic = (server.low_bytes, server.point_bytes, server.high_bytes)
        once = [v - g + SERVER_BASELINE_BYTES[gpu] for v, g in zip(once, generic, strict=True)]
    return (
        project_count(
            total_bytes=memory_bytes,
            baseline_bytes=once[2],
            per_model_bytes=per[2],
            threshold=threshold,
        ),
        project_count(
            total_bytes=memory_bytes,
            baseline_bytes=once[1],
            per_model_bytes=per[1],
            threshold=threshold,
        ),
        project_count(
            total_bytes=memory_bytes,
            baseline_bytes=once[0],
            per_model_bytes=per[0],
            threshold=threshold,
        ),
    )


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """An estimate; JSON-able with ``kind = "estimate"``."""

    kind: ClassVar[str] = "estimate"
    source: str
    model_format: str
    precision: str
    params: int
    batches: Batches
    activation_bytes: Mapping[int, int]
    parts: tuple[Part, ...]
    threshold: float
    cards: tuple[CardCount, ...] = ()
    notes: tuple[str, ...] = ()
    measured: Measured | None = None
    elapsed_s: float = 0.0

    @property
    def per_copy(self) -> tuple[int, int, int]:
        """(low, point, high) bytes of one copy."""
        return sum_parts(self.parts, PER_COPY)

    @property
    def once(self) -> tuple[int, int, int]:
        """(low, point, high) bytes paid once per process."""
        return sum_parts(self.parts, ONCE)

    def with_cards(self, gpus: Sequence[GpuSpec], instance_types: Sequence[str] = ()) -> Estimate:
        """The counts on ``gpus`` (only the cards of ``instance_types`` when given)."""
        wanted = set(instance_types)
        known = {t for g in gpus for t in g.instances}
        unknown = sorted(wanted - known)
        if unknown:
            raise UserInputError(
                f"unknown instance type(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
                " (add a card with --gpus FILE)"
            )
        cards = []
        for gpu in gpus:
            types = tuple(t for t in gpu.instances if not wanted or t in wanted)
            if wanted and not types:
                continue
            low, point, high = card_count(
                self.parts, memory_bytes=gpu.memory_bytes, threshold=self.threshold, gpu=gpu.name
            )
            cards.append(
                CardCount(
                    gpu=gpu.name,
                    memory_bytes=gpu.memory_bytes,
                    instance_types=types,
                    low=low,
                    point=point,
                    high=high,
                    measured=self._measured_count(gpu.memory_bytes),
                )
            )
        return replace(self, cards=tuple(cards))

    def with_measurement(self, measured: Measured) -> Estimate:
        """This estimate with a measurement beside it (the counts gain a measured column)."""
        updated = replace(self, measured=measured)
        return replace(
            updated,
            cards=tuple(
                replace(c, measured=updated._measured_count(c.memory_bytes)) for c in self.cards
            ),
        )

    def _measured_count(self, memory_bytes: int) -> int | None:
        m = self.measured
        if m is None or not m.on_gpu or m.per_copy_bytes <= 0:
            return None
        return project_count(
            total_bytes=memory_bytes,
            baseline_bytes=m.baseline_bytes,
            per_model_bytes=m.per_copy_bytes,
            threshold=self.threshold,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``kind`` tells ``mmelocal report`` what this is)."""
        low, point, high = self.per_copy
        return {
            "kind": self.kind,
            "source": self.source,
            "model_format": self.model_format,
            "precision": self.precision,
            "params": self.params,
            "batches": dict(vars(self.batches)),
            "activation_bytes": {str(k): v for k, v in self.activation_bytes.items()},
            "parts": [p.to_dict() for p in self.parts],
            "per_copy_bytes": {"low": low, "point": point, "high": high},
            "threshold": self.threshold,
            "cards": [c.to_dict() for c in self.cards],
            "notes": list(self.notes),
            "measured": dict(vars(self.measured)) if self.measured else None,
            "elapsed_s": self.elapsed_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        """Inverse of :meth:`to_dict`."""
        return cls(
            source=str(data["source"]),
            model_format=str(data["model_format"]),
            precision=str(data["precision"]),
            params=int(data["params"]),
            batches=Batches(**data["batches"]),
            activation_bytes={int(k): int(v) for k, v in data["activation_bytes"].items()},
            parts=tuple(Part(**p) for p in data["parts"]),
            threshold=float(data["threshold"]),
            cards=tuple(
                CardCount(**{**c, "instance_types": tuple(c["instance_types"])})
                for c in data.get("cards", [])
            ),
            notes=tuple(data.get("notes", [])),
            measured=Measured(**data["measured"]) if data.get("measured") else None,
            elapsed_s=float(data.get("elapsed_s", 0.0)),
        )


def check_precision(model_format: str, precision: str) -> int:
    """Bytes per weight for ``precision``; UserInputError for an unknown or impossible pair."""
    if model_format not in ESTIMATE_FORMATS:
        raise UserInputError(
            f"format must be one of {', '.join(ESTIMATE_FORMATS)}, got {model_format!r}"
        )
    if precision not in PRECISION_BYTES:
        raise UserInputError(
            f"precision must be one of {', '.join(PRECISION_BYTES)}, got {precision!r}"
        )
    if precision == "int8" and model_format != "tensorrt":
        raise UserInputError(
            f"int8 applies to TensorRT engines, not to {model_format}: use --format tensorrt "
            "or --precision fp16"
        )
    return PRECISION_BYTES[precision]


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
        "up to 10 % allocator rounding and fragmentation",
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


def estimate_from_facts(
    facts: ModelFacts,
    *,
    source: str,
    model_format: str,
    precision: str,
    batches: Batches,
    threshold: float = 0.9,
) -> Estimate:
    """The :class:`Estimate` of a traced model (no cards yet: see :meth:`Estimate.with_cards`)."""
    validate_threshold(threshold)
    check_precision(model_format, precision)
    missing = [b for b in batches.distinct() if b not in facts.activation_bytes]
    if missing:
        raise UserInputError(f"no activation trace for batch(es) {missing}")
    return Estimate(
        source=source,
        model_format=model_format,
        precision=precision,
        params=facts.params,
        batches=batches,
        activation_bytes=dict(facts.activation_bytes),
        parts=build_parts(facts, model_format=model_format, batches=batches),
        threshold=threshold,
        notes=facts.notes,
    )


__all__ = [
    "ALLOCATOR_SLACK",
    "CUBLAS_SEGMENT_BYTES",
    "CUBLAS_WORKSPACE_BYTES",
    "CUDNN_WORKSPACE_BYTES",
    "ESTIMATE_FORMATS",
    "ONCE",
    "PER_COPY",
    "PRECISION_BYTES",
    "SERVER_BASELINE_BYTES",
    "SERVER_BASELINE_RANGE",
    "TRT_CONTEXT_FACTOR",
    "TRT_SCRATCH_BYTES",
    "Batches",
    "CardCount",
    "Estimate",
    "Measured",
    "ModelFacts",
    "Part",
    "build_parts",
    "card_count",
    "check_precision",
    "estimate_from_facts",
    "sum_parts",
]
