"""S3 for mmelocal: ``s3://`` URIs, the checksums S3 gives an upload, boto3's transfer
settings, listing and deleting objects. Shared by deploy (the store's tarballs) and the
endpoint bench (copies of a model under a deployed endpoint's prefix)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.aws.session import aws_error
from mmelocal.errors import DeployError

#: object metadata (x-amz-meta-mmelocal-sha256) that records the uploaded file's SHA-256
SHA256_METADATA = "mmelocal-sha256"
#: object metadata (x-amz-meta-mmelocal-endpoint) that records the endpoint a deploy
#: uploaded the object for, or the endpoint bench placed it under
ENDPOINT_METADATA = "mmelocal-endpoint"

_S3_URI = re.compile(r"^s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(/.*)?$")


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b/")``: the prefix always ends with '/'
    (or is empty), as an MME's ``ModelDataUrl`` must."""
    match = _S3_URI.match(uri)
    if match is None:
        raise DeployError(f"--s3-uri must look like s3://bucket/prefix/, got {uri!r}")
    prefix = (match.group(2) or "/").lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return match.group(1), prefix


PART_SIZE_BYTES = 64 * 1024 * 1024
_READ_BYTES = 4 * 1024 * 1024


def transfer_config() -> Any:
    """boto3's ``TransferConfig``: multipart above one part, 8 parts in flight."""
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=PART_SIZE_BYTES, multipart_chunksize=PART_SIZE_BYTES, max_concurrency=8
    )


@dataclass(frozen=True)
class FileDigest:
    """A file's SHA-256 and the ETag S3 gives it when uploaded with mmelocal's part size."""

    sha256: str
    etag: str


def file_digest(path: Path, part_size_bytes: int = PART_SIZE_BYTES) -> FileDigest:
    """Both checksums of ``path`` in one read (the ETag: the MD5 of a file under one part,
    sent as one PutObject, else the MD5 of the parts' MD5s and ``-<parts>``: boto3 uploads
    a file of ``part_size_bytes`` or more in parts)."""
    sha, part, parts, part_bytes = hashlib.sha256(), _md5(), [], 0
    with path.open("rb") as handle:
        while chunk := handle.read(min(_READ_BYTES, part_size_bytes - part_bytes)):
            sha.update(chunk)
            part.update(chunk)
            part_bytes += len(chunk)
            if part_bytes == part_size_bytes:
                parts.append(part.digest())
                part, part_bytes = _md5(), 0
    whole_parts = len(parts)
    if part_bytes or not parts:
        parts.append(part.digest())
    if whole_parts == 0:  # under one part: one PutObject (exactly one part: multipart)
        return FileDigest(sha256=sha.hexdigest(), etag=parts[0].hex())
    combined = _md5(b"".join(parts)).hexdigest()
    return FileDigest(sha256=sha.hexdigest(), etag=f"{combined}-{len(parts)}")


def _md5(data: bytes = b"") -> Any:
    return hashlib.md5(data, usedforsecurity=False)


def file_digests(paths: Iterable[Path]) -> dict[Path, FileDigest]:
    """:func:`file_digest` of each file; hard links (same device and inode) are read once."""
    by_inode: dict[tuple[int, int], FileDigest] = {}
    digests: dict[Path, FileDigest] = {}
    for path in paths:
        stat = path.stat()
        inode = (stat.st_dev, stat.st_ino)
        if inode not in by_inode:
            by_inode[inode] = file_digest(path)
        digests[path] = by_inode[inode]
    return digests


def listed_objects(s3: Any, bucket: str, prefix: str) -> dict[str, tuple[int, str]]:
    """``key -> (size, ETag)`` of every object under ``prefix`` (1,000 per request)."""
    found: dict[str, tuple[int, str]] = {}
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"]] = (int(item["Size"]), str(item.get("ETag", "")).strip('"'))
    except Exception as exc:
        raise aws_error(exc, "ListObjectsV2", f"s3://{bucket}/{prefix}") from exc
    return found


def delete_objects(s3: Any, bucket: str, keys: list[str]) -> None:
    """Delete ``keys`` (1,000 per request); a key S3 could not delete is a DeployError."""
    for start in range(0, len(keys), 1000):
        batch = [{"Key": k} for k in keys[start : start + 1000]]
        try:
            answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        except Exception as exc:
            raise aws_error(exc, "DeleteObjects", f"s3://{bucket}") from exc
        failed = answer.get("Errors", [])
        if failed:
            first = failed[0]
            raise DeployError(
                f"S3 did not delete {len(failed)} object(s) in s3://{bucket}, e.g. "
                f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}; check the "
                "role's s3:DeleteObject permission and run undeploy --delete-artifacts again"
            )


__all__ = [
    "ENDPOINT_METADATA",
    "PART_SIZE_BYTES",
    "SHA256_METADATA",
    "FileDigest",
    "delete_objects",
    "file_digest",
    "file_digests",
    "listed_objects",
    "split_s3_uri",
    "transfer_config",
]
