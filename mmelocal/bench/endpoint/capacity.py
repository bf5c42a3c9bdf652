"""``capacity --endpoint``: the published max-models-per-GPU loop on a deployed endpoint.

The procedure of aws-samples/sagemaker-mme-gpu-benchmarking, with the names it uses:

1. ``metrics.tar.gz`` (mmelocal's probe, :mod:`mmelocal.bench.endpoint.remote`) goes into the
   endpoint's prefix and is invoked once, which loads it; its reading is the baseline;
2. the user's tarball is uploaded once; copy ``i`` is a server-side S3 copy of it named
   ``{model}-v{i}.tar.gz`` (under a run folder, so an earlier run's loaded copies never
   count), invoked once through ``InvokeEndpoint`` with ``TargetModel`` (which loads it and
   runs one inference), then the probe is read until it settles;
3. it stops at ``threshold`` (90 %) of the memory the probe reports with the local run's
   loop (:func:`mmelocal.bench.capacity.loop.measure_instance`, same result): by default on the
   copy that crosses, kept as the proof; with ``verify_next=False`` as the published loop
   does, when the next copy is *predicted* to cross.

The result is a :class:`~mmelocal.bench.capacity.result.CapacityResult` like the local
one, with its projection onto other cards and ``instance_type`` set to the endpoint's.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from mmelocal.bench.capacity.loop import _LoopLimits, copies_needed, measure_instance
from mmelocal.bench.capacity.projection import GpuSpec
from mmelocal.bench.capacity.result import CapacityResult, LoadRecord
from mmelocal.bench.endpoint.remote import PROBE_TARGET, ProbeReading, RemoteEndpoint
from mmelocal.bench.sources import served_model_facts
from mmelocal.builder.backends import MODEL_KINDS
from mmelocal.builder.tarball import TARBALL_SUFFIXES
from mmelocal.errors import UserInputError
from mmelocal.units import MiB

logger = logging.getLogger(__name__)

#: Triton platform (or backend) -> mmelocal's format name
PLATFORM_FORMATS = MODEL_KINDS


@dataclass(frozen=True, kw_only=True)
class RemoteCapacityOptions(_LoopLimits):
    """How to measure on an endpoint. ``memory_budget_bytes`` is needed only when the probe
    reads host memory (an endpoint without a GPU); ``verify_next=False`` stops on the
    prediction (the published loop) instead of loading the copy that crosses."""

    model_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class RemoteCapacity:
    """A finished remote run: the result and the TargetModels it created in S3."""

    result: CapacityResult
    loaded: tuple[str, ...]
    created: tuple[str, ...] = field(default=())


class _EndpointInstance:
    """The loop's view of the endpoint (:class:`~mmelocal.bench.capacity.loop.CapacityInstance`):
    a load is the copy's first invocation; memory is the probe's reading."""

    def __init__(self, endpoint: RemoteEndpoint, payload: bytes, content_type: str) -> None:
        self.endpoint, self.payload, self.content_type = endpoint, payload, content_type

    async def acquire(self, target: str, *, wait_timeout_s: float | None = None) -> None:
        await asyncio.to_thread(self.endpoint.invoke, target, self.payload, self.content_type)

    def release(self, target: str) -> None:
        return None

    async def invoke(
        self, target: str, body: bytes, headers: list[tuple[str, str]]
    ) -> tuple[int, dict[str, str], bytes]:
        content_type = dict(headers).get("Content-Type", self.content_type)
        answer = await asyncio.to_thread(self.endpoint.invoke, target, body, content_type)
        return 200, {}, answer

    async def read_memory(self) -> ProbeReading:
        return await asyncio.to_thread(self.endpoint.read_probe)


def tarball_format(tarball: Path) -> str:
    """The format of the model SageMaker's Triton would serve from ``tarball``."""
    from mmelocal.builder.mme_layout import read_layout
    from mmelocal.builder.model_config import read_config
    from mmelocal.builder.tarball import safe_extract

    with tempfile.TemporaryDirectory(prefix="mmelocal-peek-") as tmp:
        layout = read_layout(safe_extract(tarball, Path(tmp) / "x"))
        layout.raise_for_errors(str(tarball))
        if layout.served_dir is None:
            return "model"
        cfg = read_config(layout.served_dir / "config.pbtxt")
    kind = str(cfg.platform) or str(cfg.backend)
    return PLATFORM_FORMATS.get(kind, kind or "model")


def model_stem(tarball: Path) -> str:
    """``resnet50.tar.gz`` -> ``resnet50``."""
    return tarball.name.removesuffix(".gz").removesuffix(".tar").removesuffix(".tgz")


def measure_endpoint_capacity(
    endpoint: RemoteEndpoint,
    tarball: Path | str,
    *,
    payload: bytes,
    options: RemoteCapacityOptions | None = None,
    content_type: str = "application/json",
    progress: Callable[[LoadRecord], None] | None = None,
    gpus: Sequence[GpuSpec] | None = None,
    label: str = "",
) -> RemoteCapacity:
    """Run the loop of the module docstring on ``endpoint`` with copies of ``tarball``."""
    opts = options or RemoteCapacityOptions()
    tarball = Path(tarball)
    if not tarball.is_file() or not tarball.name.endswith(TARBALL_SUFFIXES):
        raise UserInputError(f"{tarball}: expected a model.tar.gz (package it with mmelocal)")
    model_format = tarball_format(tarball)
    precision = served_model_facts(tarball, model_format)[1]
    model = opts.model_name or model_stem(tarball)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="mmelocal-remote-") as tmp:
        first = endpoint.ensure_probe(Path(tmp))
    if first.kind == "host" and opts.memory_budget_bytes is None:
        raise UserInputError(
            f"the probe on {endpoint.info.name} reads host memory (no GPU there): give a "
            "memory budget (e.g. --memory-budget 4GiB) to measure the Triton tree against"
        )
    run = f"mmelocal-capacity-{uuid.uuid4().hex[:8]}/"
    source = f"{run}{model}.tar.gz"
    endpoint.put_file(tarball, source)
    created = [source]
    targets = [
        f"{run}{model}-v{i}.tar.gz"
        for i in range(copies_needed(opts.max_copies, verify_next=opts.verify_next))
    ]

    async def copy_first(target: str) -> None:
        created.append(target)
        await asyncio.to_thread(endpoint.copy, source, target)

    try:
        measurement = asyncio.run(
            measure_instance(
                _EndpointInstance(endpoint, payload, content_type),
                targets,
                threshold=opts.threshold,
                max_copies=opts.max_copies,
                payload=None,  # the copy's first invocation is its load and its inference
                verify_next=opts.verify_next,
                total_bytes=opts.memory_budget_bytes if first.kind == "host" else None,
                progress=progress,
                before_load=copy_first,
            )
        )
    except BaseException:
        endpoint.delete(created)  # nothing of a failed run stays in the prefix
        raise
    result = measurement.result(
        source=str(tarball),
        label=label or f"{model} ({model_format})",
        model_format=model_format,
        probe=_probe_text(first, endpoint, opts.memory_budget_bytes),
        threshold=opts.threshold,
        started_at=started_at,
        gpus=gpus,
        instance_type=endpoint.info.instance_type,
        precision=precision,
    )
    loaded = [load.target for load in measurement.loads]
    return RemoteCapacity(result=result, loaded=tuple(loaded), created=tuple(created))


def _probe_text(first: ProbeReading, endpoint: RemoteEndpoint, budget: int | None) -> str:
    where = f"{PROBE_TARGET} on endpoint {endpoint.info.name}"
    if first.kind == "host":
        return f"host PSS of the Triton tree via {where}, budget {(budget or 0) / MiB:,.0f} MiB"
    return f"{first.describe()} via {where}"


__all__ = [
    "PLATFORM_FORMATS",
    "RemoteCapacity",
    "RemoteCapacityOptions",
    "measure_endpoint_capacity",
    "model_stem",
    "tarball_format",
]
