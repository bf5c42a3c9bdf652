"""Load tests: Locust in a child process (:mod:`~mmelocal.bench.loadtest.runner`, which
starts :mod:`~mmelocal.bench.loadtest._locust_worker`, or Locust's distributed mode:
:mod:`~mmelocal.bench.loadtest.workers` and :mod:`~mmelocal.bench.loadtest._locust_dist`),
the load shapes
(:mod:`~mmelocal.bench.loadtest.shape`), per-step statistics
(:mod:`~mmelocal.bench.loadtest.stepstats`) and the result
(:mod:`~mmelocal.bench.loadtest.result`).

The names of :mod:`~mmelocal.bench.loadtest.runner` are importable from here.
"""

from mmelocal.bench.loadtest.runner import *  # noqa: F403
from mmelocal.bench.loadtest.runner import __all__ as __all__
