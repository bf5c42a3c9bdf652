"""Objects mmelocal places under an endpoint's S3 prefix: what each step does, whether S3
holds a file's bytes already, and the one upload path.

Shared by ``mmelocal deploy`` (a store's tarballs, :mod:`mmelocal.deploy.upload`), the
endpoint bench (the probe and the tarballs it measures) and the pytest plugin's
``--mmelocal-endpoint`` (a test's tarball): every object mmelocal writes records the
file's SHA-256 (``x-amz-meta-mmelocal-sha256``) and the endpoint it was placed for
(``x-amz-meta-mmelocal-endpoint``, :func:`object_metadata`), so that the endpoint's next
deploy prunes it and its undeploy deletes it, and no other endpoint's does.

An object holds a file when its size and checksum match: S3's ETag (the MD5 of a
single-part upload, or the MD5 of the parts' MD5s for a multipart upload with mmelocal's
part size), else the SHA-256 mmelocal recorded (another part size, or an ETag that is no
MD5: SSE-KMS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mmelocal.aws.s3 import (
    ENDPOINT_METADATA,
    SHA256_METADATA,
    FileDigest,
    delete_objects,
    transfer_config,
)
from mmelocal.aws.session import aws_error, not_found


@dataclass(frozen=True, kw_only=True)
class ObjectStep:
    """One object: a store tarball to ``upload``, ``copy`` (server-side, from
    ``source_key``) or ``skip``; or an object under the prefix that is not in the store
    (``path`` empty), to ``delete`` or ``keep`` (``note`` says why)."""

    key: str
    path: str
    size_bytes: int
    sha256: str
    action: str
    source_key: str | None = None
    note: str = ""


def object_metadata(sha256: str, endpoint_name: str) -> dict[str, str]:
    """The metadata mmelocal writes on an object it places for ``endpoint_name``."""
    return {SHA256_METADATA: sha256, ENDPOINT_METADATA: endpoint_name}


def head_object(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """HeadObject's answer for ``key`` (None: no such object)."""
    try:
        head: dict[str, Any] = s3.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if not_found(exc):
            return None
        raise aws_error(exc, "HeadObject", f"s3://{bucket}/{key}") from exc
    return head


def listing_of(head: Mapping[str, Any] | None) -> tuple[int, str] | None:
    """A HEAD answer as a listing gives an object: ``(size, ETag)`` (None: no object)."""
    if head is None:
        return None
    return int(head["ContentLength"]), str(head.get("ETag", "")).strip('"')


def needs_head(size: int, digest: FileDigest, listed: tuple[int, str] | None) -> bool:
    """The listing cannot tell: same size, another ETag (another part size, or an ETag
    that is no MD5: SSE-KMS), so the checksum mmelocal recorded decides (one HEAD)."""
    return listed is not None and listed[0] == size and listed[1] != digest.etag


def head_holds(head: Mapping[str, Any] | None, size: int, digest: FileDigest) -> bool:
    """Whether the object of one HEAD answer (None: no object) holds the file of ``size``
    and ``digest``: the same size and ETag, else the SHA-256 mmelocal recorded (the HEAD
    has the size, the ETag and the recorded SHA-256 at once)."""
    listed = listing_of(head)
    if listed is None or listed[0] != size:
        return False
    metadata = {} if head is None else head.get("Metadata", {})
    return not needs_head(size, digest, listed) or metadata.get(SHA256_METADATA) == digest.sha256


def apply_objects(
    s3: Any,
    bucket: str,
    steps: Iterable[ObjectStep],
    *,
    endpoint_name: str,
    on_bytes: Callable[[int], None] | None = None,
    on_object: Callable[[ObjectStep], None] | None = None,
) -> None:
    """Uploads first, then server-side copies (their sources exist by then); each object
    records its checksum and ``endpoint_name`` (:func:`object_metadata`). Then the
    ``delete`` steps (objects no longer in the store). Files of a part or more go up in
    parts (:func:`~mmelocal.aws.s3.transfer_config`: mmelocal's part size, 8 at once).

    ``on_bytes`` receives uploaded byte counts as they go (from the transfer threads);
    ``on_object`` each step once its object is in place.
    """
    config = transfer_config()
    steps = list(steps)
    for step in (s for s in steps if s.action == "upload"):
        try:
            s3.upload_file(
                step.path,
                bucket,
                step.key,
                ExtraArgs={"Metadata": object_metadata(step.sha256, endpoint_name)},
                Config=config,
                Callback=on_bytes,
            )
        except Exception as exc:
            raise aws_error(exc, "PutObject", f"s3://{bucket}/{step.key}") from exc
        if on_object is not None:
            on_object(step)
    for step in (s for s in steps if s.action == "copy"):
        source = {"Bucket": bucket, "Key": step.source_key}
        copy_args: dict[str, Any] = {
            "Metadata": object_metadata(step.sha256, endpoint_name),
            "MetadataDirective": "REPLACE",
        }
        try:
            s3.copy(source, bucket, step.key, ExtraArgs=copy_args, Config=config)
        except Exception as exc:
            raise aws_error(exc, "CopyObject", f"s3://{bucket}/{step.key}") from exc
        if on_object is not None:
            on_object(step)
    removed = [s for s in steps if s.action == "delete"]
    delete_objects(s3, bucket, [s.key for s in removed])
    if on_object is not None:
        for step in removed:
            on_object(step)


__all__ = [
    "ObjectStep",
    "apply_objects",
    "head_holds",
    "head_object",
    "listing_of",
    "needs_head",
    "object_metadata",
]
