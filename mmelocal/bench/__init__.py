"""mmelocal.bench: capacity, estimates, load tests, configuration sweeps and reports, one
sub-package per job.

- :mod:`~mmelocal.bench.capacity`  how many copies fit (through the emulator's loading path),
  projected onto other GPU cards, and the cheapest instance type that holds a hot set
- :mod:`~mmelocal.bench.estimate`  the footprint and copies per card estimated from the
  model alone (no GPU), checked against published runs
- :mod:`~mmelocal.bench.loadtest`  Locust load tests (run in a child process), their load
  shapes and per-step statistics
- :mod:`~mmelocal.bench.sweep`     format x dynamic batching x instance count, sized and priced
- :mod:`~mmelocal.bench.endpoint`  the published procedure on a deployed SageMaker endpoint:
  capacity, load test, sweep and the whole benchmark
- :mod:`~mmelocal.bench.report`    HTML page with PNG plots, CSV and JSON

Shared by all of them: :mod:`~mmelocal.bench.results` (result files, JSON with a ``kind``
field), :mod:`~mmelocal.bench.sources` (what the user named: a folder, a tarball or a source
to build), :mod:`~mmelocal.bench.prices` (the price table) and
:mod:`~mmelocal.bench.datafile`; the price table is in ``data/``, the GPU table in
:mod:`mmelocal.facts` (``gpus.yaml``).

The modules' former flat paths (``mmelocal.bench.capacity_result``,
``mmelocal.bench.remote_capacity``, ...) still import: they name the same modules.

Importing this package imports nothing heavy: locust only ever runs in
:mod:`mmelocal.bench.loadtest._locust_worker`'s own process, matplotlib only when plotting.
"""

from __future__ import annotations

from mmelocal._moved import keep_old_paths

#: former flat module -> its home (the modules named like a sub-package, such as
#: ``mmelocal.bench.capacity``, are those sub-packages: they export the same names)
MOVED = {
    "capacity_result": "mmelocal.bench.capacity.result",
    "footprint": "mmelocal.bench.capacity.footprint",
    "projection": "mmelocal.bench.capacity.projection",
    "estimate_model": "mmelocal.bench.estimate.model",
    "estimate_parts": "mmelocal.bench.estimate.parts",
    "activations": "mmelocal.bench.estimate.activations",
    "calibration": "mmelocal.bench.estimate.calibration",
    "published": "mmelocal.bench.estimate.published",
    "remote": "mmelocal.bench.endpoint.remote",
    "remote_capacity": "mmelocal.bench.endpoint.capacity",
    "remote_sweep": "mmelocal.bench.endpoint.sweep",
    "remote_benchmark": "mmelocal.bench.endpoint.benchmark",
    "benchmark_result": "mmelocal.bench.endpoint.result",
    "loadtest_result": "mmelocal.bench.loadtest.result",
    "shape": "mmelocal.bench.loadtest.shape",
    "stepstats": "mmelocal.bench.loadtest.stepstats",
    "sweep_result": "mmelocal.bench.sweep.result",
    "plots": "mmelocal.bench.report.plots",
    "payload": "mmelocal.builder.payload",
}

keep_old_paths(__name__, MOVED)
