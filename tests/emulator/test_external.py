"""The emulator in front of a Triton someone else started (``--launcher external``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from emulator_helpers import output_of, payload

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.runtime.local import LocalLauncher
from mmelocal.runtime.server_config import ServerConfig
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import expected, write_tarball

pytestmark = pytest.mark.triton


@pytest.mark.parametrize("kserve_url", [True, False], ids=["both-urls", "sagemaker-url-alone"])
def test_external_triton(tmp_path: Path, kserve_url: bool) -> None:
    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / "m.tar.gz", scale=3.0)
    (tmp_path / "repo").mkdir()
    with LocalLauncher(ServerConfig(model_repository=tmp_path / "repo", sagemaker=True)) as triton:
        ends = triton.endpoints
        config = EmulatorConfig(
            store=str(store),
            cache_dir=tmp_path / "cache",
            launcher="external",
            # SAGEMAKER_URL[,V2_HTTP_URL]: the front end alone answers 400 to /v2/health
            external_urls=(
                f"{ends.sagemaker_url},{ends.http_url}" if kserve_url else f"{ends.sagemaker_url}",
            ),
            memory_budget_bytes=1024**3,
        )
        with EmulatorServer(config) as server:
            mme = MmeEndpoint(url=server.url, store=store, server=server)
            x, body = payload(rows=2)
            np.testing.assert_array_equal(output_of(mme.invoke("m.tar.gz", body)), expected(x, 3.0))
        assert triton.is_alive()  # the emulator does not stop a server it did not start
