"""The store's tarballs to S3 with boto3's transfer manager: unchanged objects are skipped.

An object is unchanged when its size and checksum match the file: the SHA-256 mmelocal
records as object metadata (``x-amz-meta-mmelocal-sha256``) or, for objects uploaded by
other tools, S3's ETag (the MD5 of a single-part upload, or the MD5 of the parts' MD5s for a
multipart upload with mmelocal's part size). Files with the same bytes (the hard-linked
copies ``mmelocal package --copies`` writes) are uploaded once and the others are
server-side copies of that object: the bytes cross the network once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mmelocal.deploy.plan import SHA256_METADATA, ObjectStep
from mmelocal.deploy.session import aws_error, not_found
from mmelocal.errors import DeployError

PART_SIZE_BYTES = 64 * 1024 * 1024
_READ_BYTES = 4 * 1024 * 1024


def transfer_config() -> Any:
    """boto3's ``TransferConfig``: multipart above one part, 8 parts in flight."""
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=PART_SIZE_BYTES, multipart_chunksize=PART_SIZE_BYTES, max_concurrency=8
    )


def store_files(store: Path) -> list[tuple[str, Path]]:
    """``(relative key, path)`` of every ``*.tar.gz`` under ``store``, sorted by key."""
    files = sorted(
        (p.relative_to(store).as_posix(), p) for p in store.rglob("*.tar.gz") if p.is_file()
    )
    if not files:
        raise DeployError(f"store {store} has no *.tar.gz: package models with mmelocal package")
    return files


def file_digests(paths: Iterable[Path]) -> dict[Path, str]:
    """SHA-256 of each file; hard links (same device and inode) are read once."""
    by_inode: dict[tuple[int, int], str] = {}
    digests: dict[Path, str] = {}
    for path in paths:
        stat = path.stat()
        inode = (stat.st_dev, stat.st_ino)
        if inode not in by_inode:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(_READ_BYTES):
                    digest.update(chunk)
            by_inode[inode] = digest.hexdigest()
        digests[path] = by_inode[inode]
    return digests


def s3_etag(path: Path, part_size_bytes: int = PART_SIZE_BYTES) -> str:
    """The ETag S3 gives ``path`` when uploaded with this part size (quotes stripped)."""
    size = path.stat().st_size
    parts = []
    with path.open("rb") as handle:
        while chunk := handle.read(part_size_bytes):
            parts.append(hashlib.md5(chunk, usedforsecurity=False).digest())
    if size < part_size_bytes or len(parts) <= 1:
        return parts[0].hex() if parts else hashlib.md5(b"", usedforsecurity=False).hexdigest()
    combined = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
    return f"{combined}-{len(parts)}"


def _unchanged(s3: Any, bucket: str, key: str, path: Path, sha256: str) -> bool:
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if not_found(exc):
            return False
        raise aws_error(exc, "HeadObject", f"s3://{bucket}/{key}") from exc
    if int(head.get("ContentLength", -1)) != path.stat().st_size:
        return False
    recorded = head.get("Metadata", {}).get(SHA256_METADATA)
    if recorded is not None:
        return bool(recorded == sha256)
    return str(head.get("ETag", "")).strip('"') == s3_etag(path)


def plan_objects(s3: Any, bucket: str, prefix: str, store: Path) -> list[ObjectStep]:
    """One step per tarball: skip what S3 already holds, copy what another key holds."""
    files = store_files(store)
    digests = file_digests(path for _, path in files)
    first_key: dict[str, str] = {}
    steps = []
    for rel, path in files:
        key, sha = prefix + rel, digests[path]
        size = path.stat().st_size
        if _unchanged(s3, bucket, key, path, sha):
            action, source = "skip", None
        elif sha in first_key:
            action, source = "copy", first_key[sha]
        else:
            action, source = "upload", None
        first_key.setdefault(sha, key)
        steps.append(
            ObjectStep(
                key=key,
                path=str(path),
                size_bytes=size,
                sha256=sha,
                action=action,
                source_key=source,
            )
        )
    return steps


def apply_objects(
    s3: Any,
    bucket: str,
    steps: Iterable[ObjectStep],
    *,
    on_bytes: Callable[[int], None] | None = None,
    on_object: Callable[[ObjectStep], None] | None = None,
) -> None:
    """Uploads first, then server-side copies (their sources exist by then).

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
                ExtraArgs={"Metadata": {SHA256_METADATA: step.sha256}},
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
            "Metadata": {SHA256_METADATA: step.sha256},
            "MetadataDirective": "REPLACE",
        }
        try:
            s3.copy(source, bucket, step.key, ExtraArgs=copy_args, Config=config)
        except Exception as exc:
            raise aws_error(exc, "CopyObject", f"s3://{bucket}/{step.key}") from exc
        if on_object is not None:
            on_object(step)


def check_bucket(s3: Any, bucket: str, region: str) -> None:
    """The bucket exists and lives in ``region`` (SageMaker reads it from there)."""
    try:
        location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") or "us-east-1"
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


def mmelocal_objects(s3: Any, bucket: str, prefix: str) -> list[str]:
    """Keys under ``prefix`` that mmelocal uploaded (they carry its SHA-256 metadata)."""
    keys = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            head = s3.head_object(Bucket=bucket, Key=item["Key"])
            if SHA256_METADATA in head.get("Metadata", {}):
                keys.append(item["Key"])
    return keys


def delete_objects(s3: Any, bucket: str, keys: list[str]) -> None:
    """Delete ``keys`` (1,000 per request)."""
    for start in range(0, len(keys), 1000):
        batch = [{"Key": k} for k in keys[start : start + 1000]]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})


def total_bytes(steps: Iterable[ObjectStep], action: str) -> int:
    """Bytes of the steps with ``action``."""
    return sum(s.size_bytes for s in steps if s.action == action)


__all__ = [
    "apply_objects",
    "check_bucket",
    "delete_objects",
    "file_digests",
    "mmelocal_objects",
    "plan_objects",
    "s3_etag",
    "store_files",
    "total_bytes",
    "transfer_config",
]
