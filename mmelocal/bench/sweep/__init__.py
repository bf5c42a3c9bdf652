"""Configuration sweeps: format x dynamic batching x instance count, each load-tested,
sized and priced (:mod:`~mmelocal.bench.sweep.runner`), and the result with its
recommendation (:mod:`~mmelocal.bench.sweep.result`).

The names of :mod:`~mmelocal.bench.sweep.runner` are importable from here.
"""

from mmelocal.bench.sweep.runner import *  # noqa: F403
from mmelocal.bench.sweep.runner import __all__ as __all__
