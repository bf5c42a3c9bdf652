"""A model's footprint in two parts: its own (marginal) memory, and the shared runtime.

Loading a model into Triton adds two kinds of memory:

* the **marginal** footprint, what this copy alone holds: the unique memory (USS on the host,
  the driver's per-process figure on a GPU) of the processes the load started (the
  Python-backend stub), plus the change in the server process's own memory (weights of a
  model the server runs itself);
* the **shared runtime** the first model of a framework brings in (libtorch, onnxruntime,
  libpython): pages every later copy maps too, counted once by PSS. It is what the first
  copy added beyond a later copy's marginal part (the first copy's own figure holds the
  runtime too while its stub is the only process mapping it).

With both, the count follows: ``floor((threshold x total - baseline - shared) / marginal)``.
"""

from __future__ import annotations

from mmelocal.builder.backends import KIND_RUNTIMES
from mmelocal.runtime.memory import marginal_bytes

FRAMEWORK_RUNTIMES = KIND_RUNTIMES


def runtime_name(model_format: str) -> str:
    """What to call the shared runtime of ``model_format`` (``torch`` for TorchScript)."""
    return FRAMEWORK_RUNTIMES.get(model_format, model_format or "framework")


__all__ = ["FRAMEWORK_RUNTIMES", "marginal_bytes", "runtime_name"]
