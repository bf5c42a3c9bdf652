"""A running MME emulator seen from its callers: URL, store and boto3 helpers.

Used by the ``mme_endpoint`` pytest fixture and by ``mmelocal demo``; this module imports
no test framework, so the CLI runs where pytest is not installed.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.facts.aws import LOCAL_REGION, TESTING, aws_client, new_session


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

        session = new_session(
            region_name=LOCAL_REGION,
            aws_access_key_id="mmelocal",
            aws_secret_access_key="mmelocal",
        )
        client = aws_client(
            "sagemaker-runtime", TESTING, session=session, endpoint_url=self.url, **config
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
        client = self._clients[0] if self._clients else self.client()
        return invoke_body(client, self.endpoint_name, target, body, content_type)

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


def invoke_body(
    client: Any,
    endpoint_name: str,
    target: str,
    body: bytes | dict[str, Any],
    content_type: str = "application/json",
) -> bytes:
    """InvokeEndpoint of ``target`` with ``client`` (a dict body is sent as JSON); the raw
    answer body."""
    payload = json.dumps(body).encode() if isinstance(body, dict) else body
    response = client.invoke_endpoint(
        EndpointName=endpoint_name, TargetModel=target, ContentType=content_type, Body=payload
    )
    data: bytes = response["Body"].read()
    return data


__all__ = ["MmeEndpoint", "invoke_body"]
