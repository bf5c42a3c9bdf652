"""A model slower than the invocation limit: ModelError (504 inside), promptly, emulator up."""

from __future__ import annotations

import tarfile
import time
from pathlib import Path

import pytest
from emulator_helpers import output_of, payload

from mmelocal.emulator.emulator import EmulatorConfig
from mmelocal.emulator.server import EmulatorServer
from mmelocal.testing.endpoint import MmeEndpoint
from mmelocal.testing.tiny_model import MODEL_PY, expected, write_model, write_tarball

pytestmark = pytest.mark.triton

#: the invocation limit the test sets, and the model's time per execution (far above it)
LIMIT_S = 2.0
SLOW_S = 20.0

#: the model takes SLOW_S per execution, unless the test releases it sooner (a file
#: appears): Triton's stop waits for executions in flight
SLOW_EXECUTE = """    def execute(self, requests):
        import os
        import time

        until = time.monotonic() + {slow_s}
        while time.monotonic() < until and not os.path.exists({release!r}):
            time.sleep(0.05)
"""


def slow_py(release: Path) -> str:
    """The tiny model, SLOW_S per execution or until ``release`` exists."""
    return MODEL_PY.replace(
        "    def execute(self, requests):\n",
        SLOW_EXECUTE.format(release=str(release), slow_s=SLOW_S),
    )


def test_an_answer_later_than_the_limit_is_a_model_error(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    model = write_model(tmp_path / "work", name="slow", scale=2.0)
    release = tmp_path / "release"
    (model / "1" / "model.py").write_text(slow_py(release))
    with tarfile.open(store / "slow.tar.gz", "w:gz") as tar:
        tar.add(model, arcname="slow")
    write_tarball(store / "fast.tar.gz", scale=3.0)
    config = EmulatorConfig(
        store=str(store), cache_dir=tmp_path / "cache", invoke_timeout_s=LIMIT_S
    )
    with EmulatorServer(config) as server:
        try:
            mme = MmeEndpoint(url=server.url, store=store, server=server)
            client = mme.client()
            x, body = payload(rows=1)
            mme.invoke("fast.tar.gz", body)  # Triton up and answering

            def call_slow() -> None:
                client.invoke_endpoint(
                    EndpointName="local",
                    TargetModel="slow.tar.gz",
                    ContentType="application/json",
                    Body=body,
                )

            with pytest.raises(client.exceptions.ModelError) as info:
                call_slow()  # cold: loaded, then timed out
            t0 = time.monotonic()
            with pytest.raises(client.exceptions.ModelError) as warm:
                call_slow()
            # the limit answered: the model itself cannot answer before SLOW_S
            assert time.monotonic() - t0 < SLOW_S
            for error in (info.value, warm.value):
                assert error.response["OriginalStatusCode"] == 504
                assert f"did not answer within {LIMIT_S:g}s" in error.response["OriginalMessage"]
            assert (output_of(mme.invoke("fast.tar.gz", body)) == expected(x, 3.0)).all()
        finally:
            release.touch()  # the executions in flight end: the stop need not wait SLOW_S
