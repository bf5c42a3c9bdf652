"""What the simulated fleet is (:class:`SimConfig`): the instances, their capacity, disks
and concurrency, the cold-load (:class:`LoadTimes`) and download times, and target-tracking
:class:`Autoscaling`; each checked when made."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from mmelocal.errors import UserInputError
from mmelocal.facts.sagemaker import (
    BUSY_WAIT_S,
    HOT_MODEL_RPS,
    HOT_MODEL_WINDOW_S,
    LOAD_LIMIT_S,
    MODEL_NOT_READY_AFTER_S,
)


@dataclass(frozen=True, kw_only=True)
class LoadTimes:
    """Cold-load times in seconds: one value, or samples drawn at random (e.g. the cold
    loads a replay measured)."""

    samples_s: tuple[float, ...] = (1.0,)
    source: str = "given"

    def __post_init__(self) -> None:
        if not self.samples_s or any(not math.isfinite(s) or s < 0 for s in self.samples_s):
            raise UserInputError(f"load times must be >= 0 seconds, got {list(self.samples_s)[:5]}")

    def sampler(self, rng: np.random.Generator) -> Callable[[], float]:
        """A function returning one load time per call."""
        if len(self.samples_s) == 1:
            value = self.samples_s[0]
            return lambda: value
        pool = np.asarray(self.samples_s)[rng.integers(0, len(self.samples_s), 1 << 16)].tolist()
        state = {"i": 0}

        def draw() -> float:
            i = state["i"] = (state["i"] + 1) & 0xFFFF
            return float(pool[i])

        return draw


@dataclass(frozen=True, kw_only=True)
class Autoscaling:
    """Target tracking on invocations per instance per minute
    (``SageMakerVariantInvocationsPerInstance``), with the service's alarms and cooldowns.

    ``instance_start_s`` is how long a new instance takes to serve (billed from the
    decision). The metric is the invocations per instance in each 1-minute period.
    """

    min_instances: int
    max_instances: int
    target_invocations_per_instance: float
    scale_out_cooldown_s: float | None = None
    scale_in_cooldown_s: float | None = None
    instance_start_s: float = 300.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_instances <= self.max_instances:
            raise UserInputError(
                f"autoscaling needs 1 <= min <= max, got {self.min_instances}..{self.max_instances}"
            )
        if self.target_invocations_per_instance <= 0:
            raise UserInputError(
                "the autoscaling target (invocations per instance per minute) must be > 0, got "
                f"{self.target_invocations_per_instance:g}"
            )
        if self.instance_start_s < 0:
            raise UserInputError(f"instance_start_s must be >= 0, got {self.instance_start_s}")


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """What the simulated fleet is.

    Capacity per instance: ``models_per_instance`` (every model the same size), or
    ``memory_limit_bytes`` with ``footprint_bytes`` per model (what it holds loaded;
    ``default_footprint_bytes`` for the others). ``load_footprint_bytes``: what a load of
    the model plans for, where that differs from what it holds (the emulator plans a load
    with the most the model was measured at); a model not in it plans for its footprint.
    ``service_s`` is the time one request takes on a loaded model (None: unknown,
    latencies then hold only the waits for loads and slots).

    ``download``: seconds to download and extract an artifact that is not on the
    instance's disk (None: not modelled; the load times hold whatever download there is,
    as a replay's load cycles do for a first use). With it each instance keeps artifacts
    on a disk of ``disk_bytes`` (None: all stay), each ``artifact_bytes`` (by target;
    ``default_artifact_bytes`` for the others). ``load_limit_s``: how long the platform
    lets a download and load go on before the load has failed. ``busy_wait_s``: how long a
    load that finds no room waits for a loaded model to go idle (the emulator's wait)
    before it fails with ``InsufficientMemory``.
    """

    instances: int = 1
    models_per_instance: int | None = None
    memory_limit_bytes: int | None = None
    footprint_bytes: Mapping[str, int] = field(default_factory=dict)
    default_footprint_bytes: int | None = None
    load_footprint_bytes: Mapping[str, int] = field(default_factory=dict)
    load: LoadTimes = field(default_factory=LoadTimes)
    unload_s: float = 0.0
    service_s: float | None = None
    concurrency: int = 4
    parallel_loads: int = 1
    load_wait_timeout_s: float = MODEL_NOT_READY_AFTER_S
    load_limit_s: float = LOAD_LIMIT_S
    busy_wait_s: float = BUSY_WAIT_S
    download: LoadTimes | None = None
    disk_bytes: int | None = None
    artifact_bytes: Mapping[str, int] = field(default_factory=dict)
    default_artifact_bytes: int | None = None
    hot_rps_threshold: float = HOT_MODEL_RPS
    rate_window_s: float = HOT_MODEL_WINDOW_S
    autoscaling: Autoscaling | None = None
    instance_type: str | None = None
    price_per_hour: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.instances < 1:
            raise UserInputError(f"--instances must be >= 1, got {self.instances}")
        if self.models_per_instance is None and (
            self.memory_limit_bytes is None or self.default_footprint_bytes is None
        ):
            raise UserInputError(
                "give the capacity per instance: --models-per-instance K, or footprints and "
                "the card's memory (--footprint-mib or --capacity FILE, with --instance-type)"
            )
        if self.models_per_instance is not None and self.models_per_instance < 1:
            raise UserInputError(
                f"--models-per-instance must be >= 1, got {self.models_per_instance}"
            )
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            raise UserInputError(f"memory_limit_bytes must be > 0, got {self.memory_limit_bytes}")
        if self.parallel_loads < 1:
            raise UserInputError(f"--parallel-loads must be >= 1, got {self.parallel_loads}")
        if self.load_wait_timeout_s <= 0:
            raise UserInputError(f"load_wait_timeout_s must be > 0, got {self.load_wait_timeout_s}")
        if self.concurrency < 1:
            raise UserInputError(f"--concurrency must be >= 1, got {self.concurrency}")
        if self.service_s is not None and self.service_s < 0:
            raise UserInputError(f"--service-ms must be >= 0, got {self.service_s * 1e3:g}")
        if self.unload_s < 0:
            raise UserInputError(f"--unload-seconds must be >= 0, got {self.unload_s}")
        if self.load_limit_s <= 0:
            raise UserInputError(f"load_limit_s must be > 0, got {self.load_limit_s}")
        if self.busy_wait_s <= 0:
            raise UserInputError(f"busy_wait_s must be > 0, got {self.busy_wait_s}")
        if self.disk_bytes is not None:
            if self.disk_bytes <= 0:
                raise UserInputError(f"--disk-budget must be > 0, got {self.disk_bytes}")
            if self.download is None:
                raise UserInputError(
                    "a disk budget needs the download time it saves: give --download-seconds"
                )
            if self.default_artifact_bytes is None:
                raise UserInputError(
                    "a disk budget needs each artifact's size on disk: give --artifact-mib"
                )
        footprints = [*self.footprint_bytes.values(), *self.load_footprint_bytes.values()]
        if any(size < 0 for size in footprints):
            raise UserInputError(f"footprints must be >= 0 bytes, got {min(footprints)}")
        sizes = [*self.artifact_bytes.values(), self.default_artifact_bytes or 0]
        if any(size < 0 for size in sizes):
            raise UserInputError(f"artifact sizes must be >= 0 bytes, got {min(sizes)}")
