"""Project one capacity measurement onto other GPU cards.

Published cloud figures show that a model's footprint is nearly the same on different
cards, so one measurement (baseline of the empty server + memory per model copy) gives the
count on any card of known size::

    count = floor((threshold * total - baseline) / per_model)

An instance type with several such cards holds the same count, not a multiple of it:
Triton gives each model one execution instance on every GPU it sees unless the model's
``instance_group`` says otherwise ("By default, Triton gives each model a single instance
for each available GPU in the system", Triton's user guide, Concurrent Model Execution),
so every loaded model takes its memory on each card, and a multi-model endpoint loads the
same ``config.pbtxt`` for every copy. More cards buy throughput, not room.

The cards and the instance types that carry them live in a YAML data file shipped in the
package (``mmelocal/facts/gpus.yaml``); users pass their own file to add or replace
cards (same ``name`` replaces).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from mmelocal.bench.datafile import parse_yaml
from mmelocal.bench.results import BenchResult
from mmelocal.errors import UserInputError
from mmelocal.facts.cards import gpus_text
from mmelocal.facts.sagemaker import MEMORY_THRESHOLD
from mmelocal.units import MiB


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One GPU card: its usable memory and the instance types that carry it.

    ``instances`` maps an instance type (``ml.g4dn.xlarge``) to its number of such GPUs.
    """

    name: str
    memory_bytes: int
    nominal: str = ""
    instances: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise UserInputError("GPU name must not be empty")
        if self.memory_bytes <= 0:
            raise UserInputError(
                f"GPU {self.name}: memory_bytes must be > 0, got {self.memory_bytes}"
            )
        for instance, count in self.instances.items():
            if not isinstance(count, int) or count < 1:
                raise UserInputError(
                    f"GPU {self.name}: instance {instance} must have an int GPU count >= 1, "
                    f"got {count!r}"
                )
        object.__setattr__(self, "instances", dict(self.instances))


@dataclass(frozen=True, kw_only=True)
class ProjectionRow:
    """The projected count on one card (and per instance type carrying it)."""

    gpu: str
    nominal: str
    memory_bytes: int
    instance_type: str
    gpus_per_instance: int
    models_per_gpu: int

    @property
    def models_per_instance(self) -> int:
        """``models_per_gpu``: each model takes an instance on every card (see the module)."""
        return self.models_per_gpu


class Projection(BenchResult, kind="projection"):
    """A projection table, JSON-able with ``kind = "projection"``."""

    per_model_bytes: int
    baseline_bytes: int
    threshold: float
    rows: tuple[ProjectionRow, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (the ``kind`` field tells ``mmelocal report`` what this is)."""
        return {
            "kind": self.kind,
            "per_model_bytes": self.per_model_bytes,
            "baseline_bytes": self.baseline_bytes,
            "threshold": self.threshold,
            "rows": [
                {**vars(row), "models_per_instance": row.models_per_instance} for row in self.rows
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Projection:
        """Inverse of :meth:`to_dict`. A row's ``models_per_instance`` is not read (it is
        its ``models_per_gpu``): files written before the fix for several cards hold the count
        times the cards, which no instance type holds (see the module)."""
        return cls(
            per_model_bytes=int(data["per_model_bytes"]),
            baseline_bytes=int(data["baseline_bytes"]),
            threshold=float(data["threshold"]),
            rows=tuple(
                ProjectionRow(**{k: v for k, v in row.items() if k != "models_per_instance"})
                for row in data["rows"]
            ),
        )


def validate_threshold(threshold: float) -> float:
    """Return ``threshold`` if it is a fraction in (0, 1], else raise UserInputError."""
    if not 0.0 < threshold <= 1.0:
        raise UserInputError(f"threshold must be in (0, 1] (e.g. 0.9), got {threshold}")
    return float(threshold)


def project_count(
    *,
    total_bytes: int,
    baseline_bytes: int,
    per_model_bytes: float,
    threshold: float = MEMORY_THRESHOLD,
) -> int:
    """``floor((threshold * total - baseline) / per_model)``, never below 0.

    Computed in exact fractions with the threshold taken as the decimal it was written as,
    so a count that lands exactly on the limit is not lost to float rounding (0.29 x 100
    is 28.999... in floats).
    """
    validate_threshold(threshold)
    if per_model_bytes <= 0:
        raise UserInputError(f"per_model_bytes must be > 0, got {per_model_bytes}")
    if baseline_bytes < 0:
        raise UserInputError(f"baseline_bytes must be >= 0, got {baseline_bytes}")
    room = Fraction(repr(float(threshold))) * total_bytes - baseline_bytes
    return max(0, math.floor(room / Fraction(per_model_bytes)))


def default_gpus_text() -> str:
    """The packaged ``gpus.yaml`` (:mod:`mmelocal.facts.cards`)."""
    return gpus_text()


def parse_gpus(text: str, *, origin: str = "<gpus>") -> list[GpuSpec]:
    """Parse a ``gpus:`` YAML document into GPU specs (errors name the file and entry)."""
    data = parse_yaml(text, origin=origin)
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise UserInputError(f"{origin}: expected a mapping with a 'gpus:' list")
    specs: list[GpuSpec] = []
    for index, entry in enumerate(data["gpus"]):
        if not isinstance(entry, dict):
            raise UserInputError(f"{origin}: gpus[{index}] must be a mapping")
        unknown = set(entry) - {"name", "nominal", "memory_mib", "memory_gib", "instances"}
        if unknown:
            raise UserInputError(
                f"{origin}: gpus[{index}] has unknown field(s) {sorted(unknown)}; allowed: "
                "name, nominal, memory_mib, memory_gib, instances"
            )
        if "memory_mib" in entry:
            memory_bytes = int(float(entry["memory_mib"]) * MiB)
        elif "memory_gib" in entry:
            memory_bytes = int(float(entry["memory_gib"]) * 1024 * MiB)
        else:
            raise UserInputError(f"{origin}: gpus[{index}] needs memory_mib or memory_gib")
        instances = entry.get("instances") or {}
        if not isinstance(instances, dict):
            raise UserInputError(
                f"{origin}: gpus[{index}].instances must map instance type -> GPU count"
            )
        specs.append(
            GpuSpec(
                name=str(entry.get("name", "")),
                memory_bytes=memory_bytes,
                nominal=str(entry.get("nominal", "")),
                instances={str(k): v for k, v in instances.items()},
            )
        )
    return specs


def load_gpus(path: Path | str | None = None) -> list[GpuSpec]:
    """The packaged cards, extended (or overridden by name) by the cards in ``path``."""
    specs = {spec.name: spec for spec in parse_gpus(default_gpus_text(), origin="gpus.yaml")}
    if path is not None:
        path = Path(path)
        try:
            text = path.read_text("utf-8")
        except OSError as exc:
            raise UserInputError(f"cannot read GPU file {path}: {exc.strerror}") from exc
        for spec in parse_gpus(text, origin=str(path)):
            specs[spec.name] = spec
    return list(specs.values())


_GPU_FAMILY = re.compile(r"^(ml\.)?(g|p)\d+[a-z]*\.")


def is_gpu_instance_type(instance_type: str, gpus: Sequence[GpuSpec] | None = None) -> bool:
    """True for an instance type with an NVIDIA GPU: one a card in ``gpus`` (default: the
    packaged table) names, or one of the G and P families (``ml.g6e.xlarge``)."""
    known = gpus if gpus is not None else load_gpus()
    if any(instance_type in gpu.instances for gpu in known):
        return True
    return _GPU_FAMILY.match(instance_type) is not None


_NAME_TOKEN = re.compile(r"[A-Z0-9]+")
#: words NVML's product names carry beside the card's own (``Tesla T4``, ``NVIDIA A10G``)
_VENDOR_WORDS = frozenset({"NVIDIA", "TESLA"})
#: words of NVML's product names that make another board of the same chip (NVIDIA's names,
#: NVIDIA/open-gpu-kernel-modules README, "Compatible GPUs"): the PCIe cards (``NVIDIA H100
#: PCIe``, ``NVIDIA A100-PCIE-40GB``, ``NVIDIA A100 80GB PCIe``; ``Tesla V100-FHHL-16GB``)
#: and the NVL boards (``NVIDIA H100 NVL``, 94 GB; ``NVIDIA H200 NVL``, 600 W where the
#: SXM H200 takes 700 W), beside the SXM parts of SageMaker's P instances (``NVIDIA H100
#: 80GB HBM3``, ``NVIDIA H200``, ``NVIDIA A100-SXM4-40GB``, ``Tesla V100-SXM2-16GB``)
_BOARD_WORDS = frozenset({"PCIE", "NVL", "FHHL"})
_SIZE_GB = re.compile(r"([0-9]+)\s*GB")
_SIZE_WORD = re.compile(r"[0-9]+GB")
#: how far NVML's memory total may be from a card's ``memory_mib`` (either way, as a
#: fraction of it) for the device to be that card. ECC takes a little: the published T4
#: reading is 15,109 MiB of the card's 15,360 (1.6 %, ``gpus.yaml``). Cards that one name
#: can be are further apart: an ``NVIDIA H100`` shows 81,559 MiB on the 80 GB SXM part
#: (NVIDIA/nccl issue 1264) and 95,830 MiB on the 94 GB one (17 % more), A100s and V100s
#: of one name come in 2x sizes.
MEMORY_MATCH_FRACTION = 0.05


def _tokens(name: str) -> frozenset[str]:
    return frozenset(_NAME_TOKEN.findall(name.upper())) - _VENDOR_WORDS


def _sizes_gb(text: str) -> frozenset[int]:
    return frozenset(int(size) for size in _SIZE_GB.findall(text.upper()))


def _name_words(gpu: GpuSpec) -> frozenset[str]:
    """The words of a card's name that a device's name must have: its sizes aside (the
    "40GB" of ``A100-40GB``), which the device's memory says when its name does not."""
    return frozenset(w for w in _tokens(gpu.name) if not _SIZE_WORD.fullmatch(w))


def _is_named(gpu: GpuSpec, words: frozenset[str], sizes: frozenset[int]) -> bool:
    """Whether a device whose name has ``words`` and shows the memory ``sizes`` (GB) can be
    ``gpu``: all of the card's words, the same board words, and no other size than the
    card's (its name's or nominal: ``Tesla V100-SXM2-32GB`` is not a 16 GB V100)."""
    own = _name_words(gpu)
    if not own or not own <= words or own & _BOARD_WORDS != words & _BOARD_WORDS:
        return False
    card_sizes = _sizes_gb(gpu.name) | _sizes_gb(gpu.nominal)
    return not (sizes and card_sizes) or sizes <= card_sizes


def memory_fits(gpu: GpuSpec, total_bytes: int) -> bool:
    """Whether NVML's memory total ``total_bytes`` is card ``gpu``'s memory, within
    :data:`MEMORY_MATCH_FRACTION`."""
    return abs(total_bytes - gpu.memory_bytes) <= MEMORY_MATCH_FRACTION * gpu.memory_bytes


def card_named(device_name: str, gpus: Sequence[GpuSpec], *, total_bytes: int) -> GpuSpec | None:
    """The card of ``gpus`` that a GPU is, from both of NVML's readings: its product name
    ``device_name`` and its memory total ``total_bytes``. ``Tesla T4`` -> T4; ``NVIDIA
    A100-SXM4-80GB`` -> A100-80GB; ``NVIDIA H100`` is the H100 (80 GB) only with the 80 GB
    card's memory: the 94 GB part shows the same name. The name must have all of the card's
    words (a size in the card's name aside), the same PCIe / NVL board word (``NVIDIA H200
    NVL`` is only an ``H200 NVL`` card, never the SXM ``H200``) and no other size; the
    memory must be the card's (:func:`memory_fits`). Of those, the most specific name, then
    the nearest memory. None when no card is both (``NVIDIA B200``; ``NVIDIA H100`` with
    95,830 MiB in the packaged table): the caller says so rather than take another card."""
    words = _tokens(device_name)
    sizes = _sizes_gb(device_name)
    matches = [
        gpu for gpu in gpus if _is_named(gpu, words, sizes) and memory_fits(gpu, total_bytes)
    ]
    return max(
        matches,
        key=lambda gpu: (len(_name_words(gpu)), -abs(gpu.memory_bytes - total_bytes)),
        default=None,
    )


def describe_reading(device_name: str, total_bytes: int) -> str:
    """``NVIDIA H100 of 95830 MiB``: one GPU as NVML reads it, for messages."""
    return f"{device_name} of {total_bytes / MiB:.0f} MiB"


def card_of_instance(instance_type: str, gpus: Sequence[GpuSpec]) -> tuple[GpuSpec, int] | None:
    """(card, GPUs per instance) of ``instance_type`` in ``gpus``; None when no card lists it."""
    for gpu in gpus:
        if instance_type in gpu.instances:
            return gpu, gpu.instances[instance_type]
    return None


def project(
    *,
    per_model_bytes: float,
    baseline_bytes: int,
    threshold: float = MEMORY_THRESHOLD,
    gpus: Sequence[GpuSpec] | None = None,
) -> Projection:
    """The projected count for every card and every instance type that carries it."""
    if gpus is None:
        gpus = load_gpus()
    rows: list[ProjectionRow] = []
    for gpu in gpus:
        per_gpu = project_count(
            total_bytes=gpu.memory_bytes,
            baseline_bytes=baseline_bytes,
            per_model_bytes=per_model_bytes,
            threshold=threshold,
        )
        for instance, count in (gpu.instances or {"": 1}).items():
            rows.append(
                ProjectionRow(
                    gpu=gpu.name,
                    nominal=gpu.nominal,
                    memory_bytes=gpu.memory_bytes,
                    instance_type=instance,
                    gpus_per_instance=count,
                    models_per_gpu=per_gpu,
                )
            )
    return Projection(
        per_model_bytes=round(per_model_bytes),
        baseline_bytes=baseline_bytes,
        threshold=threshold,
        rows=tuple(rows),
    )


__all__ = [
    "MEMORY_MATCH_FRACTION",
    "GpuSpec",
    "Projection",
    "ProjectionRow",
    "card_named",
    "card_of_instance",
    "default_gpus_text",
    "describe_reading",
    "is_gpu_instance_type",
    "load_gpus",
    "memory_fits",
    "parse_gpus",
    "project",
    "project_count",
    "validate_threshold",
]
