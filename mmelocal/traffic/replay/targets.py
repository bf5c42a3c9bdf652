"""Where a replay's requests go (the invocations URL) and the check, before anything is
sent, that the store holds every model the trace names."""

from __future__ import annotations

from urllib.parse import urlparse

import numpy as np

from mmelocal.emulator.store import ModelStore, S3Store, open_store, validate_target
from mmelocal.errors import InvalidTargetError, ModelNotFoundError, UserInputError
from mmelocal.traffic.trace import Trace


def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url``."""
    parts = urlparse(url)
    return f"{parts.scheme}://{parts.netloc}"


def check_targets(trace: Trace, store: str) -> None:
    """Fail before sending when the store (a folder or ``s3://bucket/prefix``) lacks a
    target of the trace.

    The store is read as ``mmelocal serve --store`` reads it (the emulator's
    :func:`~mmelocal.emulator.store.open_store`): an S3 prefix is a folder whether or not
    it ends in ``/`` (``s3://b/pre`` holds ``pre/a.tar.gz`` as ``a.tar.gz``, not
    ``preview/...``), and a folder serves only the files inside it."""
    opened = open_store(store)
    missing: list[str]
    if isinstance(opened, S3Store):
        from mmelocal.facts.aws import CONTROL_PLANE, aws_client

        prefix = opened.prefix  # the emulator's key of a target is prefix + target
        s3 = aws_client("s3", CONTROL_PLANE, endpoint_url=opened.endpoint_url)
        have: set[str] = set()
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=opened.bucket, Prefix=prefix
        ):
            have.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        missing = [m for m in trace.models if m not in have or not _valid(m)]
    else:
        missing = [m for m in trace.models if not _serves(opened, m)]
    if missing:
        first = int(np.flatnonzero(trace.model_ids == trace.models.index(missing[0]))[0])
        raise UserInputError(
            f"the store {store} lacks {len(missing)} TargetModel(s) the trace names, e.g. "
            f"{missing[0]!r} (trace row {first + 2}, counting the header as line 1): add the "
            "tarballs (mmelocal traffic make --store DIR --tarball T fills a folder) or fix the "
            "trace"
        )


def _valid(target: str) -> bool:
    """Whether the emulator takes ``target`` as a key at all (no ``..``, no leading ``/``)."""
    try:
        validate_target(target)
    except InvalidTargetError:
        return False
    return True


def _serves(store: ModelStore, target: str) -> bool:
    """Whether the emulator finds ``target`` in ``store`` (a folder: a quick stat)."""
    try:
        store.stat(target)
    except (ModelNotFoundError, InvalidTargetError):
        return False
    return True


def invocations_url(url: str, endpoint: str) -> str:
    """``URL/endpoints/NAME/invocations`` (a URL that already ends so is kept)."""
    if "/endpoints/" in url and url.rstrip("/").endswith("/invocations"):
        return url
    return f"{url.rstrip('/')}/endpoints/{endpoint}/invocations"
