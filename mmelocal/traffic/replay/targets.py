"""Where a replay's requests go (the invocations URL) and the check, before anything is
sent, that the store holds every model the trace names."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from mmelocal.errors import UserInputError
from mmelocal.traffic.trace import Trace


def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url``."""
    parts = urlparse(url)
    return f"{parts.scheme}://{parts.netloc}"


def check_targets(trace: Trace, store: str) -> None:
    """Fail before sending when the store (a folder or ``s3://bucket/prefix/``) lacks a
    target of the trace."""
    missing: list[str]
    if store.startswith("s3://"):
        from mmelocal.facts.aws import CONTROL_PLANE, aws_client

        parsed = urlparse(store)
        prefix = parsed.path.lstrip("/")
        s3 = aws_client("s3", CONTROL_PLANE)
        have: set[str] = set()
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=parsed.netloc, Prefix=prefix
        ):
            have.update(o["Key"][len(prefix) :] for o in page.get("Contents", []))
        missing = [m for m in trace.models if m not in have]
    else:
        root = Path(store)
        if not root.is_dir():
            raise UserInputError(f"model store {root} is not a folder")
        missing = [m for m in trace.models if not (root / m).is_file()]
    if missing:
        first = int(np.flatnonzero(trace.model_ids == trace.models.index(missing[0]))[0])
        raise UserInputError(
            f"the store {store} lacks {len(missing)} TargetModel(s) the trace names, e.g. "
            f"{missing[0]!r} (trace row {first + 2}, counting the header as line 1): add the "
            "tarballs (mmelocal traffic make --store DIR --tarball T fills a folder) or fix the "
            "trace"
        )


def invocations_url(url: str, endpoint: str) -> str:
    """``URL/endpoints/NAME/invocations`` (a URL that already ends so is kept)."""
    if "/endpoints/" in url and url.rstrip("/").endswith("/invocations"):
        return url
    return f"{url.rstrip('/')}/endpoints/{endpoint}/invocations"
