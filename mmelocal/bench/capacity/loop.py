"""How many copies of a model fit: load copy after copy and read the memory probe.

The loop (:func:`measure_instance`) drives one emulator :class:`TritonInstance` — the same
loading path as ``mmelocal serve``: artifact cache, safe extraction, ``POST /models`` through
Triton's SageMaker front end and the platform's memory waits — and after each load runs one
inference (so lazily allocated memory is counted) and reads the probe until it settles:
NVML device memory on a GPU, the summed PSS of the Triton process tree against a budget
otherwise. Each copy's growth is split into its marginal part and, for the first copy, the
shared runtime it brought in (see :mod:`mmelocal.bench.capacity.footprint`).

It stops when a copy crosses ``threshold x total``: the copies before it are the count, the
one that crossed is kept as the proof (``next_copy``). With ``verify_next=False`` it stops
earlier, as soon as the next copy is *predicted* to cross (the mean growth of the copies
after the first, whose growth also holds the shared runtime; the first's own while it is
alone), and loads nothing over the threshold.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from mmelocal.bench.capacity.projection import GpuSpec, validate_threshold
from mmelocal.bench.capacity.result import CapacityResult, LoadRecord
from mmelocal.errors import BenchError, MmeLocalError, UserInputError
from mmelocal.facts.sagemaker import DIRECT_LOAD_TIMEOUT_S, MEMORY_THRESHOLD
from mmelocal.units import MiB

logger = logging.getLogger(__name__)


class CapacityInstance(Protocol):
    """What the loop needs of an emulator instance (``TritonInstance`` provides it)."""

    async def acquire(self, target: str, *, wait_timeout_s: float | None = None) -> Any:
        """Load ``target`` (through the platform's path) and count one request in flight."""
        ...

    def release(self, target: str) -> None:
        """One request for ``target`` finished."""
        ...

    async def invoke(
        self, target: str, body: bytes, headers: list[tuple[str, str]]
    ) -> tuple[int, dict[str, str], bytes]:
        """Forward one inference: Triton's status, headers and body."""
        ...

    async def read_memory(self) -> Any:
        """A fresh memory reading (``used_bytes``, ``total_bytes``)."""
        ...


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """What :func:`measure_instance` read (before it becomes a :class:`CapacityResult`): its
    fields are the result's fields of the same names."""

    total_bytes: int
    baseline_bytes: int
    loads: tuple[LoadRecord, ...]
    next_copy: LoadRecord | None
    stopped_reason: str
    unsettled_copies: tuple[int, ...] = ()

    def result(
        self,
        *,
        source: str,
        label: str,
        model_format: str,
        probe: str,
        threshold: float,
        started_at: str,
        gpus: Sequence[GpuSpec] | None,
        instance_type: str = "",
        precision: str = "",
    ) -> CapacityResult:
        """The :class:`CapacityResult` of this measurement, projected onto ``gpus``."""
        result = CapacityResult(
            **vars(self),
            source=source,
            label=label,
            model_format=model_format,
            probe=probe,
            threshold=threshold,
            started_at=started_at,
            instance_type=instance_type,
            precision=precision,
        )
        return with_projection(result, gpus)


#: How close two readings in a row must be for the memory to count as settled after a load
#: and its first inference (mmelocal's own figure). It tells "still allocating or
#: releasing" from the probe's jitter, so it is absolute, not a share of the memory used:
#: the jitter does not grow with the card (0.5 % of the used memory was 350 MiB on an
#: 80 GB card, more than a small model's whole footprint, so a copy still allocating read
#: as settled). NVML's device figure moves only when something allocates or frees; the
#: host probe's summed PSS of an idle Triton tree moved by 0.1 MiB between readings 0.2 s
#: apart at the median (with rare steps of about 5 MiB: those cost one more reading) on
#: the 2-core development machine.
SETTLE_TOLERANCE_BYTES: int = MiB


async def settle_reading(
    read: Callable[[], Any],
    *,
    interval_s: float = 0.2,
    max_s: float = 3.0,
    tolerance_bytes: int = SETTLE_TOLERANCE_BYTES,
    what: str = "reading",
) -> Any:
    """Read until two readings in a row differ by less than ``tolerance_bytes`` (or
    ``max_s`` passed: then the last reading, with a warning naming ``what`` was read)."""
    reading, _ = await _read_settled(read, interval_s, max_s, tolerance_bytes, what)
    return reading


async def _read_settled(
    read: Callable[[], Any],
    interval_s: float = 0.2,
    max_s: float = 3.0,
    tolerance_bytes: int = SETTLE_TOLERANCE_BYTES,
    what: str = "reading",
) -> tuple[Any, bool]:
    """:func:`settle_reading`'s reading and whether the memory settled."""
    previous = await read()
    deadline = time.monotonic() + max_s
    moved = 0
    while time.monotonic() < deadline:
        await asyncio.sleep(interval_s)
        reading = await read()
        moved = abs(reading.used_bytes - previous.used_bytes)
        if moved < tolerance_bytes:
            return reading, True
        previous = reading
    logger.warning(
        "capacity: %s: memory had not settled in %g s (the last two readings %.1f MiB "
        "apart, over the %.1f MiB tolerance): taking the last reading, which may be short "
        "of what it will use",
        what,
        max_s,
        moved / MiB,
        tolerance_bytes / MiB,
    )
    return previous, False


async def measure_instance(
    instance: CapacityInstance,
    targets: Sequence[str],
    *,
    threshold: float = MEMORY_THRESHOLD,
    max_copies: int = 200,
    payload: bytes | None = None,
    content_type: str = "application/json",
    verify_next: bool = True,
    total_bytes: int | None = None,
    progress: Callable[[LoadRecord], None] | None = None,
    before_load: Callable[[str], Awaitable[None]] | None = None,
) -> Measurement:
    """Load ``targets`` one by one on ``instance`` (see the module docstring).

    ``total_bytes`` replaces the probe's total (the CPU budget); default: the probe's.
    ``before_load`` runs before each copy's load, untimed (a remote run copies the tarball
    in S3 there).
    """
    validate_threshold(threshold)
    if max_copies < 1:
        raise UserInputError(f"max_copies must be >= 1, got {max_copies}")
    if not targets:
        raise UserInputError("capacity needs at least one copy to load")
    baseline, settled = await _read_settled(
        instance.read_memory, what="the empty server (baseline)"
    )
    unsettled: list[int] = [] if settled else [0]
    total = int(total_bytes or baseline.total_bytes)
    limit = threshold * total
    if baseline.used_bytes > limit:
        raise BenchError(
            f"the empty server already uses {baseline.used_bytes / MiB:,.0f} MiB, over "
            f"{threshold:.0%} of {total / MiB:,.0f} MiB: raise the memory budget"
        )
    loads: list[LoadRecord] = []
    previous_reading = baseline
    reason = f"all {len(targets)} copies available were loaded"

    def measured(stopped_reason: str, next_copy: LoadRecord | None = None) -> Measurement:
        return Measurement(
            total_bytes=total,
            baseline_bytes=int(baseline.used_bytes),
            loads=tuple(loads),
            next_copy=next_copy,
            stopped_reason=stopped_reason,
            unsettled_copies=tuple(unsettled),
        )

    for target in targets:
        if len(loads) >= max_copies:
            reason = f"reached max copies ({max_copies})"
            break
        if not verify_next and loads:
            previous = int(previous_reading.used_bytes)
            step = _next_copy_bytes(loads)
            if previous + step > limit:
                reason = (
                    f"the next copy would cross the threshold (predicted "
                    f"{(previous + step) / MiB:,.0f} MiB > {limit / MiB:,.0f} MiB)"
                )
                break
        copies = len(loads) + 1
        try:
            if before_load is not None:
                await before_load(target)
            record, reading, settled = await _load_one(
                instance, target, copies, previous_reading, payload, content_type
            )
        except (MmeLocalError, OSError) as exc:
            reason = f"copy {copies} ({target}) failed to load: {exc}"
            logger.warning("capacity: %s", reason)
            return measured(reason)
        if not settled:
            unsettled.append(copies)
        if progress is not None:
            progress(record)
        if record.used_bytes > limit:
            reason = f"copy {copies} crossed {threshold:.0%} of the total"
            logger.info("capacity: %s (%d bytes in use)", reason, record.used_bytes)
            return measured(reason, next_copy=record)
        loads.append(record)
        previous_reading = reading
    return measured(reason)


def _next_copy_bytes(loads: Sequence[LoadRecord]) -> float:
    """What the next copy should add: the mean growth of the copies after the first (the
    first copy's growth also holds the shared runtime it brought, which no later copy
    repeats), or the first copy's own growth while it is the only one."""
    later = [load.delta_bytes for load in loads[1:]]
    return statistics.fmean(later) if later else float(loads[0].delta_bytes)


async def _load_one(
    instance: CapacityInstance,
    target: str,
    copies: int,
    previous: Any,
    payload: bytes | None,
    content_type: str,
) -> tuple[LoadRecord, Any, bool]:
    from mmelocal.bench.capacity.footprint import marginal_bytes

    previous_bytes = int(previous.used_bytes)
    t0 = time.perf_counter()
    await instance.acquire(target)
    load_s = time.perf_counter() - t0
    warmup_s = 0.0
    try:
        if payload is not None:
            t1 = time.perf_counter()
            status, _, body = await instance.invoke(
                target, payload, [("Content-Type", content_type)]
            )
            warmup_s = time.perf_counter() - t1
            if status != 200:
                raise BenchError(
                    f"warm-up inference on {target} answered HTTP {status}: "
                    f"{body[:300].decode('utf-8', 'replace')}"
                )
    finally:
        instance.release(target)
    reading, settled = await _read_settled(instance.read_memory, what=f"copy {copies} ({target})")
    used = int(reading.used_bytes)
    logger.info(
        "capacity: copy %d (%s) loaded in %.2f s, %d bytes in use (+%d)",
        copies,
        target,
        load_s,
        used,
        used - previous_bytes,
    )
    record = LoadRecord(
        copies=copies,
        target=target,
        used_bytes=used,
        delta_bytes=used - previous_bytes,
        load_s=round(load_s, 4),
        warmup_s=round(warmup_s, 4),
        marginal_bytes=marginal_bytes(previous, reading),
    )
    return record, reading, settled


@dataclass(frozen=True, kw_only=True)
class _LoopLimits:
    """The copy loop's limits, the same here and on an endpoint (checked on creation)."""

    threshold: float = MEMORY_THRESHOLD
    max_copies: int = 200
    memory_budget_bytes: int | None = None
    verify_next: bool = True

    def __post_init__(self) -> None:
        validate_threshold(self.threshold)
        if self.max_copies < 1:
            raise UserInputError(f"max_copies must be >= 1, got {self.max_copies}")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes <= 0:
            raise UserInputError(f"memory_budget_bytes must be > 0, got {self.memory_budget_bytes}")


@dataclass(frozen=True, kw_only=True)
class CapacityOptions(_LoopLimits):
    """How to measure: ``memory_budget_bytes`` is the total on a machine without a GPU (the
    Triton process tree's summed PSS is measured against it); with a GPU, NVML's device
    total is used unless a budget is given. The GPU is the first one a Triton started here
    sees (``CUDA_VISIBLE_DEVICES``, else GPU 0): Triton runs on it and its memory is read."""

    use_gpu: bool | None = None
    tritonserver: Path | None = None
    load_timeout_s: float = DIRECT_LOAD_TIMEOUT_S
    workdir: Path | None = None


def measure_capacity(
    source: str | Path,
    *,
    options: CapacityOptions | None = None,
    model_format: str = "torchscript",
    progress: Callable[[LoadRecord], None] | None = None,
    label: str = "",
    payload: bytes | None = None,
    content_type: str = "application/json",
    gpus: Sequence[GpuSpec] | None = None,
) -> CapacityResult:
    """Build (if needed) and package ``source``, serve it with the emulator on one Triton, and
    load copies until one crosses the threshold (see the module docstring).

    The result carries the projection onto ``gpus`` (default: the packaged cards).
    ``payload`` is the warm-up request sent after each load (default: a KServe v2 JSON body
    from the model's recorded sample inputs; without either, no warm-up inference runs).
    """
    opts = options or CapacityOptions()
    from mmelocal.bench.sources import resolve_model, served_model_facts
    from mmelocal.builder.package import package_copies
    from mmelocal.builder.payload import payload_from_model
    from mmelocal.runtime.visible_gpus import server_gpus

    # the GPUs the emulator's Triton will see (CUDA_VISIBLE_DEVICES), not every GPU here
    visible = server_gpus()
    use_gpu = opts.use_gpu if opts.use_gpu is not None else bool(visible.names)
    if not use_gpu and opts.memory_budget_bytes is None:
        raise UserInputError(
            f"{visible.describe()} for Triton here: give a memory budget (e.g. "
            "--memory-budget 4GiB) to measure the Triton process tree's host memory against"
        )
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="mmelocal-capacity-", dir=opts.workdir) as tmp:
        work = Path(tmp)
        model = resolve_model(source, workdir=work, model_format=model_format)
        model_format, precision = served_model_facts(model.path, model.model_format)
        copies = package_copies(
            model.path,
            work / "store",
            copies=copies_needed(opts.max_copies, verify_next=opts.verify_next),
        )
        if payload is None:
            try:
                payload = payload_from_model(model.path)
            except UserInputError as exc:
                logger.warning("capacity: no warm-up inference (%s)", exc)
        measurement, probe = asyncio.run(
            _measure_with_emulator(
                work, [p.name for p in copies], opts, use_gpu, payload, content_type, progress
            )
        )
    return measurement.result(
        source=str(source),
        label=label or f"{source} ({model_format})",
        model_format=model_format,
        precision=precision,
        probe=probe,
        threshold=opts.threshold,
        started_at=started_at,
        gpus=gpus,
    )


def with_projection(result: CapacityResult, gpus: Sequence[GpuSpec] | None) -> CapacityResult:
    """``result`` with its projection onto ``gpus`` (default: the packaged cards): each copy
    costs its marginal part; the shared runtime is paid once, like the baseline. A result
    read from host memory (no GPU) gets none: host footprints do not project to a GPU."""
    parts = result.projection_parts
    if result.on_host_memory or parts is None:
        return result
    per_model, baseline = parts
    from mmelocal.bench.capacity.projection import project

    projection = project(
        per_model_bytes=per_model, baseline_bytes=baseline, threshold=result.threshold, gpus=gpus
    )
    return dataclasses.replace(result, projection=projection)


#: Budget handed to the emulator on CPU so that it never evicts during a capacity run (the
#: capacity threshold, against the user's budget, is applied here instead).
_NO_EVICTION_BUDGET_BYTES = 1 << 50


async def _measure_with_emulator(
    work: Path,
    targets: list[str],
    opts: CapacityOptions,
    use_gpu: bool,
    payload: bytes | None,
    content_type: str,
    progress: Callable[[LoadRecord], None] | None,
) -> tuple[Measurement, str]:
    from mmelocal.emulator.emulator import Emulator, EmulatorConfig

    config = EmulatorConfig(
        store=str(work / "store"),
        cache_dir=work / "emulator",
        memory_threshold=1.0,
        memory_budget_bytes=_NO_EVICTION_BUDGET_BYTES,
        instances=1,
        tritonserver=opts.tritonserver,
        load_timeout_s=opts.load_timeout_s,
        gpus=None if use_gpu else (),
    )
    emulator = Emulator(config)
    await emulator.start()
    try:
        instance = emulator.instances[0]
        on_gpu = instance.probe.kind == "gpu"
        total = None if on_gpu and opts.memory_budget_bytes is None else opts.memory_budget_bytes
        budget_mib = (opts.memory_budget_bytes or 0) / MiB
        probe = (
            instance.probe.name
            if on_gpu
            else f"host PSS of the Triton tree, budget {budget_mib:,.0f} MiB"
        )
        measurement = await measure_instance(
            instance,
            targets,
            threshold=opts.threshold,
            max_copies=opts.max_copies,
            payload=payload,
            content_type=content_type,
            verify_next=opts.verify_next,
            total_bytes=total,
            progress=progress,
        )
        evictions = emulator.events.counts.get("evict", 0)
    finally:
        await emulator.stop()
    if evictions:
        raise BenchError(
            f"the emulator evicted {evictions} model(s) during the capacity run, so the "
            "readings do not add up; this is a bug in mmelocal, please report it"
        )
    return measurement, probe


def copies_needed(max_copies: int, *, verify_next: bool) -> int:
    """How many tarball copies a run may load."""
    return max_copies + (1 if verify_next else 0)


def footprint_ratio(a: CapacityResult, b: CapacityResult) -> float | None:
    """``b``'s mean per-model footprint over ``a``'s (to compare formats)."""
    ma, mb = a.per_model_mean_bytes, b.per_model_mean_bytes
    if not ma or not mb or math.isclose(ma, 0.0):
        return None
    return mb / ma


__all__ = [
    "SETTLE_TOLERANCE_BYTES",
    "CapacityInstance",
    "CapacityOptions",
    "CapacityResult",
    "LoadRecord",
    "Measurement",
    "copies_needed",
    "footprint_ratio",
    "measure_capacity",
    "measure_instance",
    "settle_reading",
    "with_projection",
]
