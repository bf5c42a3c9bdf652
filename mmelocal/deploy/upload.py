"""The store's tarballs to S3 with boto3's transfer manager: unchanged objects are skipped.

An object is unchanged when its size and checksum match the file: S3's ETag (the MD5 of a
single-part upload, or the MD5 of the parts' MD5s for a multipart upload with mmelocal's
part size), else the SHA-256 mmelocal records as object metadata
(``x-amz-meta-mmelocal-sha256``), both read with one HEAD of each object of the file's size.
Each object mmelocal writes also records the endpoint it was deployed for
(``x-amz-meta-mmelocal-endpoint``): undeploy deletes only that endpoint's. An unchanged
object that records no endpoint is recorded for this one (a server-side copy onto itself,
``record``): after a deploy, the objects of its store are the endpoint's.
Files with the same bytes (the hard-linked copies ``mmelocal package --copies`` writes) are
uploaded once and the others are server-side copies of that object: the bytes cross the
network once. The rule and the upload itself (:func:`~mmelocal.aws.objects.unchanged`,
:func:`~mmelocal.aws.objects.apply_objects`) live in :mod:`mmelocal.aws.objects`, shared
with the endpoint bench and the pytest plugin; they are importable from here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mmelocal.aws.objects import (
    ObjectStep,
    apply_objects,
    head_holds,
    head_object,
    unchanged,
)
from mmelocal.aws.parallel import map_bounded
from mmelocal.aws.s3 import (
    ENDPOINT_METADATA,
    PART_SIZE_BYTES,
    SHA256_METADATA,
    FileDigest,
    delete_objects,
    file_digest,
    file_digests,
    listed_objects,
    transfer_config,
)
from mmelocal.aws.session import aws_error, not_found
from mmelocal.deploy.artifacts import (
    UNRECORDED_NOTE,
    HeadProgress,
    MmelocalObject,
    mmelocal_objects_of,
)
from mmelocal.errors import DeployError
from mmelocal.facts.aws import bucket_region


def store_files(store: Path) -> list[tuple[str, Path]]:
    """``(relative key, path)`` of every ``*.tar.gz`` under ``store``, sorted by key."""
    files = sorted(
        (p.relative_to(store).as_posix(), p) for p in store.rglob("*.tar.gz") if p.is_file()
    )
    if not files:
        raise DeployError(f"store {store} has no *.tar.gz: package models with mmelocal package")
    return files


def plan_objects(
    s3: Any,
    bucket: str,
    prefix: str,
    store: Path,
    *,
    endpoint: str,
    on_head: HeadProgress | None = None,
) -> list[ObjectStep]:
    """One step per tarball: skip what S3 already holds for ``endpoint``, ``record`` what
    it holds with no record of an endpoint (uploaded by another tool, or by mmelocal
    2026-11-24 or earlier: the deploy makes it the endpoint's), copy what another key
    holds, upload the rest. An object of the file's size is read with one HEAD (its ETag,
    the SHA-256 and the endpoint mmelocal recorded: the listing has no metadata); those
    HEADs go on a bounded pool (``on_head`` hears them)."""
    files = store_files(store)
    digests = file_digests(path for _, path in files)
    listed = listed_objects(s3, bucket, prefix)
    sizes = {path: path.stat().st_size for _, path in files}
    to_head = [
        prefix + rel
        for rel, path in files
        if (seen := listed.get(prefix + rel)) is not None and seen[0] == sizes[path]
    ]
    heads = dict(
        zip(
            to_head,
            map_bounded(lambda key: head_object(s3, bucket, key), to_head, on_done=on_head),
            strict=True,
        )
    )
    first_key: dict[str, str] = {}
    steps = []
    for rel, path in files:
        key, digest, size = prefix + rel, digests[path], sizes[path]
        head = heads.get(key)
        action, source, note = "upload", None, ""
        if head_holds(head, size, digest):
            action, note = _held(head, endpoint)
        elif digest.sha256 in first_key:
            action, source = "copy", first_key[digest.sha256]
        first_key.setdefault(digest.sha256, key)
        steps.append(
            ObjectStep(
                key=key,
                path=str(path),
                size_bytes=size,
                sha256=digest.sha256,
                action=action,
                source_key=source,
                note=note,
            )
        )
    return steps


def _held(head: Any, endpoint: str) -> tuple[str, str]:
    """The action and note of an object that holds the file already: ``skip`` when it
    records ``endpoint`` or another endpoint (that one's deploy placed it: its record is
    kept), else ``record``."""
    metadata = head.get("Metadata", {})
    recorded = metadata.get(ENDPOINT_METADATA) or None
    if recorded == endpoint:
        return "skip", ""
    if recorded is not None:
        return "skip", f"deployed for endpoint {recorded} (its record is kept)"
    was = UNRECORDED_NOTE if SHA256_METADATA in metadata else "not uploaded by mmelocal"
    return "record", f"{was}: recorded for {endpoint}"


def check_bucket(s3: Any, bucket: str, region: str) -> None:
    """The bucket exists and lives in ``region`` (SageMaker reads it from there)."""
    try:
        location = bucket_region(s3.get_bucket_location(Bucket=bucket).get("LocationConstraint"))
    except Exception as exc:
        if not_found(exc):
            raise DeployError(
                f"bucket {bucket} does not exist: create it with "
                f"'aws s3 mb s3://{bucket} --region {region}'"
            ) from exc
        raise aws_error(exc, "GetBucketLocation", f"s3://{bucket}") from exc
    location = "eu-west-1" if location == "EU" else location
    if location != region:
        raise DeployError(
            f"bucket {bucket} is in {location}, the endpoint in {region}: use a bucket in "
            f"{region} or pass --region {location}"
        )


def mmelocal_objects(
    s3: Any, bucket: str, prefix: str, *, on_head: HeadProgress | None = None
) -> list[MmelocalObject]:
    """The objects under ``prefix`` that mmelocal uploaded (they carry its SHA-256
    metadata), with the endpoint each was deployed for, sorted by key (one HeadObject
    each, on a bounded pool; ``on_head`` hears them). The listing cannot answer it:
    ListObjectsV2 returns no user metadata (key, size, ETag, storage class, owner), and an
    ETag and size say which bytes an object holds, not for which endpoint it was placed
    (two endpoints on one prefix, or a user's copy, hold the same bytes)."""
    listed = [(key, size) for key, (size, _) in sorted(listed_objects(s3, bucket, prefix).items())]
    return [o for o in mmelocal_objects_of(s3, bucket, listed, on_head=on_head) if o is not None]


def total_bytes(steps: Iterable[ObjectStep], action: str) -> int:
    """Bytes of the steps with ``action``."""
    return sum(s.size_bytes for s in steps if s.action == action)


__all__ = [
    "PART_SIZE_BYTES",
    "FileDigest",
    "apply_objects",
    "check_bucket",
    "delete_objects",
    "file_digest",
    "file_digests",
    "listed_objects",
    "mmelocal_objects",
    "plan_objects",
    "store_files",
    "total_bytes",
    "transfer_config",
    "unchanged",
]
