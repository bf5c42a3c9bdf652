"""Objects under the prefix whose HeadObject S3 refuses (400: an object written with a
customer-provided key, SSE-C, asked without it; 403: no s3:GetObject on that object): the
deploy plan and undeploy keep them, say so, and go on with the others.

The local AWS (moto) does not model SSE-C (its HeadObject ignores the SSE-C headers) nor
per-object permissions, so a botocore ``before-send`` hook on mmelocal's real client
answers those keys' HeadObject as S3 does: the status alone, no body (a HEAD has none:
"it returns a generic code, such as 400 Bad Request, 403 Forbidden, 404 Not Found ...",
the HeadObject API reference); botocore parses that answer as it parses S3's."""

from __future__ import annotations

from typing import Any

from deploy_helpers import refuse_heads

from mmelocal.aws.objects import object_metadata
from mmelocal.aws.session import connect
from mmelocal.deploy.artifacts import removed_objects
from mmelocal.deploy.deployer import undeploy

SSE_C_KEY = "models/theirs-sse-c.tar.gz"
DENIED_KEY = "models/theirs-denied.tar.gz"
MINE_KEY = "models/mine.tar.gz"


def _fill(s3: Any, bucket: str, endpoint: str) -> None:
    s3.put_object(Bucket=bucket, Key=SSE_C_KEY, Body=b"s")
    s3.put_object(Bucket=bucket, Key=DENIED_KEY, Body=b"dd")
    s3.put_object(Bucket=bucket, Key=MINE_KEY, Body=b"mmm",
                  Metadata=object_metadata("a" * 64, endpoint))  # fmt: skip


def test_a_plan_keeps_and_names_the_objects_s3_would_not_let_it_read(aws: str, bucket: str) -> None:
    """One foreign object whose HeadObject answered 400 or 403 aborted the whole deploy
    plan (``HeadObject failed for s3://...: 400: Bad Request``): now each is kept, its
    note says why it could not be read, and the endpoint's own object is still pruned."""
    clients = connect()
    _fill(clients.s3, bucket, "ep-unread")
    refuse_heads(clients.s3, {SSE_C_KEY: 400, DENIED_KEY: 403})
    steps = removed_objects(clients, bucket, "models/", set(), endpoint="ep-unread", prune=True)
    found = {s.key: (s.action, s.note) for s in steps}
    assert found[MINE_KEY] == ("delete", "not in the store")
    assert found[SSE_C_KEY][0] == "keep" and found[DENIED_KEY][0] == "keep"
    assert "HeadObject answered 400" in found[SSE_C_KEY][1]
    assert "SSE-C" in found[SSE_C_KEY][1]
    assert "HeadObject answered 403" in found[DENIED_KEY][1]
    assert "s3:GetObject" in found[DENIED_KEY][1]
    assert [s.size_bytes for s in steps] == [3, 2, 1]


def test_undeploy_deletes_its_objects_and_keeps_those_it_could_not_read(
    aws: str, bucket: str
) -> None:
    """undeploy --delete-artifacts raised on the first refused HeadObject and deleted
    nothing: now it deletes the endpoint's objects, keeps the unread ones and says where
    they are and why."""
    clients = connect()
    _fill(clients.s3, bucket, "ep-unread")
    refuse_heads(clients.s3, {SSE_C_KEY: 400, DENIED_KEY: 403})
    url = f"s3://{bucket}/models/"
    done = undeploy(clients, "ep-unread", delete_artifacts=True, s3_uri=url)
    left = [o["Key"] for o in clients.s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert sorted(left) == [DENIED_KEY, SSE_C_KEY]
    assert done[0] == f"1 objects under {url}"
    kept = [d for d in done[1:] if "could not be read" in d]
    assert len(kept) == 1 and "2 objects (3 bytes" in kept[0] and url in kept[0]
    assert "400" in kept[0] and "403" in kept[0]
