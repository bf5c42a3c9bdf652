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
