"""Project-wide pytest configuration (the user-facing fixtures live in mmelocal.testing.plugin).

Shared model fixtures (session-scoped, built once, heavy imports inside):

* ``tiny_bert_dir``: a random BERT (hidden 32, 2 layers, vocab 1000) and its WordPiece
  tokenizer saved with ``save_pretrained`` (a Hugging Face folder, ~0.3 MB).
* ``moto_s3``: moto's server (S3, SageMaker, Application Auto Scaling...) on loopback.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# CI exercises Docker for real: a missing engine fails, it does not skip (.ci/run sets 0
# where no engine can start, so those tests skip there with the reason).
if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
    os.environ.setdefault("MMELOCAL_REQUIRE_DOCKER", "1")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT + tokenizer saved with save_pretrained (built once per session; the
    suite's one tiny BERT: tests that need it without a tokenizer copy the weights only)."""
    pytest.importorskip("transformers")
    from mmelocal.testing.tiny_bert import save_tiny_bert

    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "tiny-bert")


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[str]:
    """moto's server on a loopback port (S3, SageMaker, Application Auto Scaling); its URL."""
    from moto.server import ThreadedMotoServer

    from mmelocal.runtime.server_config import pick_free_port

    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_ACCESS_KEY_ID"] = "testing"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    # werkzeug would add its own stderr handler, bound to the stream of the test that made the
    # first request (closed later: "Logging error"); its records go to pytest's capture instead
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.addHandler(logging.NullHandler())
    werkzeug.setLevel(logging.WARNING)
    port = pick_free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
