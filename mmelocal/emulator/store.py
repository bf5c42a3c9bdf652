"""Where model artifacts live: a local folder of ``*.tar.gz`` or an S3 prefix.

A call names its model with ``TargetModel``: the artifact's key relative to the store's
root (it may contain ``/``). :func:`validate_target` rejects names that could never be a
safe key (``..`` segments, a leading ``/``, NUL or control characters, over-long names)
before any store is asked; the HTTP layer turns that error into a 400 ``ValidationError``.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mmelocal.errors import (
    EmulatorError,
    InvalidTargetError,
    ModelNotFoundError,
    StoreAccessError,
    StoreUnavailableError,
    UserInputError,
)
from mmelocal.facts.aws import LOCAL, aws_client, new_session, s3_error_class
from mmelocal.facts.sagemaker import target_model_problem

logger = logging.getLogger(__name__)

#: the longest file name most file systems take (``NAME_MAX``), in bytes
MAX_NAME_BYTES = 255


def validate_target(target: str) -> str:
    """Return ``target`` unchanged when it is a safe artifact key, else raise InvalidTargetError."""
    problem = target_model_problem(target)  # the service's rule, then a safe key's
    if problem is not None:
        raise InvalidTargetError(problem, target_model=target)
    shown = repr(target[:80]) + ("..." if len(target) > 80 else "")
    if target.startswith("/") or "\\" in target:
        raise InvalidTargetError(
            f"TargetModel {shown} must be a key relative to the store (no leading '/', "
            "no backslash), e.g. 'model-7.tar.gz'",
            target_model=target,
        )
    parts = target.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidTargetError(
            f"TargetModel {shown} must not contain '..', '.' or empty path segments",
            target_model=target,
        )
    if target != target.strip():
        raise InvalidTargetError(
            f"TargetModel {shown} must not start or end with whitespace", target_model=target
        )
    return target


@dataclass(frozen=True, kw_only=True)
class ArtifactInfo:
    """What a store knows about one artifact before downloading it."""

    target: str
    size_bytes: int
    version: str


@runtime_checkable
class ModelStore(Protocol):
    """A read-only source of ``model.tar.gz`` artifacts keyed by TargetModel."""

    @property
    def description(self) -> str:
        """Where the store points (a folder or an ``s3://`` URL), for logs and /ping."""
        ...

    def stat(self, target: str) -> ArtifactInfo:
        """Size and version of ``target``; ModelNotFoundError when absent."""
        ...

    def fetch(self, target: str, dest: Path) -> int:
        """Copy ``target`` to the file ``dest``; return the bytes written."""
        ...

    def check(self) -> None:
        """Fail fast at start-up when the store cannot be used (credentials, reachability)."""
        ...


class LocalStore:
    """A folder of tarballs; ``target`` is the path relative to the folder."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        if self.root.exists() and not self.root.is_dir():
            raise UserInputError(
                f"model store {self.root} is a file, not a folder: give the folder that holds "
                "the *.tar.gz artifacts (TargetModel is the path relative to it)"
            )
        if not self.root.is_dir():
            raise UserInputError(
                f"model store folder {self.root} does not exist: create it, or give the folder "
                "that holds the *.tar.gz artifacts"
            )

    @property
    def description(self) -> str:
        """The store folder."""
        return str(self.root)

    def check(self) -> None:
        """Nothing to check beyond the constructor (the folder exists)."""

    def _path(self, target: str) -> Path:
        validate_target(target)
        not_found = ModelNotFoundError(
            f"TargetModel {target[:200]!r} was not found in the model store {self.root}",
            target_model=target,
        )
        # a segment longer than a file name can be names no file here (and would make the
        # file system answer "File name too long")
        if any(
            len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES
            for part in target.split("/")
        ):
            raise not_found
        try:
            path = (self.root / target).resolve()
            if not path.is_relative_to(self.root) or not path.is_file():
                raise not_found
        except OSError:
            raise not_found from None
        return path

    def stat(self, target: str) -> ArtifactInfo:
        """Size and modification time of the file."""
        st = self._path(target).stat()
        return ArtifactInfo(target=target, size_bytes=st.st_size, version=str(st.st_mtime_ns))

    def fetch(self, target: str, dest: Path) -> int:
        """Copy the tarball (a hard link would let a later edit change the cache)."""
        src = self._path(target)
        shutil.copyfile(src, dest)
        return os.path.getsize(dest)


class S3Store:
    """Tarballs under ``s3://bucket/prefix``; ``target`` is the key relative to the prefix."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        client: Any = None,
    ) -> None:
        if not bucket:
            raise UserInputError("S3 store needs a bucket name: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if client is None:
            # a fresh session reads credentials now (boto3's default one caches them); the
            # LOCAL policy fails in seconds, not minutes, when the endpoint does not answer
            session = new_session()
            client = aws_client("s3", LOCAL, session=session, endpoint_url=endpoint_url)
        self.endpoint_url = endpoint_url
        self._client = client
        self._checked = False  # check() passed once: `serve` checks before its banner

    @property
    def description(self) -> str:
        """The ``s3://bucket/prefix`` URL."""
        return f"s3://{self.bucket}/{self.prefix}"

    def _key(self, target: str) -> str:
        return self.prefix + validate_target(target)

    def _unreachable(self, exc: Exception) -> StoreUnavailableError:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return StoreUnavailableError(
            f"cannot reach the S3 store {self.description}{where}: {exc}; retry shortly"
        )

    def check(self) -> None:
        """List at most one key under the prefix: credentials present, endpoint reachable,
        bucket there. A listing refused for lack of permission is only logged (reading
        objects may still be allowed, as on SageMaker). Once it passed, a later call (the
        emulator's start after `serve`'s own) asks nothing again."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        if self._checked:
            return
        try:
            self._client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
            self._checked = True
        except NoCredentialsError:
            raise UserInputError(
                f"no AWS credentials for the S3 store {self.description}: set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE); a local "
                "S3-compatible server accepts any values"
            ) from None
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("AccessDenied", "AllAccessDisabled"):
                logger.warning("cannot list %s (%s); going on", self.description, code)
                self._checked = True
                return
            raise UserInputError(
                f"the S3 store {self.description} cannot be used ({code or 'error'}): {exc}"
            ) from None
        except BotoCoreError as exc:
            raise self._unreachable(exc) from None

    def _refused(self, target: str, exc: Exception) -> EmulatorError:
        """What S3's refusal of ``target`` means for the caller (:func:`s3_error_class`):
        only a missing object is "not found"."""
        url = f"{self.description}{target}"
        kind = s3_error_class(exc)
        if kind == "missing":
            return ModelNotFoundError(
                f"TargetModel {target!r} was not found at {url} ({exc})", target_model=target
            )
        if kind == "transient":
            return StoreUnavailableError(
                f"the S3 store could not give {url} after the client's retries ({exc}): S3 "
                "is throttling or failing; retry shortly"
            )
        return StoreAccessError(
            f"S3 refused to give {url} ({exc}): the credentials the store uses (on "
            "SageMaker, the model's execution role) need s3:GetObject on the object, and "
            "s3:ListBucket on the bucket to tell a missing key from a refused one (without "
            "it S3 answers 403 for a key that does not exist: check the TargetModel too)",
            target_model=target,
        )

    def stat(self, target: str) -> ArtifactInfo:
        """HEAD the object: size and ETag."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            head = self._client.head_object(Bucket=self.bucket, Key=self._key(target))
        except ClientError as exc:
            raise self._refused(target, exc) from exc
        except BotoCoreError as exc:
            raise self._unreachable(exc) from exc
        return ArtifactInfo(
            target=target,
            size_bytes=int(head["ContentLength"]),
            version=str(head.get("ETag", "")).strip('"'),
        )

    def fetch(self, target: str, dest: Path) -> int:
        """Download the object to ``dest``."""
        from boto3.exceptions import RetriesExceededError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.download_file(self.bucket, self._key(target), str(dest))
        except ClientError as exc:
            raise self._refused(target, exc) from exc
        except (BotoCoreError, RetriesExceededError) as exc:  # the latter: a broken stream
            raise self._unreachable(exc) from exc
        return os.path.getsize(dest)


#: what a TargetModel example is taken from: the names of model archives
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


def sample_targets(store: ModelStore, *, limit: int = 1) -> list[str] | None:
    """Up to ``limit`` TargetModel keys of model archives the store holds (a folder: in
    sorted order; S3: in key order, from the first listing page), for examples to show
    a user; ``[]`` when it holds none, None when it cannot be listed (a refused S3
    listing, a store of another kind)."""
    if isinstance(store, LocalStore):
        found = sorted(
            path.relative_to(store.root).as_posix()
            for path in store.root.rglob("*")
            if path.name.endswith(_ARCHIVE_SUFFIXES) and path.is_file()
        )
        return [t for t in found if not any(p.startswith(".") for p in t.split("/"))][:limit]
    if isinstance(store, S3Store):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            page = store._client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix)
        except (BotoCoreError, ClientError):
            return None
        keys = [str(o["Key"])[len(store.prefix) :] for o in page.get("Contents", [])]
        return [k for k in keys if k.endswith(_ARCHIVE_SUFFIXES)][:limit]
    return None


def open_store(spec: str | Path, *, s3_endpoint_url: str | None = None) -> ModelStore:
    """A store from ``DIR`` or ``s3://bucket/prefix`` (the endpoint from the argument or
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, read now)."""
    text = str(spec)
    if text.startswith("s3://"):
        bucket, _, prefix = text[len("s3://") :].partition("/")
        endpoint = (
            s3_endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        return S3Store(bucket, prefix, endpoint_url=endpoint)
    return LocalStore(text)


__all__ = [
    "ArtifactInfo",
    "InvalidTargetError",
    "LocalStore",
    "ModelStore",
    "S3Store",
    "open_store",
    "sample_targets",
    "validate_target",
]
