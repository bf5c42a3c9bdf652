"""Project-wide pytest configuration (the user-facing fixtures live in mmelocal.testing.plugin).

Shared model fixtures (session-scoped, built once, heavy imports inside):

* ``tiny_bert_dir``: a random BERT (hidden 32, 2 layers, vocab 1000) and its WordPiece
  tokenizer saved with ``save_pretrained`` (a Hugging Face folder, ~0.3 MB).

Per test: ``held_port``, a loopback port another process holds for the whole test;
``refused_port``, a loopback port that refuses connections for the whole test;
``bucket``, a new empty bucket in the session's local AWS (``local_aws_env``), deleted with
what it holds after the test.

The servers are the plugin's (mmelocal.testing), one of each kind per session (per xdist
worker): ``triton_server`` (a Triton), ``local_aws`` / ``local_aws_env`` (S3, SageMaker with
real endpoints, autoscaling, STS, logs: moto's state on loopback). Name what you create in
them uniquely and leave them as you found them. A module starts its own only where it needs
its own configuration or breaks what it starts.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from shared_helpers import unique

if TYPE_CHECKING:
    from mmelocal.localaws import LocalAws

# CI exercises Docker for real: a missing engine fails, it does not skip (.ci/run sets 0
# where no engine can start, so those tests skip there with the reason).
if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
    os.environ.setdefault("MMELOCAL_REQUIRE_DOCKER", "1")


#: seconds each test file took (setup, call and teardown summed) in a ``--durations=0`` run
#: of the whole suite on 2 cores (2026-11-26; under 0.05 s: 0; the files a change made
#: shorter scaled by their ratio in two ``-n 0`` runs of the file alone, before and after,
#: 2026-11-27); a file not listed counts
#: :data:`UNLISTED_TEST_S` per test. Only the order matters, not the figures.
DURATIONS = Path(__file__).with_name("durations.json")
UNLISTED_TEST_S = 0.5


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the longest files first. With ``--dist loadfile --no-loadscope-reorder`` (the
    Makefile's) an xdist worker takes the next file in this order when it runs short, so
    the long files start early and cannot pile up on one worker at the end (xdist's own
    order is by test count, which put single-test files of a minute or more last)."""
    costs: dict[str, float] = json.loads(DURATIONS.read_text(encoding="utf-8"))
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(name: str) -> float:
        return costs.get(name, UNLISTED_TEST_S * len(files[name]))

    items[:] = [item for name in sorted(files, key=cost, reverse=True) for item in files[name]]


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT + tokenizer saved with save_pretrained (built once per session; the
    suite's one tiny BERT: tests that need it without a tokenizer copy the weights only)."""
    pytest.importorskip("transformers")
    from mmelocal.testing.tiny_bert import save_tiny_bert

    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "tiny-bert")


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port held for the whole test: bound and listening, never accepted (in use,
    to a server that wants it; a peer that never answers, to a client)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections for the whole test: bound and never
    listening, so nothing else can take it meanwhile (a closed port could be)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def bucket(local_aws_env: LocalAws) -> Iterator[str]:
    """A new empty bucket in the session's local AWS, in us-east-1 (the test's environment
    points at it: ``local_aws_env``); after the test it goes with what it holds, so the
    tests after this one see none of it."""
    import boto3

    s3 = boto3.client("s3")
    name = unique("mme")
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        if keys := [{"Key": item["Key"]} for item in page.get("Contents", [])]:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys})
    s3.delete_bucket(Bucket=name)
