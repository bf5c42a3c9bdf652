"""``validate``'s checks of a config's batching and ``model_warmup`` settings, and of the
warmup files its samples read: what makes Triton refuse the config or fail the load."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mmelocal.builder.findings import Recorder
from mmelocal.builder.tensors import triton_to_numpy

#: where Triton reads ``model_warmup`` ``input_data_file``s (``<model>/warmup/<file>``)
WARMUP_FOLDER = "warmup"


def check_warmup_files(cfg: Any, model_dir: Path, report: Recorder, where: str) -> None:
    """Each ``input_data_file`` must exist and hold at least one request's bytes (Triton
    reads it for every warmup request and fails the load when it is shorter)."""
    for warm in cfg.model_warmup:
        for key, value in warm.inputs.items():
            name = value.input_data_file
            if not name:
                continue
            path = model_dir / WARMUP_FOLDER / name
            label = f"model_warmup {warm.name or '?'}: {key!r} reads {WARMUP_FOLDER}/{name}"
            if not path.is_file():
                report.add(
                    "config.warmup", where, f"{label}, which is missing; Triton fails the load"
                )
                continue
            needed = _byte_size(value.data_type, value.dims)
            size = path.stat().st_size
            if needed is not None and size < needed:
                report.add(
                    "config.warmup",
                    where,
                    f"{label}, which has {size} bytes; its dims {list(value.dims)} need "
                    f"{needed}: Triton fails the load",
                )


def _byte_size(data_type: int, dims: Any) -> int | None:
    """Bytes of one tensor of ``data_type`` and concrete ``dims`` (None: strings, or a dim
    that is not concrete)."""
    from tritonclient.grpc import model_config_pb2 as pb

    name = pb.DataType.Name(data_type)
    if name in ("TYPE_STRING", "TYPE_INVALID") or any(d < 1 for d in dims):
        return None
    itemsize = 2 if name == "TYPE_BF16" else triton_to_numpy(name).itemsize
    return int(itemsize * math.prod(dims))


def check_batching(cfg: Any, report: Recorder, where: str, *, model_name: str = "") -> None:
    """The batching settings Triton refuses (``model_name``: the name Triton knows the
    model by, when the config sets none), then the ``model_warmup`` samples."""
    mbs = cfg.max_batch_size
    if cfg.HasField("dynamic_batching"):
        refused = queue_policy_problem(cfg.dynamic_batching, str(cfg.name) or model_name)
        if refused is not None:
            report.add("config.batching", where, f"{refused}; Triton refuses the config")
        bad = [b for b in cfg.dynamic_batching.preferred_batch_size if b > mbs or b < 1]
        if bad:
            report.add(
                "config.batching",
                where,
                f"preferred_batch_size {bad} outside 1..max_batch_size ({mbs}); Triton "
                "refuses the config",
            )
        elif mbs == 0:
            report.add(
                "config.batching",
                where,
                "dynamic_batching with max_batch_size 0 batches nothing (Triton queues the "
                "requests and runs them one at a time); set max_batch_size to batch them",
                "warning",
            )
    _check_warmup(cfg, report, where)


def queue_policy_problem(batching: Any, name: str) -> str | None:
    """Triton's words for the first rule of ``dynamic_batching``'s priority levels, their
    queue policies and ``preserve_ordering`` that the config breaks (None: none), as core
    ``ValidateModelConfig`` (``src/model_config_utils.cc``, r24.10) checks them in order:
    with ``priority_levels`` set, ``default_priority_level`` and every
    ``priority_queue_policy`` key lie in 1..priority_levels; ``preserve_ordering`` allows
    one level at most and no queue policy that delays (``DELAY`` with a timeout)."""
    from tritonclient.grpc import model_config_pb2 as pb

    levels = int(batching.priority_levels)
    if levels != 0:
        if not 1 <= batching.default_priority_level <= levels:
            return f"default priority level must be in range [1, {levels}] for {name}"
        if any(not 1 <= key <= levels for key in batching.priority_queue_policy):
            return (
                f"priority queue policy must have priority level in range [1, {levels}] for {name}"
            )
    if batching.preserve_ordering:
        if levels > 1:
            return f"Only one priority level is allowed when 'preserve_ordering' is true for {name}"
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        if any(
            p.default_timeout_microseconds != 0 and p.timeout_action == pb.ModelQueuePolicy.DELAY
            for p in policies
        ):
            return (
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' "
                f"is true for {name}"
            )
    return None


def _check_warmup(cfg: Any, report: Recorder, where: str) -> None:
    """Triton makes each warmup sample into requests and normalises them as it does any
    request while loading: a sample that lacks a required input, or whose dims do not fit
    the input's (batch dim excluded when batching), fails the load."""
    mbs = cfg.max_batch_size
    inputs = {t.name: t for t in cfg.input}
    for warm in cfg.model_warmup:
        label = f"model_warmup {warm.name or '?'}"
        if warm.batch_size == 0:
            report.add(
                "config.warmup",
                where,
                f"{label}: batch_size 0 (or unset): Triton skips this sample; set batch_size",
                "warning",
            )
            continue
        if warm.batch_size > max(mbs, 1):
            report.add(
                "config.warmup",
                where,
                f"{label}: batch_size {warm.batch_size} outside 1..{max(mbs, 1)}",
            )
        missing = [n for n, t in inputs.items() if not t.optional and n not in warm.inputs]
        if missing:
            report.add(
                "config.warmup",
                where,
                f"{label}: no data for the required inputs {missing}; Triton fails the load "
                "(a warmup request needs every input a request needs)",
            )
        for key, value in warm.inputs.items():
            if key not in inputs:
                report.add("config.warmup", where, f"{label}: {key!r} is not a config input")
            elif value.data_type != inputs[key].data_type:
                report.add("config.warmup", where, f"{label}: {key!r} data_type differs from input")
            if any(d < 1 for d in value.dims):
                report.add(
                    "config.warmup",
                    where,
                    f"{label}: {key!r} dims {list(value.dims)} must be concrete (> 0)",
                )
            elif key in inputs and not _dims_fit(value.dims, inputs[key].dims):
                batch = " (the batch dim excluded)" if mbs > 0 else ""
                report.add(
                    "config.warmup",
                    where,
                    f"{label}: {key!r} dims {list(value.dims)} do not fit the input's dims "
                    f"{list(inputs[key].dims)}{batch}; Triton fails the load",
                )


def _dims_fit(dims: Any, config_dims: Any) -> bool:
    """Whether concrete ``dims`` match ``config_dims`` (-1 matches any size), as Triton
    checks a request's shape."""
    return len(dims) == len(config_dims) and all(
        c == -1 or c == d for d, c in zip(dims, config_dims, strict=True)
    )


__all__ = ["WARMUP_FOLDER", "check_batching", "check_warmup_files", "queue_policy_problem"]
