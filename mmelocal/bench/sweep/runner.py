"""Configuration sweep: format x dynamic batching x instance count, each served and load-tested.

For one model, every combination (named ``pt-base``, ``pt-db``, ``pt-ig``, ``pt-ig-db``,
``onnx-...``, ``trt-...``) is derived from one build per format (same artifact, only
``config.pbtxt`` differs), loaded on one local Triton (:class:`~mmelocal.runtime.local.
LocalLauncher`, explicit model control) and load-tested the same way as ``mmelocal loadtest``
through ``/v2/models/NAME/infer``. Then :mod:`~mmelocal.bench.sweep.result` sizes each
configuration against the target rate and latency limit and prices it from the price table.

TensorRT needs an NVIDIA GPU: without one its rows are listed as skipped with the reason and
never estimated. A configuration that fails to build or load is listed as failed.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmelocal.bench.loadtest.shape import LoadShape, Stage
from mmelocal.bench.loadtest.workers import LoadGenerators
from mmelocal.bench.sources import check_format, is_prebuilt
from mmelocal.bench.sweep.result import (
    SweepResult,
    SweepRow,
    config_name,
    cpu_summary,
    recommend,
    row_from_loadtest,
)
from mmelocal.builder.backends import FORMAT_SHORT_NAMES
from mmelocal.errors import MmeLocalError, UserInputError

if TYPE_CHECKING:
    from mmelocal.bench.capacity.projection import GpuSpec
    from mmelocal.bench.prices import PriceTable

logger = logging.getLogger(__name__)

_PLATFORM_SHORT = {"pytorch_libtorch": "pt", "onnxruntime_onnx": "onnx", "tensorrt_plan": "trt"}


def users_shape(users: Sequence[int], *, step_s: float = 10.0) -> LoadShape:
    """One stage per user count, each held ``step_s`` seconds (counts must increase: the
    load test reports the highest count before the first failure)."""
    if not users:
        raise UserInputError("users must list at least one user count, e.g. 5,10,20")
    if any(b <= a for a, b in itertools.pairwise(users)):
        listed = ",".join(str(u) for u in users)
        ordered = ",".join(str(u) for u in sorted(set(users)))
        raise UserInputError(f"users must increase step by step, got {listed}; e.g. {ordered}")
    return LoadShape(
        stages=tuple(Stage(users=u, spawn_rate=float(max(u, 1)), duration_s=step_s) for u in users)
    )


@dataclass(frozen=True, kw_only=True)
class SweepOptions:
    """What to sweep and how to judge it (rates in requests/s, latency in ms)."""

    formats: tuple[str, ...] = ("torchscript",)
    dynamic_batching: tuple[bool, ...] = (False, True)
    instances: tuple[int, ...] = (1, 2)
    shape: LoadShape = field(default_factory=lambda: users_shape((5, 10, 20, 40)))
    target_rps: float = 500.0
    max_latency_ms: float = 500.0
    instance_type: str = "ml.g4dn.xlarge"
    prices_file: Path | None = None
    #: the card table (default: the packaged gpus.yaml): which card ``instance_type`` carries
    gpus_file: Path | None = None
    #: the GPUs to sweep on, by nvidia-smi's number (default: those CUDA_VISIBLE_DEVICES
    #: names, else every GPU); the server is started on exactly these
    gpu_indices: tuple[int, ...] | None = None
    tritonserver: Path | None = None
    workdir: Path | None = None
    verify: bool = True
    generators: LoadGenerators = field(default_factory=LoadGenerators)

    def __post_init__(self) -> None:
        object.__setattr__(self, "formats", tuple(check_format(f) for f in self.formats))
        if not self.formats or not self.dynamic_batching or not self.instances:
            raise UserInputError("formats, dynamic_batching and instances must not be empty")
        for count in self.instances:
            if not isinstance(count, int) or count < 1:
                raise UserInputError(f"instances must be ints >= 1, got {count!r}")
        if not self.target_rps > 0:
            raise UserInputError(f"target_rps must be > 0 requests/s, got {self.target_rps}")
        if not self.max_latency_ms > 0:
            raise UserInputError(f"max_latency_ms must be > 0, got {self.max_latency_ms}")
        if self.gpu_indices is not None:
            chosen = tuple(self.gpu_indices)
            object.__setattr__(self, "gpu_indices", chosen)
            if not chosen or any(not isinstance(i, int) or i < 0 for i in chosen):
                raise UserInputError(
                    f"gpu_indices must be GPU numbers >= 0 (nvidia-smi's), got {list(chosen)}"
                )


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """A configuration to measure: the first fields of its :class:`SweepRow`."""

    name: str
    model_format: str
    dynamic_batching: bool
    instance_count: int


def run_sweep(
    source: str | Path,
    *,
    options: SweepOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> SweepResult:
    """Build, serve and load-test every configuration of ``source``; see the module doc."""
    from mmelocal.bench.capacity.projection import is_gpu_instance_type, load_gpus
    from mmelocal.bench.prices import load_prices
    from mmelocal.runtime.visible_gpus import server_gpus

    opts = options or SweepOptions()
    say = progress or (lambda message: None)
    prices = load_prices(opts.prices_file)
    price = prices.price_for(opts.instance_type)
    used = server_gpus(chosen=opts.gpu_indices)
    gpu = bool(used.names)
    cards = load_gpus(opts.gpus_file)
    if gpu:
        check_cards(
            list(zip(used.names, used.total_bytes, strict=True)),
            opts.instance_type,
            cards,
            origin=used.origin,
        )
    # CPU throughput says nothing about how many GPU instances a load needs: ratios only
    # (a GPU type by the user's card table too, as `sweep --endpoint` reads it)
    relative_only = not gpu and is_gpu_instance_type(opts.instance_type, cards)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    ordered = sweep_rows(
        source,
        opts,
        gpu,
        say,
        measure=lambda variants, work: _serve_and_measure(
            variants, opts, price, gpu, work, say, env=used.env
        ),
        prefix="mmelocal-sweep-",
    )
    if relative_only:
        where = (
            " Throughput was measured on this machine's CPU: instance counts and costs for a "
            "GPU instance are not derived from it."
        )
    else:
        where = (
            " Throughput was measured on this machine, where one Triton server stands for one"
            " instance."
        )
    return sweep_result(
        source,
        ordered,
        opts,
        prices,
        opts.instance_type,
        where=where,
        machine=_machine(used.describe() if gpu or used.env else None),
        started_at=started_at,
        relative_only=relative_only,
    )


def check_cards(
    local: Sequence[tuple[str, int]],
    instance_type: str,
    gpus: Sequence[GpuSpec],
    *,
    origin: str = "",
) -> None:
    """Refuse to size ``instance_type`` from the GPUs the sweep's server would use (``local``:
    NVML's name and memory total of each, chosen as ``origin`` says) unless they are its
    cards, as many as it has (``gpus``: the card table, matched by
    :func:`~mmelocal.bench.capacity.projection.card_named`): a rate measured on one card is
    never shown as another card's. With more of its card here than it has, the refusal says
    how to choose them."""
    from mmelocal.bench.capacity.projection import card_named, card_of_instance, describe_reading

    cards = [card_named(name, gpus, total_bytes=total) for name, total in local]
    seen = Counter((describe_reading(*reading), card.name if card else "not in the card table")
                   for reading, card in zip(local, cards, strict=True))  # fmt: skip
    here = ", ".join(f"{n} x {name} ({card})" for (name, card), n in seen.items())
    wanted = card_of_instance(instance_type, gpus)
    same_card = wanted is not None and all(
        c is not None and c.name == wanted[0].name for c in cards
    )
    if same_card and wanted is not None and len(cards) == wanted[1]:
        return
    same = sorted(
        t
        for g in gpus
        for t, n in g.instances.items()
        if cards and cards[0] is not None and g.name == cards[0].name and n == len(cards)
    )
    needs = f"{wanted[1]} x {wanted[0].name}" if wanted else "no card in the card table"
    choices = []
    if wanted is not None and same_card and len(cards) > wanted[1]:
        first = ",".join(str(i) for i in range(wanted[1]))
        choices.append(
            f"run it on {wanted[1]} of them (--gpu {first}, nvidia-smi's numbers, or "
            f"CUDA_VISIBLE_DEVICES={first})"
        )
    choices += [f"size one of {', '.join(same)} (--instance-type)"] if same else []
    choices += [
        "give a card table that lists this card with the instance type (--gpus FILE)",
        f"sweep a deployed {instance_type} endpoint (mmelocal sweep --endpoint NAME)",
    ]
    where = f" ({origin})" if origin else ""
    raise UserInputError(
        f"the GPUs this sweep would run on{where}: {here}; {instance_type} has {needs}: a "
        "sweep here would show this machine's throughput as the instance's. Instead: "
        + "; or ".join(choices)
    )


#: the measured rows of the variants built under ``work`` (plan name -> row)
Measure = Callable[[list[tuple[_Plan, Path]], Path], dict[str, SweepRow]]


def sweep_rows(
    source: str | Path,
    opts: SweepOptions,
    gpu: bool,
    say: Callable[[str], None],
    *,
    measure: Measure,
    prefix: str,
    skipped_reason: str | None = None,
) -> tuple[SweepRow, ...]:
    """Every variant's row, in the order of ``opts``: each format built once (in a temporary
    folder named ``prefix...``), its variants derived, and those built handed to ``measure``
    (the others are listed as failed, or as skipped: TensorRT without a GPU, with
    ``skipped_reason`` when given). Variants are derived under ``work / "variants"``."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=opts.workdir) as tmp:
        work = Path(tmp)
        rows: dict[str, SweepRow] = {}
        variants: list[tuple[_Plan, Path]] = []
        order: list[str] = []
        for fmt in ("prebuilt",) if is_prebuilt(source) else opts.formats:
            plans, base_dir, problem = _build_format(source, fmt, opts, work, gpu, say)
            order += [plan.name for plan in plans]
            if problem is None and base_dir is not None:
                variants += [(plan, _derive(base_dir, plan, work / "variants")) for plan in plans]
                continue
            skipped = fmt == "tensorrt" and not gpu
            status = "skipped" if skipped else "failed"
            reason = str(skipped_reason if skipped and skipped_reason else problem)
            rows.update({plan.name: _row(plan, status=status, reason=reason) for plan in plans})
        if variants:
            rows.update(measure(variants, work))
    return tuple(rows[name] for name in order)


def sweep_result(
    source: str | Path,
    rows: tuple[SweepRow, ...],
    opts: SweepOptions,
    prices: PriceTable,
    instance_type: str,
    *,
    where: str,
    machine: str,
    started_at: str,
    relative_only: bool = False,
) -> SweepResult:
    """The result of a sweep of ``source`` on ``instance_type``: the targets of ``opts``, the
    price note of ``prices`` followed by ``where`` (what the throughput was measured on), and
    :func:`~mmelocal.bench.sweep.result.recommend`'s recommendation for those targets, priced
    for ``instance_type``. With ``relative_only`` (a CPU's throughput, for a GPU instance
    type: it says nothing about how many GPU instances a load needs) the rows keep their
    ratios but no instance count or cost, and the recommendation is
    :func:`~mmelocal.bench.sweep.result.cpu_summary`'s."""
    if relative_only:
        rows = tuple(replace(r, instances_needed=None, cost_per_hour=None) for r in rows)
        recommendation = cpu_summary(rows, instance_type=instance_type)
    else:
        recommendation = recommend(
            rows,
            target_rps=opts.target_rps,
            max_latency_ms=opts.max_latency_ms,
            instance_type=instance_type,
            currency=prices.currency,
            price_origin=prices.origin,
        )
    return SweepResult(
        source=str(source),
        instance_type=instance_type,
        target_rps=opts.target_rps,
        max_latency_ms=opts.max_latency_ms,
        rows=rows,
        recommendation=recommendation,
        relative_only=relative_only,
        price_note=prices.note(instance_type) + where,
        currency=prices.currency,
        machine=machine,
        started_at=started_at,
    )


def _plans(short: str, fmt: str, opts: SweepOptions) -> list[_Plan]:
    return [
        _Plan(
            name=config_name(short, dynamic_batching=db, instance_count=n),
            model_format=fmt,
            dynamic_batching=db,
            instance_count=n,
        )
        for n in opts.instances
        for db in opts.dynamic_batching
    ]


def _build_format(
    source: str | Path,
    fmt: str,
    opts: SweepOptions,
    work: Path,
    gpu: bool,
    say: Callable[[str], None],
) -> tuple[list[_Plan], Path | None, str | None]:
    """(plans, built model folder, problem) for one format."""
    from mmelocal.bench.sources import resolve_model

    if fmt == "prebuilt":
        model_dir = _unpack(Path(source), work / "prebuilt")
        short = _short_of(model_dir)
        return _plans(short, short, opts), model_dir, None
    plans = _plans(FORMAT_SHORT_NAMES[fmt], fmt, opts)
    if fmt == "tensorrt" and not gpu:
        return plans, None, "TensorRT needs an NVIDIA GPU; none found"
    say(f"building {source} as {fmt}")
    try:
        model = resolve_model(
            source,
            workdir=work / fmt,
            model_format=fmt,
            name=f"{FORMAT_SHORT_NAMES[fmt]}-source",
            overrides={"dynamic_batching": True, "instance_count": 1},
            verify=opts.verify,
        )
    except MmeLocalError as exc:
        logger.warning("sweep: building %s as %s failed: %s", source, fmt, exc)
        return plans, None, f"build failed: {exc}"
    return plans, model.path, None


def _unpack(path: Path, dest: Path) -> Path:
    if path.is_dir():
        return path
    from mmelocal.builder.mme_layout import read_layout
    from mmelocal.builder.tarball import safe_extract

    layout = read_layout(safe_extract(path, dest))  # the folder SageMaker's Triton serves
    layout.raise_for_errors(str(path))
    if layout.steps or layout.served_dir is None:
        raise UserInputError(f"{path}: a sweep needs one model, not an ensemble and its steps")
    return layout.served_dir


def _short_of(model_dir: Path) -> str:
    from mmelocal.builder.model_config import read_config

    cfg = read_config(model_dir / "config.pbtxt")
    return _PLATFORM_SHORT.get(str(cfg.platform) or str(cfg.backend), "model")


def _derive(base_dir: Path, plan: _Plan, out_root: Path) -> Path:
    """A copy of ``base_dir`` (artifact hard-linked) named ``plan.name`` with its config."""
    from mmelocal.builder.model_config import read_config, write_config

    target = out_root / plan.name
    shutil.copytree(base_dir, target, copy_function=_link_or_copy)
    (target / "config.pbtxt").unlink()
    cfg = read_config(base_dir / "config.pbtxt")
    cfg.name = plan.name
    if plan.dynamic_batching:
        cfg.dynamic_batching.SetInParent()
    else:
        cfg.ClearField("dynamic_batching")
    if not cfg.instance_group:
        cfg.instance_group.add()
    for group in cfg.instance_group:
        group.count = plan.instance_count
    write_config(cfg, target / "config.pbtxt")
    return target


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _row(plan: _Plan, *, status: str, reason: str = "", load_s: float | None = None) -> SweepRow:
    return SweepRow(**asdict(plan), status=status, reason=reason, load_s=load_s)


def _serve_and_measure(
    variants: list[tuple[_Plan, Path]],
    opts: SweepOptions,
    price: float | None,
    gpu: bool,
    work: Path,
    say: Callable[[str], None],
    *,
    env: Mapping[str, str],
) -> dict[str, SweepRow]:
    from mmelocal.bench.loadtest.runner import LoadTestConfig, run_loadtest
    from mmelocal.builder.payload import payload_from_model
    from mmelocal.runtime import python_copies
    from mmelocal.runtime.client import TritonClient
    from mmelocal.runtime.local import LocalLauncher
    from mmelocal.runtime.server_config import ServerConfig

    served = work / "served"
    served.mkdir()
    rows: dict[str, SweepRow] = {}
    # the GPUs checked against the instance type, and no others
    config = ServerConfig(model_repository=served, model_control_mode="explicit", env=env)
    with LocalLauncher(
        config, tritonserver=opts.tritonserver, log_path=work / "triton.log"
    ) as triton:
        backends = python_copies.available_backends(triton.config.backend_directory)
        client = TritonClient.for_launcher(triton)
        for plan, model_dir in variants:
            say(f"{plan.name}: loading")
            try:
                python_copies.prepare_model_for_server(
                    model_dir, served, backends_available=backends, gpu=gpu
                )
                load_s = client.load(plan.name)
            except MmeLocalError as exc:
                rows[plan.name] = _row(plan, status="failed", reason=f"load failed: {exc}")
                continue
            try:
                say(f"{plan.name}: load test ({opts.shape.duration_s:.0f} s)")
                before = _success_stats(client, plan.name)
                result = run_loadtest(
                    LoadTestConfig(
                        endpoint=triton.endpoints.http_url,
                        mode="triton-v2",
                        targets=(plan.name,),
                        payload=payload_from_model(model_dir),
                        shape=opts.shape,
                        prewarm=True,
                        generators=opts.generators,
                    ),
                    label=plan.name,
                )
                after = _success_stats(client, plan.name)
                count, ns = after[0] - before[0], after[1] - before[1]
                rows[plan.name] = row_from_loadtest(
                    _row(plan, status="ok", load_s=load_s),
                    result,
                    model_latency_ms=ns / count / 1e6 if count > 0 else None,
                    target_rps=opts.target_rps,
                    max_latency_ms=opts.max_latency_ms,
                    price_per_hour=price,
                )
            except MmeLocalError as exc:
                rows[plan.name] = _row(plan, status="failed", reason=f"load test failed: {exc}")
            finally:
                try:
                    client.unload(plan.name)
                except MmeLocalError as exc:
                    logger.warning("sweep: could not unload %s: %s", plan.name, exc)
        client.close()
    return rows


def _success_stats(client: Any, name: str) -> tuple[int, int]:
    """Triton's cumulative (successful requests, nanoseconds inside the server) for ``name``."""
    try:
        stats = client.statistics(name)
        success = stats["model_stats"][0]["inference_stats"]["success"]
        return int(success.get("count", 0)), int(success.get("ns", 0))
    except (MmeLocalError, KeyError, IndexError, TypeError, ValueError) as exc:
        logger.warning("sweep: no Triton statistics for %s: %s", name, exc)
        return 0, 0


def _machine(gpus: str | None) -> str:
    """This machine in a line; ``gpus``: the GPUs the sweep ran on (None: none)."""
    import platform

    return f"{platform.machine()}, {os.cpu_count()} CPU(s), " + (
        gpus if gpus is not None else "no GPU (CPU, Python backend)"
    )


__all__ = ["SweepOptions", "check_cards", "run_sweep", "users_shape"]
