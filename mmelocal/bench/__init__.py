"""mmelocal.bench: capacity, load tests, configuration sweeps and reports.

- :mod:`~mmelocal.bench.capacity`    how many copies fit (through the emulator's loading path)
- :mod:`~mmelocal.bench.projection`  one measurement projected onto other GPU cards
- :mod:`~mmelocal.bench.loadtest`    Locust load tests, run in a child process
- :mod:`~mmelocal.bench.shape`       load shapes (the stepped default, YAML/JSON files)
- :mod:`~mmelocal.bench.sweep`       format x dynamic batching x instance count, sized and priced
- :mod:`~mmelocal.bench.report`      HTML page with PNG plots, CSV and JSON
- :mod:`~mmelocal.bench.results`     result files (JSON with a ``kind`` field)

Importing this package imports nothing heavy: locust only ever runs in
:mod:`mmelocal.bench._locust_worker`'s own process, matplotlib only when plotting.
"""
