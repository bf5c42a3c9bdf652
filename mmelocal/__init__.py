"""mmelocal: build, run and measure Triton model repositories locally before
deploying them to an Amazon SageMaker multi-model endpoint (MME).

Layers (imports only go downwards):

- :mod:`mmelocal.builder`  model -> artifact -> config.pbtxt -> repository -> model.tar.gz
- :mod:`mmelocal.runtime`  a running Triton: launchers, readiness, client, check
- :mod:`mmelocal.emulator` the MME platform in front of Triton
- :mod:`mmelocal.bench`    capacity, load tests, sweeps, reports
- :mod:`mmelocal.testing`  the pytest plugin
- :mod:`mmelocal.cli`      the ``mmelocal`` command
"""

__version__ = "0.1.0"
