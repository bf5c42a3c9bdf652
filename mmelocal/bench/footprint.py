"""A model's footprint in two parts: its own (marginal) memory, and the shared runtime.

Loading a model into Triton adds two kinds of memory:

* the **marginal** footprint, what this copy alone holds: the unique memory (USS on the host,
  the driver's per-process figure on a GPU) of the processes the load started (the
  Python-backend stub), plus the change in the server process's own memory (weights of a
  model the server runs itself);
* the **shared runtime** the first model of a framework brings in (libtorch, onnxruntime,
  libpython): pages every later copy maps too, counted once by PSS. It is what the first
  copy added beyond its marginal part.

With both, the count follows: ``floor((threshold x total - baseline - shared) / marginal)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

FRAMEWORK_RUNTIMES = {
    "torchscript": "torch",
    "onnx": "onnxruntime",
    "tensorrt": "TensorRT",
    "python": "Python",
}


class TreeReading(Protocol):
    """What a split needs of a reading (a probe's ``MemoryReading`` provides it)."""

    server_pid: int | None
    per_process_bytes: Mapping[int, int] | None


def marginal_bytes(before: TreeReading | object, after: TreeReading | object) -> int | None:
    """Own memory of what was loaded between ``before`` and ``after``.

    The per-process memory of the processes new in ``after`` plus the change of the server
    process's own; None when a reading has no per-process figures (a driver that does not
    report them, a probe that has none) or the server changed (a restart).
    """
    old = getattr(before, "per_process_bytes", None)
    new = getattr(after, "per_process_bytes", None)
    server = getattr(after, "server_pid", None)
    if (
        old is None
        or new is None
        or server is None
        or getattr(before, "server_pid", None) != server
    ):
        return None
    started = sum(used for pid, used in new.items() if pid not in old and pid != server)
    return started + new.get(server, 0) - old.get(server, 0)


def runtime_name(model_format: str) -> str:
    """What to call the shared runtime of ``model_format`` (``torch`` for TorchScript)."""
    return FRAMEWORK_RUNTIMES.get(model_format, model_format or "framework")


__all__ = ["FRAMEWORK_RUNTIMES", "marginal_bytes", "runtime_name"]
