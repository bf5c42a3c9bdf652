"""The store's tarballs to S3 with boto3's transfer manager: unchanged objects are skipped.

An object is unchanged when its size and checksum match the file: S3's ETag from the
listing (the MD5 of a single-part upload, or the MD5 of the parts' MD5s for a multipart
upload with mmelocal's part size), else the SHA-256 mmelocal records as object metadata
(``x-amz-meta-mmelocal-sha256``), read with one HEAD only for objects whose ETag differs.
Each object mmelocal writes also records the endpoint it was deployed for
(``x-amz-meta-mmelocal-endpoint``): undeploy deletes only that endpoint's.
Files with the same bytes (the hard-linked copies ``mmelocal package --copies`` writes) are
uploaded once and the others are server-side copies of that object: the bytes cross the
network once. The rule and the upload itself (:func:`~mmelocal.aws.objects.head_holds`,
:func:`~mmelocal.aws.objects.apply_objects`) live in :mod:`mmelocal.aws.objects`, shared
with the endpoint bench and the pytest plugin; they are importable from here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mmelocal.aws.objects import ObjectStep, apply_objects
from mmelocal.aws.parallel import map_bounded
from mmelocal.aws.s3 import (
    PART_SIZE_BYTES,
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
    UnreadableObject,
    head_or_refusal,
    mmelocal_objects_of,
    recorded_object,
    whose_note,
)
from mmelocal.errors import DeployError, ObjectConflictError
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
    unrecorded_mine: bool = False,
    replace_foreign: bool = False,
    on_head: HeadProgress | None = None,
) -> list[ObjectStep]:
    """One step per tarball: skip what S3 already holds, copy what another key holds,
    upload the rest.

    A key whose object the listing does not show to hold the file (another size or ETag) is
    read with one HeadObject (on a bounded pool; ``on_head`` hears them): the SHA-256
    mmelocal recorded may show it holds the file (skip); else the object is replaced, and
    the step's note says what it replaces, only when mmelocal uploaded it for ``endpoint``
    (with ``unrecorded_mine``, for no endpoint recorded too: ``--prune-unrecorded``), or
    with ``replace_foreign``. The others (the user's own object, another tool's, another
    endpoint's) and any whose HeadObject S3 refused (whose it is cannot be known) are
    named in an :class:`~mmelocal.errors.ObjectConflictError` before anything changes."""
    files = store_files(store)
    digests = file_digests(path for _, path in files)
    listed = listed_objects(s3, bucket, prefix)
    sizes = {path: path.stat().st_size for _, path in files}
    to_head = [
        (prefix + rel, sizes[path])
        for rel, path in files
        if _differs(sizes[path], digests[path], listed.get(prefix + rel))
    ]
    heads = dict(
        zip(
            [key for key, _ in to_head],
            map_bounded(lambda item: head_or_refusal(s3, bucket, *item), to_head, on_done=on_head),
            strict=True,
        )
    )
    first_key: dict[str, str] = {}
    steps: list[ObjectStep] = []
    refused: dict[str, str] = {}
    for rel, path in files:
        key, digest, size = prefix + rel, digests[path], sizes[path]
        head, note = heads.get(key), ""
        skip = key in listed and key not in heads  # the listing shows the file's bytes
        if isinstance(head, UnreadableObject):
            refused[key] = f"HeadObject answered {head.reason}"
        elif head is not None:
            found = recorded_object(key, size, head)
            if found is not None and found.sha256 == digest.sha256:
                skip = int(head["ContentLength"]) == size
            if not skip:
                note, refusal = _replacing(found, endpoint, unrecorded_mine, replace_foreign)
                if refusal:
                    refused[key] = refusal
        if skip:
            action, source = "skip", None
        elif digest.sha256 in first_key:
            action, source = "copy", first_key[digest.sha256]
        else:
            action, source = "upload", None
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
    if refused:
        raise _conflict(refused, f"s3://{bucket}/{prefix}", endpoint)
    return steps


def _replacing(
    found: MmelocalObject | None, endpoint: str, unrecorded_mine: bool, replace_foreign: bool
) -> tuple[str, str]:
    """(the step's note on what it replaces, why it may not: "" when it may)."""
    whose = whose_note(found, endpoint)
    if not whose:
        return "replaces the object an earlier deploy placed for this endpoint", ""
    if whose == UNRECORDED_NOTE and unrecorded_mine:
        return f"replaces an object {whose} (--prune-unrecorded)", ""
    if replace_foreign:
        return f"replaces an object {whose} (--replace-foreign)", ""
    return "", whose


def _differs(size: int, digest: FileDigest, listed: tuple[int, str] | None) -> bool:
    """An object is at the key and the listing does not show it holds the file (another
    size, or another ETag: another part size, an ETag that is no MD5, other bytes)."""
    return listed is not None and listed != (size, digest.etag)


def _conflict(refused: dict[str, str], url: str, endpoint: str) -> ObjectConflictError:
    """The refusal of a plan whose tarballs would replace objects not ``endpoint``'s:
    each key with why, and what to do."""
    unread = {k: why for k, why in refused.items() if why.startswith("HeadObject answered")}
    foreign = {k: why for k, why in refused.items() if k not in unread}
    parts = []
    if foreign:
        named = "; ".join(f"{k} ({why})" for k, why in sorted(foreign.items()))
        unrecorded = UNRECORDED_NOTE in foreign.values()
        parts.append(
            f"{len(foreign)} of the store's tarballs would replace objects under {url} that "
            f"mmelocal did not upload for endpoint {endpoint}: {named}. Replacing one destroys "
            "its bytes and changes the model served under that name on every endpoint that "
            "reads the prefix: give these tarballs another name (SageMaker's advice for a "
            "new version of a model is a new name), move or delete those objects yourself, "
            "or run this deploy again with --replace-foreign if they may go"
            + (
                " (--prune-unrecorded: the objects with no endpoint recorded are this endpoint's)"
                if unrecorded
                else ""
            )
        )
    if unread:
        named = "; ".join(f"{k} ({why})" for k, why in sorted(unread.items()))
        parts.append(
            f"{len(unread)} of the store's tarballs would replace objects under {url} that "
            f"S3 would not let mmelocal read: {named}. Whose they are cannot be known, so "
            "deploy never overwrites them: give these tarballs another name, or read or "
            "delete those objects with credentials (or the SSE-C key) that may"
        )
    return ObjectConflictError(". ".join(parts), keys=list(refused))


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


def prefix_objects(
    s3: Any, bucket: str, prefix: str, *, on_head: HeadProgress | None = None
) -> tuple[list[MmelocalObject], list[UnreadableObject]]:
    """The objects under ``prefix`` that mmelocal uploaded (they carry its SHA-256
    metadata), with the endpoint each was deployed for, and those whose HeadObject S3
    refused (whose they are is unknown), each sorted by key (one HeadObject each, on a
    bounded pool; ``on_head`` hears them). The listing cannot answer it: ListObjectsV2
    returns no user metadata (key, size, ETag, storage class, owner), and an ETag and size
    say which bytes an object holds, not for which endpoint it was placed (two endpoints
    on one prefix, or a user's copy, hold the same bytes)."""
    listed = [(key, size) for key, (size, _) in sorted(listed_objects(s3, bucket, prefix).items())]
    found = mmelocal_objects_of(s3, bucket, listed, on_head=on_head)
    return (
        [o for o in found if isinstance(o, MmelocalObject)],
        [o for o in found if isinstance(o, UnreadableObject)],
    )


def mmelocal_objects(
    s3: Any, bucket: str, prefix: str, *, on_head: HeadProgress | None = None
) -> list[MmelocalObject]:
    """The objects under ``prefix`` that mmelocal uploaded (:func:`prefix_objects`)."""
    return prefix_objects(s3, bucket, prefix, on_head=on_head)[0]


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
    "prefix_objects",
    "store_files",
    "total_bytes",
    "transfer_config",
]
