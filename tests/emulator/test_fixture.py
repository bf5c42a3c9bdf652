"""The user-facing ``mme_endpoint`` fixture (from the mmelocal pytest plugin)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from emulator_helpers import output_of, payload

from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton


@pytest.fixture
def mme_endpoint_config() -> dict[str, Any]:
    return {"endpoint_name": "fixture-ep", "memory_budget_bytes": 512 * 1024**2}


def test_mme_endpoint_fixture(mme_endpoint: MmeEndpoint, tmp_path: Path) -> None:
    mme_endpoint.add_tarball("team/m.tar.gz", write_tarball(tmp_path / "m.tar.gz", scale=7.0))
    x, body = payload(rows=2)
    np.testing.assert_array_equal(
        output_of(mme_endpoint.invoke("team/m.tar.gz", body)), expected(x, 7.0)
    )
    assert mme_endpoint.endpoint_name == "fixture-ep"
    assert mme_endpoint.state()["event_counts"]["load"] == 1
    assert any(k.startswith("Invocations{") for k in mme_endpoint.metrics())


def test_curl_style_expect_continue_and_chunked_body(
    mme_endpoint: MmeEndpoint, tmp_path: Path
) -> None:
    import http.client

    mme_endpoint.add_tarball("m.tar.gz", write_tarball(tmp_path / "m.tar.gz", scale=2.0))
    x, body = payload(rows=1)
    host, port = mme_endpoint.url.split("://")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("POST", "/endpoints/fixture-ep/invocations")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("X-Amzn-SageMaker-Target-Model", "m.tar.gz")
    conn.putheader("Expect", "100-continue")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    half = len(body) // 2
    for chunk in (body[:half], body[half:]):
        conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    conn.send(b"0\r\n\r\n")
    response = conn.getresponse()
    assert response.status == 200
    np.testing.assert_array_equal(output_of(response.read()), expected(x, 2.0))
    conn.close()
