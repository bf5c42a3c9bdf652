"""The estimate checked on models it was not fitted to: leave one model out.

:func:`fit_calibration` fits every calibrated constant of the estimate
(:class:`~mmelocal.bench.estimate.parts.Calibration`) on a set of published rows
(:data:`mmelocal.bench.estimate.published.PUBLISHED`). :func:`held_out` holds out one model at a
time (all of its rows: every card, every format), refits every constant on the other
models' rows only, and estimates the held-out rows with those constants: the error of each
row is an error on a model the estimate has not seen. Where a constant has no row left to
fit (only ResNet-50 has overlapping convolutions: the cuDNN workspace and the TensorRT
context ratio with them), the estimate uses its prior
(:data:`~mmelocal.bench.estimate.parts.CUDNN_WORKSPACE_PRIOR_BYTES`,
:data:`~mmelocal.bench.estimate.parts.TRT_CONTEXT_PRIOR`) and the row says so.

The range half-width of PyTorch / ONNX (``margin``) is itself fitted: the largest per-copy
error of the rows held out from the rows given (nested: a held-out model's margin comes from
the other models only), at least :data:`~mmelocal.bench.estimate.parts.MIN_MARGIN`. Rows
whose term fell back to a prior are reported but set no margin.

The published models are rebuilt on the ``meta`` device and traced (a few seconds each;
:mod:`mmelocal.bench.estimate.calibration`); the fits themselves are arithmetic.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from mmelocal.bench.estimate.calibration import Comparison, compare, published_facts
from mmelocal.bench.estimate.parts import (
    MIN_MARGIN,
    TRT_CONTEXT_PRIOR,
    Calibration,
    ModelFacts,
    simulated_blocks,
)
from mmelocal.bench.estimate.published import PUBLISHED, PublishedCount
from mmelocal.units import MiB

FactsOf = Callable[[PublishedCount], ModelFacts]


def row_id(row: PublishedCount) -> str:
    """``model/PyTorch/T4``: how the docs and ``fitted_on`` name a published row."""
    fmt = "PyTorch" if row.platform == "pytorch_libtorch" else "TensorRT"
    return f"{row.model}/{fmt}/{row.gpu}"


def _triple(values: Sequence[float]) -> tuple[int, int, int]:
    return (int(min(values)), int(statistics.fmean(values)), int(max(values)))


def _pytorch(rows: Sequence[PublishedCount]) -> list[PublishedCount]:
    return [r for r in rows if r.platform == "pytorch_libtorch"]


def _tensorrt(rows: Sequence[PublishedCount]) -> list[PublishedCount]:
    return [r for r in rows if r.platform == "tensorrt_plan"]


def fit_calibration(
    rows: Sequence[PublishedCount] = PUBLISHED,
    facts: FactsOf = published_facts,
    *,
    nested: bool = True,
) -> Calibration:
    """Every calibrated constant fitted on ``rows`` only (see the module docstring).

    ``nested`` fits the range margin by holding out each model of ``rows`` in turn;
    without it the margin is :data:`MIN_MARGIN` (the inner fits of the nesting)."""
    pytorch = _pytorch(rows)
    trt = _tensorrt(rows)
    if not pytorch or not trt:
        raise ValueError("fitting needs PyTorch and TensorRT rows")
    excess = {row_id(r): r.per_copy_mib * MiB - simulated_blocks(facts(r), 1)[1] for r in pytorch}
    plain = [r for r in pytorch if not facts(r).overlapping_convolutions]
    convs = [r for r in pytorch if facts(r).overlapping_convolutions]
    remainder = _triple([max(0.0, excess[row_id(r)]) for r in plain])
    cudnn = _triple([excess[row_id(r)] - remainder[1] for r in convs]) if convs else None
    with_conv = [r for r in pytorch if facts(r).convolutions]
    no_conv = [r for r in pytorch if not facts(r).convolutions]
    ratios = {row_id(r): _context_ratio(r, facts(r)) for r in trt}
    trt_conv = [r for r in trt if facts(r).overlapping_convolutions]
    trt_dense = [r for r in trt if not facts(r).overlapping_convolutions]
    if not with_conv or not no_conv:  # a nested fold without one group: the other's figures
        with_conv = with_conv or no_conv
        no_conv = no_conv or with_conv
    fitted_on = {
        "remainder": tuple(row_id(r) for r in plain),
        "cudnn_workspace": tuple(row_id(r) for r in convs),
        "runtime_plain": tuple(row_id(r) for r in no_conv),
        "runtime_conv": tuple(row_id(r) for r in with_conv),
        "runtime_tensorrt": tuple(row_id(r) for r in trt),
        "trt_context": tuple(row_id(r) for r in trt_dense),
        "trt_context_conv": tuple(row_id(r) for r in trt_conv),
        "trt_context_range": tuple(row_id(r) for r in trt),
    }
    fitted = Calibration(
        remainder=remainder,
        cudnn_workspace=cudnn,
        runtime_plain=_triple([r.runtime_once_mib * MiB for r in no_conv]),
        runtime_conv=_triple([r.runtime_once_mib * MiB for r in with_conv]),
        runtime_tensorrt=_triple([r.runtime_once_mib * MiB for r in trt]),
        trt_context=_ratios([ratios[row_id(r)] for r in trt_dense], ratios.values()),
        trt_context_conv=_ratios([ratios[row_id(r)] for r in trt_conv], ratios.values()),
        margin=MIN_MARGIN,
        fitted_on=fitted_on,
    )
    if not nested:
        return fitted
    errors = [
        abs(h.per_copy_error)
        for h in held_out(rows, facts, nested=False)
        if h.published.platform == "pytorch_libtorch" and not h.prior
    ]
    margin = max([MIN_MARGIN, *errors])
    return Calibration(
        **{
            **vars(fitted),
            "margin": _round_up(margin),
            "fitted_on": {
                **fitted_on,
                "margin": tuple(sorted({row_id(r) for r in pytorch})),
            },
        }
    )


def _ratios(family: Sequence[float], every: Iterable[float]) -> tuple[float, float, float]:
    """(low, point, high): the family's median as the point (the prior where it has no row),
    the range over every TensorRT row and the prior."""
    point = statistics.median(family) if family else TRT_CONTEXT_PRIOR
    spread = [*every, point]
    return (round(min(spread), 2), round(point, 2), round(max(spread), 2))


def _context_ratio(row: PublishedCount, facts: ModelFacts) -> float:
    """The row's TensorRT context over its eager live-tensor peak at the max shape.

    The engine's weights are FP16- or FP32-sized (the flag allows FP16, TensorRT may keep
    FP32 layers: TensorRT developer guide, "Reduced Precision"); of the two readings the one
    nearer the eager peak (ratio nearest 1) is taken. The published BERT-base engine is
    FP16-sized (its copy is smaller than its FP32 weights); RoBERTa-large's is FP32-sized."""
    peak = facts.activation_bytes[row.max_shape_batch]
    readings = [
        (row.per_copy_mib * MiB - weights) / peak
        for weights in (facts.weight_bytes, facts.weight_bytes_fp32)
        if row.per_copy_mib * MiB > weights
    ]
    return min(readings, key=lambda ratio: abs(math.log(ratio)))


def _round_up(value: float) -> float:
    """Up to the next whole percent."""
    return -(-round(value * 1000) // 10) / 100


@dataclass(frozen=True, kw_only=True)
class HeldOut:
    """One published row estimated with constants fitted without its model."""

    comparison: Comparison
    calibration: Calibration
    #: True where a constant the row needs had no row left to fit (its prior was used)
    prior: bool

    @property
    def published(self) -> PublishedCount:
        """The published row."""
        return self.comparison.published

    @property
    def count_error(self) -> float:
        """(estimated - published) / published copies."""
        return self.comparison.count_error

    @property
    def per_copy_error(self) -> float:
        """(estimated - published) / published per-copy MiB."""
        point = self.comparison.per_copy_mib[1]
        return (point - self.published.per_copy_mib) / self.published.per_copy_mib

    @property
    def inside(self) -> bool:
        """True when the published count lies in the held-out estimate's range."""
        return self.comparison.in_range


def held_out(
    rows: Sequence[PublishedCount] = PUBLISHED,
    facts: FactsOf = published_facts,
    *,
    nested: bool = True,
) -> list[HeldOut]:
    """Every row of ``rows``, estimated with constants refit without its model."""
    found: list[HeldOut] = []
    models = list(dict.fromkeys(r.model for r in rows))
    for model in models:
        others = [r for r in rows if r.model != model]
        calibration = fit_calibration(others, facts, nested=nested)
        for row in (r for r in rows if r.model == model):
            conv = bool(facts(row).overlapping_convolutions)
            needs = (
                "cudnn_workspace"
                if row.platform == "pytorch_libtorch"
                else ("trt_context_conv" if conv else "trt_context")
            )
            prior = (conv or needs != "cudnn_workspace") and not calibration.fitted_on[needs]
            found.append(
                HeldOut(
                    comparison=compare(row, calibration=calibration),
                    calibration=calibration,
                    prior=prior,
                )
            )
    return found


@dataclass(frozen=True, kw_only=True)
class Summary:
    """Mean and max of the absolute held-out count errors, and how many lie in range."""

    rows: int
    mean_error: float
    max_error: float
    inside: int


def summarise(found: Sequence[HeldOut]) -> Summary:
    """The :class:`Summary` of ``found`` (absolute count errors)."""
    errors = [abs(h.count_error) for h in found]
    return Summary(
        rows=len(found),
        mean_error=statistics.fmean(errors) if errors else 0.0,
        max_error=max(errors, default=0.0),
        inside=sum(h.inside for h in found),
    )


HEADER = (
    "| model | format | instance (GPU) | published | held-out estimate (range) | error "
    "| inside | MiB/copy published | MiB/copy held-out |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def markdown_row(found: HeldOut) -> str:
    """One row of the held-out table in ``docs/estimate.md``."""
    c, p = found.comparison, found.published
    fmt = "PyTorch" if p.platform == "pytorch_libtorch" else f"TensorRT {p.precision}"
    note = " (prior)" if found.prior else ""
    return (
        f"| {p.model} | {fmt} | {p.instance_type} ({p.gpu}) | {p.count} "
        f"| {c.count_point} ({c.count_low}-{c.count_high}) | {found.count_error:+.0%}{note} "
        f"| {'yes' if found.inside else 'no'} | {p.per_copy_mib:,.0f} "
        f"| {c.per_copy_mib[1]:,.0f} |"
    )


__all__ = [
    "HEADER",
    "HeldOut",
    "Summary",
    "fit_calibration",
    "held_out",
    "markdown_row",
    "row_id",
    "summarise",
]
