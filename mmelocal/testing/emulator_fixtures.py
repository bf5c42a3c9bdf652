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
:class:`~mmelocal.emulator.platform.EmulatorConfig` fields) to change the memory budget,
the load wait or the number of instances. Heavy modules are imported when the fixture
runs, not when pytest loads the plugin.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass
class MmeEndpoint:
    """A running emulator: its URL, its store folder and helpers for calling it."""

    url: str
    store: Path
    server: Any
    endpoint_name: str = "local"
    _clients: list[Any] = field(default_factory=list)

    def client(self, **config: Any) -> Any:
        """boto3's ``sagemaker-runtime`` client pointed at the emulator (dummy credentials).

        Keyword arguments go to ``botocore.config.Config`` (e.g. ``retries={"max_attempts": 1}``).
        """
        import boto3
        from botocore.config import Config

        defaults: dict[str, Any] = {"read_timeout": 120, "retries": {"max_attempts": 1}}
        defaults.update(config)
        client = boto3.client(
            "sagemaker-runtime",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="mmelocal",
            aws_secret_access_key="mmelocal",
            config=Config(**defaults),
        )
        self._clients.append(client)
        return client

    def add_tarball(self, target: str, tarball: Path | str) -> Path:
        """Copy a ``model.tar.gz`` into the store as ``target`` (may contain '/')."""
        dest = self.store / target
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tarball, dest)
        return dest

    def invoke(
        self, target: str, body: bytes | dict[str, Any], content_type: str = "application/json"
    ) -> bytes:
        """InvokeEndpoint through boto3; the raw answer body."""
        payload = json.dumps(body).encode() if isinstance(body, dict) else body
        client = self._clients[0] if self._clients else self.client()
        response = client.invoke_endpoint(
            EndpointName=self.endpoint_name,
            TargetModel=target,
            ContentType=content_type,
            Body=payload,
        )
        data: bytes = response["Body"].read()
        return data

    def state(self) -> dict[str, Any]:
        """``GET /emulator/state``: loaded set, footprints, events."""
        with urllib.request.urlopen(f"{self.url}/emulator/state", timeout=30) as response:
            data: dict[str, Any] = json.loads(response.read())
        return data

    def metrics(self) -> dict[str, float]:
        """``GET /metrics`` parsed into ``{"name{labels}": value}``."""
        from mmelocal.emulator.metrics import parse_prometheus

        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as response:
            return parse_prometheus(response.read().decode())


@pytest.fixture
def mme_endpoint_config() -> dict[str, Any]:
    """EmulatorConfig fields for ``mme_endpoint`` (override this fixture to change them)."""
    return {}


@pytest.fixture
def mme_endpoint(
    tmp_path_factory: pytest.TempPathFactory, mme_endpoint_config: dict[str, Any]
) -> Iterator[MmeEndpoint]:
    """A running MME emulator (local tritonserver) on an empty temporary store."""
    from mmelocal.emulator.platform import EmulatorConfig
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
