"""What a deploy records on the objects under its prefix: after a deploy, every object of
the store records this endpoint (``x-amz-meta-mmelocal-endpoint``), also those S3 held
already with the same bytes, so that a later prune or undeploy finds them. moto in this
process (no endpoint serves: only the objects are looked at)."""

from __future__ import annotations

from pathlib import Path

from deploy_helpers import INSTANCE_TYPE, ROLE, write_reference_tarball

from mmelocal.aws.objects import object_metadata
from mmelocal.aws.s3 import ENDPOINT_METADATA, SHA256_METADATA, file_digest
from mmelocal.aws.session import AwsClients
from mmelocal.deploy.deployer import apply_plan, make_plan, undeploy
from mmelocal.deploy.plan import DeployOptions


def test_objects_that_hold_the_store_bytes_are_recorded_for_the_endpoint(
    clients: AwsClients, tmp_path: Path
) -> None:
    """An object that held a store tarball's bytes already (uploaded by another tool, or by
    mmelocal 2026-11-24 or earlier with no endpoint recorded) was skipped and kept its old
    record: the endpoint served it, but its undeploy --delete-artifacts, and its prune once
    the tarball left the store, passed it over as not its own. The deploy now records it
    for the endpoint (a server-side copy onto itself: no bytes move, the ETag stays); an
    object recorded for another endpoint keeps that record."""
    s3 = clients.s3
    s3.create_bucket(Bucket="bkt")
    store = tmp_path / "store"
    paths = [write_reference_tarball(store / f"model-{i}.tar.gz", scale=i + 2.0) for i in range(4)]
    sha = [file_digest(p).sha256 for p in paths]
    s3.upload_file(str(paths[0]), "bkt", "m/model-0.tar.gz")  # another tool
    old = {"Metadata": {SHA256_METADATA: sha[1]}}  # mmelocal 2026-11-24 or earlier
    s3.upload_file(str(paths[1]), "bkt", "m/model-1.tar.gz", ExtraArgs=old)
    other = {"Metadata": object_metadata(sha[2], "other")}
    s3.upload_file(str(paths[2]), "bkt", "m/model-2.tar.gz", ExtraArgs=other)
    etags = {
        k: s3.head_object(Bucket="bkt", Key=k)["ETag"]
        for k in ("m/model-0.tar.gz", "m/model-1.tar.gz")
    }
    opts = DeployOptions(store=store, endpoint_name="ep", s3_uri="s3://bkt/m/", role_arn=ROLE,
                         instance_type=INSTANCE_TYPE, max_instances=1, poll_s=0.01,
                         timeout_s=10)  # fmt: skip

    plan = make_plan(opts, clients)
    assert [(o.key, o.action) for o in plan.objects] == [
        ("m/model-0.tar.gz", "record"),
        ("m/model-1.tar.gz", "record"),
        ("m/model-2.tar.gz", "skip"),
        ("m/model-3.tar.gz", "upload"),
    ]
    assert "deployed for endpoint other" in plan.objects[2].note
    assert apply_plan(plan, clients, options=opts) == "InService"

    def owner(key: str) -> str | None:
        return s3.head_object(Bucket="bkt", Key=key)["Metadata"].get(ENDPOINT_METADATA)

    assert [owner(f"m/model-{i}.tar.gz") for i in range(4)] == ["ep", "ep", "other", "ep"]
    for key, etag in etags.items():
        head = s3.head_object(Bucket="bkt", Key=key)
        assert head["ETag"] == etag and head["Metadata"][SHA256_METADATA] in sha
    again = make_plan(opts, clients)
    assert {o.action for o in again.objects} == {"skip"}
    assert [s.action for s in again.steps[:3]] == ["reuse", "reuse", "reuse"]  # same digest

    undeploy(clients, "ep", delete_artifacts=True)
    listed = s3.list_objects_v2(Bucket="bkt").get("Contents", [])
    assert [o["Key"] for o in listed] == ["m/model-2.tar.gz"]  # the other endpoint's
