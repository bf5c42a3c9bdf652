"""GPU footprints this project measured itself: **checks** of the estimate, never fitted on.

The H200 run of ``make gpu-proof GPU_PROOF_ARGS="--bert-base --max-copies 6"`` (2026-11-25,
one NVIDIA H200, 143,771 MiB, driver 580.159.04; ``gpu-proof.json``): TorchScript FP32
models with random weights built by the presets (ResNet-50 warms up at batch 32, the BERTs
at batch 8 x 128 tokens), 6 copies each, NVML readings; ``marginal_mib`` is the mean
marginal footprint of a copy (stdev about 1.7 MiB).

They were served by the pip tritonserver through mmelocal's Python-backend runner, where
every copy is its own process with its own CUDA context and torch kernels. SageMaker's
native PyTorch backend shares those between copies, and the estimate models that backend:
so the comparable figure is a difference, a model's copy less the tiny BERT's (about 0.3 MB
of weights: its copy is that per-process overhead). ``benchmarks/estimate_vs_published.py``
prints the comparison that ``docs/estimate.md`` records.
"""

from __future__ import annotations

from dataclasses import dataclass

GPU_PROOF_H200 = "make gpu-proof on one NVIDIA H200, 2026-11-25 (gpu-proof.json)"


@dataclass(frozen=True, kw_only=True)
class MeasuredCopy:
    """One model's measured per-copy footprint on a GPU, and how it was served."""

    model: str
    #: what ``mmelocal capacity estimate`` is given to estimate the same artifact
    spec: str
    card: str
    marginal_mib: float
    source: str


#: the tiny BERT (hidden 32, 2 layers): the per-process overhead of the Python-backend path
TINY_BERT_H200 = MeasuredCopy(
    model="tiny-bert", spec="tiny-bert", card="H200", marginal_mib=714.67, source=GPU_PROOF_H200
)
#: ResNet-50 and BERT-base on the same run
H200_CHECKS: tuple[MeasuredCopy, ...] = (
    MeasuredCopy(
        model="resnet50",
        spec="torchvision:resnet50",
        card="H200",
        marginal_mib=1276.67,
        source=GPU_PROOF_H200,
    ),
    MeasuredCopy(
        model="bert-base",
        spec="bert-base",
        card="H200",
        marginal_mib=1208.67,
        source=GPU_PROOF_H200,
    ),
)

__all__ = ["GPU_PROOF_H200", "H200_CHECKS", "TINY_BERT_H200", "MeasuredCopy"]
