"""The ``mme_endpoint`` pytest fixture: a running MME emulator on a temporary store, or the
endpoint you deployed (``--mmelocal-endpoint``).

Usage in a test::

    def test_my_model(mme_endpoint):
        mme_endpoint.add_tarball("model-1.tar.gz", Path("dist/model.tar.gz"))
        runtime = mme_endpoint.client()            # boto3 sagemaker-runtime, unchanged
        answer = runtime.invoke_endpoint(
            EndpointName=mme_endpoint.endpoint_name, TargetModel="model-1.tar.gz",
            ContentType="application/json", Body=payload,
        )

Override the fixture ``mme_endpoint_config`` (a dict of
:class:`~mmelocal.emulator.emulator.EmulatorConfig` fields) to change the memory budget,
the load wait or the number of instances, or to run Triton's image
(``{"launcher": "docker", "image": ...}``: its hints say so). With ``--mmelocal-endpoint NAME`` (or
``MMELOCAL_TEST_ENDPOINT``) the same tests run against the deployed endpoint NAME instead
(:class:`~mmelocal.testing.remote_endpoint.RemoteMmeEndpoint`; ``mme_endpoint_config`` is
the emulator's and is not read). Heavy modules are imported when the fixture runs, not
when pytest loads the plugin.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from mmelocal.testing.endpoint import MmeEndpoint

if TYPE_CHECKING:
    from mmelocal.testing.remote_endpoint import DeployedEndpoint, RemoteMmeEndpoint

#: the environment variables that give ``--mmelocal-endpoint`` and ``--mmelocal-region``
#: their defaults
ENDPOINT_ENV = "MMELOCAL_TEST_ENDPOINT"
REGION_ENV = "MMELOCAL_TEST_REGION"


def remote_options(config: pytest.Config) -> tuple[str | None, str | None]:
    """The deployed endpoint's name and region the session tests (None, None: the emulator;
    a region of None: boto3's own)."""
    opts = config.option
    name = getattr(opts, "mmelocal_endpoint", None) or os.environ.get(ENDPOINT_ENV) or None
    region = getattr(opts, "mmelocal_region", None) or os.environ.get(REGION_ENV) or None
    return name, region


@pytest.fixture
def mme_endpoint_config() -> dict[str, Any]:
    """EmulatorConfig fields for ``mme_endpoint`` (override this fixture to change them),
    e.g. ``{"sagemaker_env": {"SAGEMAKER_TRITON_LOG_VERBOSE": "0"}}`` for the model's
    Environment as SageMaker's entrypoint reads it."""
    return {}


#: the session's deployed endpoint (None: the emulator), or the one-line reason it is not
#: usable; looked up once per session, by the first test that asks
_DEPLOYED = pytest.StashKey["DeployedEndpoint | str | None"]()


def _deployed(config: pytest.Config) -> DeployedEndpoint | None:
    """The endpoint ``--mmelocal-endpoint`` names, described once per session (None without
    the option); a wrong name fails each test that asks, with one line."""
    if _DEPLOYED not in config.stash:
        config.stash[_DEPLOYED] = _describe(*remote_options(config))
    found = config.stash[_DEPLOYED]
    if isinstance(found, str):
        pytest.fail(found, pytrace=False)
    return found


def _describe(name: str | None, region: str | None) -> DeployedEndpoint | str | None:
    if name is None:
        return None
    from mmelocal.errors import MmeLocalError
    from mmelocal.testing.remote_endpoint import find_endpoint

    try:
        return find_endpoint(name, region)
    except MmeLocalError as exc:
        return f"--mmelocal-endpoint {name}: {exc}"


@pytest.fixture
def mme_endpoint(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    mme_endpoint_config: dict[str, Any],
) -> Iterator[MmeEndpoint | RemoteMmeEndpoint]:
    """A running MME emulator (local tritonserver) on an empty temporary store; with
    ``--mmelocal-endpoint NAME``, the deployed endpoint NAME (what the test uploaded is
    deleted after it; under pytest-xdist, once every worker has finished:
    :mod:`~mmelocal.testing.worker_uploads`)."""
    deployed = _deployed(request.config)
    if deployed is not None:
        yield from _remote(deployed, request.config)
        return
    from mmelocal.builder.backends import FIXTURE_FLAGS
    from mmelocal.emulator.emulator import Emulator, EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer

    root = tmp_path_factory.mktemp("mme")
    store = root / "store"
    store.mkdir()
    options: dict[str, Any] = {"cache_dir": root / "cache", "memory_budget_bytes": 2 * 1024**3}
    options.update(mme_endpoint_config)
    config = EmulatorConfig(store=str(store), **options)
    # its hints name this fixture's way to Docker (mme_endpoint_config), not the CLI's flags
    with EmulatorServer(Emulator(config, flags=FIXTURE_FLAGS)) as server:
        yield MmeEndpoint(
            url=server.url,
            store=store,
            server=server,
            endpoint_name=config.endpoint_name or "local",
        )


def _remote(deployed: DeployedEndpoint, config: pytest.Config) -> Iterator[RemoteMmeEndpoint]:
    from mmelocal.errors import MmeLocalError
    from mmelocal.testing.remote_endpoint import RemoteMmeEndpoint
    from mmelocal.testing.worker_uploads import worker_ledger

    # under xdist the controller deletes the uploads once every worker is done
    endpoint = RemoteMmeEndpoint(deployed, skip=pytest.skip, ledger=worker_ledger(config))
    yield endpoint
    try:
        endpoint.close()
        return
    except MmeLocalError as exc:
        message = f"deleting what the test uploaded to {deployed.name}'s prefix: {exc}"
    pytest.fail(message, pytrace=False)


__all__ = [
    "ENDPOINT_ENV",
    "REGION_ENV",
    "MmeEndpoint",
    "mme_endpoint",
    "mme_endpoint_config",
    "remote_options",
]
