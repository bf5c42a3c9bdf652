"""The GPU footprint of one model copy and the copies per card, estimated from the model.

No GPU and no AWS: the weights come from the parameters, the activations from a trace on
fake tensors (:mod:`mmelocal.bench.estimate.activations`), and what the backend and the process add
from the constants in :mod:`mmelocal.bench.estimate.parts`, each with its source. Every
part is a range (``low``/``point``/``high``); the count per card follows the projection
formula with the "once per process" parts as the baseline::

    count = floor((threshold x card - once per process) / per copy)

``high`` copies come from the ``low`` footprint and the other way round. Counts are checked
on the published runs in :mod:`mmelocal.bench.estimate.published`, each model held out of
the fit (:mod:`mmelocal.bench.estimate.holdout`, ``tests/bench/
test_bench_estimate_holdout.py``; table in ``docs/estimate.md``). A measurement, when one
exists, wins: :meth:`Estimate.with_measurement` keeps it beside the estimate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mmelocal.bench.capacity.projection import GpuSpec, project_count, validate_threshold
from mmelocal.bench.estimate.parts import (
    CUBLAS_SEGMENT_BYTES,
    CUBLAS_WORKSPACE_BYTES,
    CUDNN_WORKSPACE_PRIOR_BYTES,
    ESTIMATE_FORMATS,
    ONCE,
    PER_COPY,
    PRECISION_BYTES,
    SERVER_BASELINE_BYTES,
    SERVER_BASELINE_RANGE,
    SHIPPED,
    Batches,
    Calibration,
    ModelFacts,
    Part,
    build_parts,
    sum_parts,
)
from mmelocal.bench.estimate.published import PUBLISHED
from mmelocal.bench.results import BenchResult
from mmelocal.errors import UserInputError
from mmelocal.facts.sagemaker import MEMORY_THRESHOLD

#: the cards published runs checked the estimate on; the others are projected
CHECKED_CARDS = frozenset(row.gpu for row in PUBLISHED)


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
    #: True for a card no published run has checked (A10G, L4, A100, H100)
    projected: bool = False

    @property
    def copies(self) -> int:
        """The count that sizes an instance of this card: the measured one where a
        measurement of the same format and precision stands beside the estimate (it wins),
        else the point. The one reading of a card's count: ``capacity estimate``'s table
        marks it, ``deploy --capacity`` and ``traffic --capacity`` size with it."""
        return self.measured if self.measured is not None else self.point

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
    #: the artifact's format (torchscript, tensorrt...); "" when not recorded
    model_format: str = ""
    #: the precision of its weights (fp32, fp16...); "" when not recorded or not readable
    #: (results written before it was recorded, a TensorRT plan)
    precision: str = ""

    @property
    def on_gpu(self) -> bool:
        """True for GPU device memory (host-memory readings do not project to a GPU)."""
        return not self.probe.startswith("host")

    def why_not(self, model_format: str, precision: str = "") -> str:
        """Why this measurement does not stand for an estimate of ``model_format`` at
        ``precision`` ("" when it does): only GPU memory of the same format (TensorRT changes
        the footprint: CNNs about 2x, BERT-base smaller) and of the same precision (FP16
        weights take half FP32's bytes) compares like with like."""
        if not self.on_gpu:
            return "host memory, not a GPU"
        if self.model_format and self.model_format != model_format:
            return f"a {self.model_format} artifact, the estimate is of {model_format}"
        if self.precision and precision and self.precision != precision:
            return f"{self.precision} weights, the estimate is of {precision}"
        return ""

    def applies_to(self, model_format: str, precision: str = "") -> bool:
        """True when this measurement stands for an estimate of ``model_format`` at
        ``precision`` (see :meth:`why_not`)."""
        return not self.why_not(model_format, precision)


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


class Estimate(BenchResult, kind="estimate"):
    """An estimate; JSON-able with ``kind = "estimate"``."""

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
                    projected=gpu.name not in CHECKED_CARDS,
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

    @property
    def measured_wins(self) -> bool:
        """True when the measurement beside the estimate gives the counts: GPU memory of
        the same format and precision, with a footprint per copy."""
        return self._winning_measurement() is not None

    def _winning_measurement(self) -> Measured | None:
        """The measurement when it gives the counts (:attr:`measured_wins`), else None."""
        m = self.measured
        if m is None or not m.applies_to(self.model_format, self.precision):
            return None
        return m if m.per_copy_bytes > 0 else None

    def _measured_count(self, memory_bytes: int) -> int | None:
        m = self._winning_measurement()
        if m is None:
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


def estimate_from_facts(
    facts: ModelFacts,
    *,
    source: str,
    model_format: str,
    precision: str,
    batches: Batches,
    threshold: float = MEMORY_THRESHOLD,
    calibration: Calibration = SHIPPED,
) -> Estimate:
    """The :class:`Estimate` of a traced model (no cards yet: see :meth:`Estimate.with_cards`).

    ``calibration`` holds the fitted constants (the leave-one-model-out check passes its
    refits)."""
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
        parts=build_parts(
            facts, model_format=model_format, batches=batches, calibration=calibration
        ),
        threshold=threshold,
        notes=facts.notes,
    )


__all__ = [
    "CHECKED_CARDS",
    "CUBLAS_SEGMENT_BYTES",
    "CUBLAS_WORKSPACE_BYTES",
    "CUDNN_WORKSPACE_PRIOR_BYTES",
    "ESTIMATE_FORMATS",
    "ONCE",
    "PER_COPY",
    "PRECISION_BYTES",
    "SERVER_BASELINE_BYTES",
    "SERVER_BASELINE_RANGE",
    "SHIPPED",
    "Batches",
    "Calibration",
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
