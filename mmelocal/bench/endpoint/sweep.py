"""``sweep --endpoint``: the configuration sweep on a deployed multi-model endpoint.

The variants the local sweep names (``pt-base``, ``pt-db``, ``pt-ig``, ``pt-ig-db``,
``trt-...``: format x dynamic batching x instance count) are TargetModels of the one
endpoint, so nothing is redeployed between them. Every format is built here first (as the
local sweep builds them, :func:`~mmelocal.bench.sweep.runner.sweep_rows`), so a build that
fails is known before any endpoint time is spent. Then each variant in turn is packaged
(``mmelocal-sweep-<run>/<variant>.tar.gz`` in the endpoint's prefix), uploaded, invoked
once (its cold load, timed), load-tested with the boto3 load test
(:func:`mmelocal.bench.loadtest.runner.run_loadtest` on the endpoint's name), and its object is
deleted. SageMaker has no call that unloads a model: the platform unloads an idle variant
when it needs the memory (least recently used first), and an idle variant takes no GPU
time from the next one.

TensorRT variants need an engine built for the endpoint's GPU (:func:`tensorrt_skip_reason`):
the endpoint decides whether they belong at all (its instance type and its probe: one that
serves on a CPU cannot run an engine), this machine whether they can be built here (the
GPUs a CUDA process here sees, of the endpoint's card); otherwise they are listed as
skipped with the reason (build the plan on a machine with that GPU and pass the tarball).

The endpoint's probe (``metrics.tar.gz``, placed as ``capacity --endpoint`` places it) says
what serves it: an endpoint whose probe reads host memory (the local AWS, on a CPU) under a
GPU instance type gets the CPU sweep's result, ratios and no instance count or cost.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from mmelocal.bench.capacity.projection import GpuSpec
from mmelocal.bench.endpoint.remote import RemoteEndpoint
from mmelocal.bench.sweep.result import SweepResult, SweepRow, row_from_loadtest
from mmelocal.bench.sweep.runner import SweepOptions, _Plan, _row, sweep_result, sweep_rows
from mmelocal.errors import MmeLocalError
from mmelocal.runtime.visible_gpus import ServerGpus

logger = logging.getLogger(__name__)

_TENSORRT_SKIPPED = (
    "a TensorRT engine is built on a GPU of the endpoint's kind and none is here: build the "
    "plan there and pass its tarball"
)


def run_endpoint_sweep(
    endpoint: RemoteEndpoint,
    source: str | Path,
    *,
    options: SweepOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> SweepResult:
    """Package, upload, load-test and retire every variant of ``source`` on ``endpoint``."""
    from mmelocal.bench.capacity.projection import is_gpu_instance_type, load_gpus
    from mmelocal.bench.prices import load_prices
    from mmelocal.runtime.visible_gpus import server_gpus

    opts = options or SweepOptions()
    say = progress or (lambda message: None)
    info = endpoint.info
    prices = load_prices(opts.prices_file)
    price = prices.price_for(info.instance_type)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    run = f"mmelocal-sweep-{uuid.uuid4().hex[:8]}/"
    with tempfile.TemporaryDirectory(prefix="mmelocal-remote-sweep-probe-") as tmp:
        on_cpu = endpoint.ensure_probe(Path(tmp)).kind == "host"
    gpus = load_gpus(opts.gpus_file)
    # CPU throughput says nothing about how many GPU instances a load needs: ratios only
    relative_only = on_cpu and is_gpu_instance_type(info.instance_type, gpus)
    skipped = tensorrt_skip_reason(
        info.name, info.instance_type, on_cpu=on_cpu, here=server_gpus(), gpus=gpus
    )

    def measure(variants: list[tuple[_Plan, Path]], work: Path) -> dict[str, SweepRow]:
        return {
            plan.name: _measure_variant(
                endpoint, plan, model_dir, f"{run}{plan.name}.tar.gz", opts, price, work, say
            )
            for plan, model_dir in variants
        }

    ordered = sweep_rows(
        source,
        opts,
        skipped is None,  # TensorRT is built here for the endpoint
        say,
        measure=measure,
        prefix="mmelocal-remote-sweep-",
        skipped_reason=skipped,
    )
    where = (
        f" Throughput was measured on one {info.instance_type} instance of endpoint {info.name}."
    )
    machine = f"endpoint {info.name}: 1 x {info.instance_type} (SageMaker MME)"
    if relative_only:
        where = (
            f" Throughput was measured on endpoint {info.name}, whose probe reads host memory "
            f"(a CPU, not a {info.instance_type} GPU): instance counts and costs are not "
            "derived from it."
        )
        machine = f"endpoint {info.name}: CPU host memory, as {info.instance_type}"
    return sweep_result(
        source,
        ordered,
        opts,
        prices,
        info.instance_type,
        where=where,
        machine=machine,
        started_at=started_at,
        relative_only=relative_only,
    )


def tensorrt_skip_reason(
    endpoint_name: str,
    instance_type: str,
    *,
    on_cpu: bool,
    here: ServerGpus,
    gpus: Sequence[GpuSpec],
) -> str | None:
    """Why the TensorRT variants of a sweep of endpoint ``endpoint_name`` are skipped, or
    None when they are built here for it. A TensorRT engine runs on an NVIDIA GPU only, and
    only on the GPU model it was built on (TensorRT's support matrix, "Engine Portability":
    without hardware compatibility mode engines are not portable across GPU architectures).
    So: none on an endpoint that serves on a CPU (``on_cpu``: its probe reads host memory;
    or a CPU instance type), whatever this machine has; none without a GPU here that a CUDA
    process sees (``here``: :func:`~mmelocal.runtime.visible_gpus.server_gpus`); none when
    a GPU here is not the instance type's card in ``gpus`` (the card table; by NVML's name
    and memory total, :func:`~mmelocal.bench.capacity.projection.card_named`). An instance
    type the table lacks gets the plan built here: its load on the endpoint says."""
    from mmelocal.bench.capacity.projection import (
        card_named,
        card_of_instance,
        describe_reading,
        is_gpu_instance_type,
    )

    if on_cpu or not is_gpu_instance_type(instance_type, gpus):
        return (
            f"endpoint {endpoint_name} ({instance_type}) serves on a CPU, and a TensorRT "
            "engine runs on an NVIDIA GPU only"
        )
    if not here.names:
        return _TENSORRT_SKIPPED
    wanted = card_of_instance(instance_type, gpus)
    if wanted is None:
        return None
    card = wanted[0].name
    others = sorted(
        {
            describe_reading(name, total)
            for name, total in zip(here.names, here.total_bytes, strict=True)
            if getattr(card_named(name, gpus, total_bytes=total), "name", None) != card
        }
    )
    if not others:
        return None
    return (
        f"a TensorRT engine runs on the GPU model it was built on, and this machine's "
        f"{', '.join(others)} ({here.origin}) is not the {card} of {instance_type}: build the "
        f"plan on a {card} and pass its tarball"
    )


def _measure_variant(
    endpoint: RemoteEndpoint,
    plan: _Plan,
    model_dir: Path,
    target: str,
    opts: SweepOptions,
    price: float | None,
    work: Path,
    say: Callable[[str], None],
) -> SweepRow:
    import time

    from mmelocal.builder.package import package_model
    from mmelocal.builder.payload import payload_from_model

    name = plan.name
    try:
        tarball = package_model(model_dir, work / "tarballs", filename=f"{name}.tar.gz")
        payload = payload_from_model(model_dir)
        say(f"{name}: uploading to {endpoint.s3_url}{target}")
        endpoint.put_file(tarball, target)
    except MmeLocalError as exc:
        return _row(plan, status="failed", reason=f"packaging or upload failed: {exc}")
    try:
        say(f"{name}: first invocation (cold load)")
        t0 = time.perf_counter()
        endpoint.invoke(target, payload)
        load_s = round(time.perf_counter() - t0, 3)
        say(f"{name}: load test ({opts.shape.duration_s:.0f} s)")
        result = endpoint.loadtest(
            (target,),
            payload,
            shape=opts.shape,
            label=name,
            say=lambda line: say(f"{name}: {line}"),
            generators=opts.generators,
        )
        return row_from_loadtest(
            _row(plan, status="ok", load_s=load_s),
            result,
            target_rps=opts.target_rps,
            max_latency_ms=opts.max_latency_ms,
            price_per_hour=price,
        )
    except MmeLocalError as exc:
        return _row(plan, status="failed", reason=f"load test failed: {exc}")
    finally:
        try:
            endpoint.delete([target])
        except MmeLocalError as exc:
            logger.warning("sweep: could not delete %s: %s", target, exc)


__all__ = ["run_endpoint_sweep", "tensorrt_skip_reason"]
