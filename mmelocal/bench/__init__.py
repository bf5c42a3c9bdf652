"""mmelocal.bench: capacity, load tests, configuration sweeps and reports.

- :mod:`~mmelocal.bench.capacity`    how many copies fit (through the emulator's loading path)
- :mod:`~mmelocal.bench.projection`  one measurement projected onto other GPU cards
- :mod:`~mmelocal.bench.loadtest`    Locust load tests, run in a child process
- :mod:`~mmelocal.bench.shape`       load shapes (the stepped default, YAML/JSON files)
- :mod:`~mmelocal.bench.sweep`       format x dynamic batching x instance count, sized and priced
- :mod:`~mmelocal.bench.report`      HTML page with PNG plots, CSV and JSON
- :mod:`~mmelocal.bench.results`     result files (JSON with a ``kind`` field)
- :mod:`~mmelocal.bench.remote`      a deployed endpoint as a bench target (its probe, objects)
- :mod:`~mmelocal.bench.remote_capacity`   the published max-models loop on that endpoint
- :mod:`~mmelocal.bench.remote_sweep`      the sweep's variants as TargetModels of it
- :mod:`~mmelocal.bench.remote_benchmark`  deploy -> capacity -> load test -> sweep -> undeploy
- :mod:`~mmelocal.bench.benchmark_result`  one framework's run and the comparison table

Importing this package imports nothing heavy: locust only ever runs in
:mod:`mmelocal.bench._locust_worker`'s own process, matplotlib only when plotting.
"""
