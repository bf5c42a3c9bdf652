"""Deploy and undeploy with hundreds of objects under the prefix: the calls made once per
object or per model go many at once, and find what one after another found."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from mmelocal.aws.s3 import ENDPOINT_METADATA, SHA256_METADATA
from mmelocal.aws.session import connect
from mmelocal.deploy.artifacts import MmelocalObject, mmelocal_object, removed_objects
from mmelocal.deploy.upload import mmelocal_objects
from mmelocal.facts.aws import CONCURRENT_REQUESTS

OBJECTS = 300


class _InFlight:
    """botocore event hooks that count the calls of one operation in flight at once; the
    first ``meet`` calls wait for each other (a barrier), so calls sent one after another
    fail here instead of passing by luck."""

    def __init__(self, client: Any, event: str, meet: int) -> None:
        self.lock, self.now, self.peak, self.calls = threading.Lock(), 0, 0, 0
        self.barrier = threading.Barrier(meet, timeout=20)
        self.meet = meet
        client.meta.events.register(f"before-call.{event}", self.before)
        client.meta.events.register(f"after-call.{event}", self.after)

    def before(self, **_: Any) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.calls += 1
            first = self.calls <= self.meet
        if first:
            self.barrier.wait()

    def after(self, **_: Any) -> None:
        with self.lock:
            self.now -= 1


def _fill(s3: Any, bucket: str, endpoint: str) -> None:
    """OBJECTS small objects under models/: mmelocal's for ``endpoint``, for another
    endpoint, with no endpoint recorded, and not mmelocal's, in turn."""
    for i in range(OBJECTS):
        kind = i % 4
        metadata = {SHA256_METADATA: f"{i:064x}"} if kind < 3 else {}
        if kind == 0:
            metadata[ENDPOINT_METADATA] = endpoint
        elif kind == 1:
            metadata[ENDPOINT_METADATA] = "another"
        s3.put_object(Bucket=bucket, Key=f"models/m-{i:04d}.tar.gz", Body=b"x" * (i % 7 + 1),
                      Metadata=metadata)  # fmt: skip


def test_hundreds_of_heads_go_many_at_once_and_find_what_serial_heads_found(
    aws: str, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One HeadObject per object, one after another, took minutes for hundreds of models
    at plan time and in every undeploy. They now go CONCURRENT_REQUESTS at once on the
    client's pool of as many connections (urllib3 discards none), with the same answers in
    the same order, and progress heard."""
    clients = connect()
    _fill(clients.s3, bucket, "ep-many")
    listing = clients.s3.list_objects_v2(Bucket=bucket, Prefix="models/")["Contents"]
    serial = [mmelocal_object(clients.s3, bucket, o["Key"], o["Size"]) for o in listing]
    assert len(serial) == OBJECTS

    heads = _InFlight(clients.s3, "s3.HeadObject", CONCURRENT_REQUESTS)
    heard: list[tuple[int, int]] = []
    with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
        found = mmelocal_objects(clients.s3, bucket, "models/", on_head=lambda *n: heard.append(n))
        steps = removed_objects(clients, bucket, "models/", set(), endpoint="ep-many", prune=True)
    assert found == [o for o in serial if o is not None]
    assert heads.calls == 2 * OBJECTS and heads.peak == CONCURRENT_REQUESTS
    assert clients.s3.meta.config.max_pool_connections == CONCURRENT_REQUESTS
    assert "Connection pool is full" not in caplog.text
    assert heard[-1] == (OBJECTS, OBJECTS)
    assert [d for d, _ in heard] == sorted(d for d, _ in heard)

    notes = {
        0: ("delete", "not in the store"),
        1: ("keep", "deployed for endpoint another"),
        2: ("keep", "uploaded by mmelocal with no endpoint recorded (2026-11-24 or earlier)"),
        3: ("keep", "not uploaded by mmelocal"),
    }
    assert [(s.key, s.action, s.note) for s in steps] == [
        (o["Key"], *notes[i % 4]) for i, o in enumerate(listing)
    ]
    assert [s.sha256 for s in steps] == [
        o.sha256 if isinstance(o, MmelocalObject) else "" for o in serial
    ]
