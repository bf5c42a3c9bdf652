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


def check_batching(cfg: Any, report: Recorder, where: str) -> None:
    mbs = cfg.max_batch_size
    if cfg.HasField("dynamic_batching"):
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


__all__ = ["WARMUP_FOLDER", "check_batching", "check_warmup_files"]
