"""The estimate beside every published count: the check ``docs/estimate.md`` reports.

:func:`compare_published` rebuilds each published model with random weights on the
``meta`` device (no memory is used), traces it the way the published run used it (PyTorch:
one request of batch 1, no warm-up; TensorRT: the optimisation profile's max batch, FP16
flag) and computes the count on the card total the run reported. torchvision, timm and
transformers are imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from mmelocal.bench.estimate.core import (
    SHIPPED,
    Batches,
    Calibration,
    Estimate,
    ModelFacts,
    card_count,
    estimate_from_facts,
    sum_parts,
)
from mmelocal.bench.estimate.published import PUBLISHED, PublishedCount
from mmelocal.builder.backends import PLATFORM_FORMATS
from mmelocal.facts.sagemaker import MEMORY_THRESHOLD
from mmelocal.units import MiB


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """One published run and the estimate of the same model on the same card."""

    published: PublishedCount
    estimate: Estimate
    count_low: int
    count_point: int
    count_high: int

    @property
    def per_copy_mib(self) -> tuple[float, float, float]:
        """The estimate's per-copy (low, point, high) in MiB."""
        low, point, high = sum_parts(self.estimate.parts, "per copy")
        return (low / MiB, point / MiB, high / MiB)

    @property
    def count_error(self) -> float:
        """(point - published) / published."""
        return (self.count_point - self.published.count) / self.published.count

    @property
    def in_range(self) -> bool:
        """True when the published count lies in the estimate's range."""
        return self.count_low <= self.published.count <= self.count_high


def build_on_meta(model: str) -> tuple[Any, dict[str, Any]]:
    """A published model with random weights on the meta device, and batch-1 inputs."""
    import torch

    with torch.device("meta"):
        if model == "resnet50":
            import torchvision

            return torchvision.models.resnet50(weights=None), _image()
        if model == "vit_large_patch16_224":
            import timm

            return timm.create_model(model, pretrained=False), _image()
        from transformers import BertConfig, BertModel, RobertaConfig, RobertaModel

        if model == "bert-base-uncased":
            return BertModel(BertConfig()), _tokens()
        if model == "roberta-large":
            large = RobertaConfig(
                vocab_size=50265,
                hidden_size=1024,
                num_hidden_layers=24,
                num_attention_heads=16,
                intermediate_size=4096,
                max_position_embeddings=514,
                type_vocab_size=1,
                pad_token_id=1,
            )
            return RobertaModel(large), _tokens()
    raise ValueError(f"no builder for the published model {model!r}")


def _image() -> dict[str, Any]:
    import torch

    return {"input": torch.empty(1, 3, 224, 224, device="meta")}


def _tokens() -> dict[str, Any]:
    import torch

    ids = torch.empty(1, 128, dtype=torch.long, device="meta")
    return {"input_ids": ids, "attention_mask": torch.empty_like(ids)}


def published_batches(row: PublishedCount) -> Batches:
    """The batches of the published run (its first request, its engine's max shape)."""
    if row.platform == "tensorrt_plan":
        return Batches(warmup=1, preferred=1, max=1, profile_max=row.max_shape_batch)
    return Batches(warmup=1, preferred=1, max=1)


@cache
def _facts(model: str, precision: str, profile_max: int) -> ModelFacts:
    from mmelocal.bench.estimate.model import trace_module

    module, inputs = build_on_meta(model)
    batches = Batches(warmup=1, preferred=1, max=1, profile_max=profile_max)
    return trace_module(module.eval(), inputs, batches, precision=precision)


def published_facts(row: PublishedCount) -> ModelFacts:
    """The traced facts of ``row``'s model, the way its published run used it (cached)."""
    return _facts(row.model, row.precision, published_batches(row).engine_max)


def compare(
    row: PublishedCount, *, threshold: float = MEMORY_THRESHOLD, calibration: Calibration = SHIPPED
) -> Comparison:
    """The estimate of ``row``'s model on ``row``'s card (with ``calibration``'s constants)."""
    fmt = PLATFORM_FORMATS.get(row.platform, "torchscript")
    batches = published_batches(row)
    estimate = estimate_from_facts(
        published_facts(row),
        source=row.spec,
        model_format=fmt,
        precision=row.precision,
        batches=batches,
        threshold=threshold,
        calibration=calibration,
    )
    low, point, high = card_count(
        estimate.parts, memory_bytes=int(row.total_mib * MiB), threshold=threshold, gpu=row.gpu
    )
    return Comparison(
        published=row, estimate=estimate, count_low=low, count_point=point, count_high=high
    )


def compare_published(rows: Sequence[PublishedCount] = PUBLISHED) -> list[Comparison]:
    """:func:`compare` for every published row."""
    return [compare(row) for row in rows]


__all__ = [
    "Comparison",
    "build_on_meta",
    "compare",
    "compare_published",
    "published_batches",
    "published_facts",
]
