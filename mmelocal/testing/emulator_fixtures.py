"""The ``mme_endpoint`` pytest fixture: a running MME emulator on a temporary store.

Usage in a test::

    def test_my_model(mme_endpoint):
        mme_endpoint.add_tarball("model-1.tar.gz", Path("dist/model.tar.gz"))
        runtime = mme_endpoint.client()            # boto3 sagemaker-runtime, unchanged
        answer = runtime.invoke_endpoint(
            EndpointName="local", TargetModel="model-1.tar.gz",
            ContentType="application/json", Body=payload,
        )

Override the fixture ``mme_endpoint_config`` (a dict of
:class:`~mmelocal.emulator.emulator.EmulatorConfig` fields) to change the memory budget,
the load wait or the number of instances. Heavy modules are imported when the fixture
runs, not when pytest loads the plugin.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mmelocal.testing.endpoint import MmeEndpoint


@pytest.fixture
def mme_endpoint_config() -> dict[str, Any]:
    """EmulatorConfig fields for ``mme_endpoint`` (override this fixture to change them),
    e.g. ``{"sagemaker_env": {"SAGEMAKER_TRITON_LOG_VERBOSE": "0"}}`` for the model's
    Environment as SageMaker's entrypoint reads it."""
    return {}


@pytest.fixture
def mme_endpoint(
    tmp_path_factory: pytest.TempPathFactory, mme_endpoint_config: dict[str, Any]
) -> Iterator[MmeEndpoint]:
    """A running MME emulator (local tritonserver) on an empty temporary store."""
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer

    root = tmp_path_factory.mktemp("mme")
    store = root / "store"
    store.mkdir()
    options: dict[str, Any] = {"cache_dir": root / "cache", "memory_budget_bytes": 2 * 1024**3}
    options.update(mme_endpoint_config)
    config = EmulatorConfig(store=str(store), **options)
    with EmulatorServer(config) as server:
        yield MmeEndpoint(
            url=server.url,
            store=store,
            server=server,
            endpoint_name=config.endpoint_name or "local",
        )


__all__ = ["MmeEndpoint", "mme_endpoint", "mme_endpoint_config"]
