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

TensorRT variants need an engine built for the endpoint's GPU: without a local NVIDIA GPU
they are listed as skipped (build the plan on a machine with that GPU and pass the tarball).

The endpoint's probe (``metrics.tar.gz``, placed as ``capacity --endpoint`` places it) says
what serves it: an endpoint whose probe reads host memory (the local AWS, on a CPU) under a
GPU instance type gets the CPU sweep's result, ratios and no instance count or cost.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from mmelocal.bench.endpoint.remote import RemoteEndpoint
from mmelocal.bench.sweep.result import SweepResult, SweepRow, cpu_summary, row_from_loadtest
from mmelocal.bench.sweep.runner import SweepOptions, _Plan, _row, sweep_result, sweep_rows
from mmelocal.errors import MmeLocalError

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
    from dataclasses import replace

    from mmelocal.bench.capacity.projection import is_gpu_instance_type
    from mmelocal.bench.prices import load_prices
    from mmelocal.runtime.memory import gpu_count

    opts = options or SweepOptions()
    say = progress or (lambda message: None)
    info = endpoint.info
    prices = load_prices(opts.prices_file)
    price = prices.price_for(info.instance_type)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    run = f"mmelocal-sweep-{uuid.uuid4().hex[:8]}/"
    with tempfile.TemporaryDirectory(prefix="mmelocal-remote-sweep-probe-") as tmp:
        on_cpu = endpoint.ensure_probe(Path(tmp)).kind == "host"
    # CPU throughput says nothing about how many GPU instances a load needs: ratios only
    relative_only = on_cpu and is_gpu_instance_type(info.instance_type)

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
        gpu_count() > 0,
        say,
        measure=measure,
        prefix="mmelocal-remote-sweep-",
        skipped_reason=_TENSORRT_SKIPPED,
    )
    where = (
        f" Throughput was measured on one {info.instance_type} instance of endpoint {info.name}."
    )
    machine = f"endpoint {info.name}: 1 x {info.instance_type} (SageMaker MME)"
    recommendation = None
    if relative_only:
        ordered = tuple(replace(r, instances_needed=None, cost_per_hour=None) for r in ordered)
        recommendation = cpu_summary(ordered, instance_type=info.instance_type)
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
        recommendation=recommendation,
        relative_only=relative_only,
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


__all__ = ["run_endpoint_sweep"]
