"""The objects the endpoint bench places under an endpoint's prefix go up as ``mmelocal
deploy`` uploads a store (:func:`mmelocal.aws.objects.apply_objects`: the checksum and the
endpoint recorded, mmelocal's part size), after the same "does S3 hold these bytes" rule,
with the HEADs on deploy's bounded pool. S3 is the session's local AWS; no endpoint is
needed for the objects (the description is written out)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import boto3
import pytest
from remote_helpers import INSTANCE_TYPE, write_reference_tarball

from mmelocal.aws.endpoint import EndpointInfo
from mmelocal.aws.s3 import ENDPOINT_METADATA, SHA256_METADATA, file_digest
from mmelocal.bench.endpoint.remote import RemoteEndpoint
from mmelocal.errors import ObjectConflictError

NAME = "bench-objects"


@pytest.fixture
def endpoint(bucket: str) -> RemoteEndpoint:
    from mmelocal.aws.session import connect

    info = EndpointInfo(
        name=NAME, status="InService", instance_type=INSTANCE_TYPE, instance_count=1,
        model_name="m", model_data_url=f"s3://{bucket}/models/",
    )  # fmt: skip
    return RemoteEndpoint(connect(), info)


def _metadata(bucket: str, key: str) -> dict[str, str]:
    metadata: dict[str, str] = boto3.client("s3").head_object(Bucket=bucket, Key=key)["Metadata"]
    return metadata


def test_the_heads_of_several_files_go_at_once(
    endpoint: RemoteEndpoint, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file was one HeadObject after the other; they now go on deploy's bounded pool
    (``map_bounded``): three HEADs meet at a barrier of three, which serial calls never
    reach. What S3 holds already is skipped, the others are uploaded with deploy's
    metadata."""
    files = [write_reference_tarball(tmp_path / f"m{i}.tar.gz", scale=i + 2.0) for i in range(3)]
    s3, real = endpoint.clients.s3, endpoint.clients.s3.head_object
    assert endpoint.put_files([(files[2], "c.tar.gz")]) == ["upload"]
    meeting = threading.Barrier(3, timeout=20)

    def head_object(**params: Any) -> Any:
        meeting.wait()
        return real(**params)

    monkeypatch.setattr(s3, "head_object", head_object)
    targets = [(files[0], "a.tar.gz"), (files[1], "team/b.tar.gz"), (files[2], "c.tar.gz")]
    assert endpoint.put_files(targets) == ["upload", "upload", "skip"]
    for path, target in targets:
        assert _metadata(bucket, f"models/{target}") == {
            SHA256_METADATA: file_digest(path).sha256,
            ENDPOINT_METADATA: NAME,
        }


def test_bytes_s3_holds_without_mmelocals_checksum_stay_the_owners(
    endpoint: RemoteEndpoint, bucket: str, tmp_path: Path
) -> None:
    """The bench skipped only an object with mmelocal's SHA-256: the same bytes put there by
    someone else (``aws s3 cp``) were uploaded again and marked as placed for the endpoint,
    so the endpoint's next deploy pruned the owner's object. Deploy's rule (same size and
    ETag) keeps it as it is."""
    tarball = write_reference_tarball(tmp_path / "m.tar.gz", scale=2.0)
    s3 = boto3.client("s3")
    s3.upload_file(str(tarball), bucket, "models/metrics.tar.gz")
    assert endpoint.put_file(tarball, "metrics.tar.gz") == "skip"
    assert _metadata(bucket, "models/metrics.tar.gz") == {}


def test_other_bytes_at_a_key_are_replaced_only_when_mmelocal_placed_them_for_the_endpoint(
    endpoint: RemoteEndpoint, bucket: str, tmp_path: Path
) -> None:
    """The user's own model at the probe's key is what the endpoint serves under that
    TargetModel: the bench replaced it with its probe (other bytes were uploaded over any
    object). It is refused, naming the key, and the object stays; an object the bench
    placed for this endpoint is replaced as before."""
    mine = write_reference_tarball(tmp_path / "mine.tar.gz", scale=2.0)
    s3 = boto3.client("s3")
    s3.upload_file(str(mine), bucket, "models/served.tar.gz")
    other = write_reference_tarball(tmp_path / "other.tar.gz", scale=3.0)
    with pytest.raises(ObjectConflictError, match=r"served\.tar\.gz") as refused:
        endpoint.put_file(other, "served.tar.gz")
    assert refused.value.keys == ("models/served.tar.gz",)
    held = s3.head_object(Bucket=bucket, Key="models/served.tar.gz")
    assert (held["ContentLength"], held["Metadata"]) == (mine.stat().st_size, {})

    assert endpoint.put_file(mine, "probe.tar.gz") == "upload"
    assert endpoint.put_file(other, "probe.tar.gz") == "upload"
    assert _metadata(bucket, "models/probe.tar.gz") == {
        SHA256_METADATA: file_digest(other).sha256,
        ENDPOINT_METADATA: NAME,
    }
