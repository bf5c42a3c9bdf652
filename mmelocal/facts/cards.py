"""Card memory: the packaged ``gpus.yaml``, the one data file of GPU memory figures.

It holds two different facts per card, named apart: ``memory_mib`` (a card's full memory as
NVML reports it with ECC off, what ``capacity project`` and ``estimate`` project onto) and
the ``published_readings`` (one published run's NVML total with ECC on, and the memory in
use before any model, which :mod:`mmelocal.bench.estimate.published` calibrates against).
The T4 is 15,360 MiB in the first and 15,109 MiB in the second.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

#: the packaged file's name inside this package
GPUS_FILE = "gpus.yaml"


def gpus_text() -> str:
    """The packaged ``gpus.yaml`` (read through importlib.resources, so it works in a wheel)."""
    return resources.files(__package__).joinpath(GPUS_FILE).read_text("utf-8")


@dataclass(frozen=True, kw_only=True)
class PublishedReading:
    """What NVML read on one card in the published runs (MiB)."""

    gpu: str
    instance_type: str
    ecc: bool
    nvml_total_mib: float
    baseline_mib: float

    def run_fields(self) -> dict[str, Any]:
        """The fields a published run takes from this reading (instance, card, total,
        baseline), under :class:`~mmelocal.bench.estimate.published.PublishedCount`'s names."""
        return {
            "instance_type": self.instance_type,
            "gpu": self.gpu,
            "total_mib": self.nvml_total_mib,
            "baseline_mib": self.baseline_mib,
        }


@cache
def _data() -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(gpus_text())
    assert isinstance(data, dict)
    return data


def published_readings() -> tuple[PublishedReading, ...]:
    """Every card the published runs read, in the file's order."""
    return tuple(PublishedReading(**entry) for entry in _data().get("published_readings", []))


def published_reading(gpu: str) -> PublishedReading:
    """The published runs' reading of card ``gpu`` ("T4", "V100"); KeyError for another."""
    for reading in published_readings():
        if reading.gpu == gpu:
            return reading
    raise KeyError(f"no published reading of the {gpu} in {GPUS_FILE}")


__all__ = ["GPUS_FILE", "PublishedReading", "gpus_text", "published_reading", "published_readings"]
