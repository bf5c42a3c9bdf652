"""The SageMaker service's own input checks, where moto accepts what the service refuses.

Two kinds:

* the constraints in botocore's service model (``pattern``, ``enum`` and ``min``/``max``
  length of strings, ``min`` of numbers) that botocore does not enforce on the client and
  moto does not check either; the service answers them with ``ValidationException``
  "1 validation error detected: Value 'x' at 'executionRoleArn' failed to satisfy
  constraint: ...". :func:`model_violations` walks the operation's input shape.
* the multi-model rules the service applies at ``CreateModel``: the artifacts must be
  reachable ("Could not find model data at s3://..."), and a ``MultiModel`` container's
  ``ModelDataUrl`` is a prefix. :func:`model_data_problem` says which one failed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any


@functools.lru_cache(maxsize=1)
def _sagemaker_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:  # a Java-only construct: the service checks it, we cannot
        return None


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _walk(shape: Any, value: Any, where: str, found: list[str]) -> None:
    kind = shape.type_name
    meta = shape.metadata
    if kind == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                path = f"{where}.{_camel(name)}" if where else _camel(name)
                _walk(member, value[name], path, found)
    elif kind == "list" and isinstance(value, list):
        for index, item in enumerate(value):
            _walk(shape.member, item, f"{where}.{index + 1}.member", found)
    elif kind == "map" and isinstance(value, dict):
        for key, item in value.items():
            _walk(shape.value, item, f"{where}.{key}", found)
    elif kind == "string" and isinstance(value, str):
        if "min" in meta and len(value) < meta["min"]:
            found.append(
                f"Value '{value}' at '{where}' failed to satisfy constraint: Member must "
                f"have length greater than or equal to {meta['min']}"
            )
        if "max" in meta and len(value) > meta["max"]:
            found.append(
                f"Value '{value}' at '{where}' failed to satisfy constraint: Member must "
                f"have length less than or equal to {meta['max']}"
            )
        enum = getattr(shape, "enum", None)
        if enum and value not in enum:
            found.append(
                f"Value '{value}' at '{where}' failed to satisfy constraint: Member must "
                f"satisfy enum value set: [{', '.join(enum)}]"
            )
        compiled = _compiled(meta["pattern"]) if "pattern" in meta else None
        if compiled is not None and compiled.search(value) is None:
            found.append(
                f"Value '{value}' at '{where}' failed to satisfy constraint: Member must "
                f"satisfy regular expression pattern: {meta['pattern']}"
            )
    elif kind in ("integer", "long") and isinstance(value, int) and value < meta.get("min", value):
        found.append(
            f"Value '{value}' at '{where}' failed to satisfy constraint: Member must "
            f"have value greater than or equal to {meta['min']}"
        )


def model_violations(operation: str, params: dict[str, Any]) -> str | None:
    """The service's message for the input constraints ``params`` breaks, or None."""
    shape = _sagemaker_model().operation_model(operation).input_shape
    found: list[str] = []
    if shape is not None:
        _walk(shape, params, "", found)
    if not found:
        return None
    count = len(found)
    noun = "error" if count == 1 else "errors"
    return f"{count} validation {noun} detected: " + "; ".join(found)


def parse_s3_url(url: str) -> tuple[str, str] | None:
    """``(bucket, key)`` of an ``s3://bucket/key`` or ``https://s3...amazonaws.com/bucket/key``
    URL (the two forms ``ModelDataUrl`` accepts), else None."""
    if url.startswith("s3://"):
        bucket, _, key = url[len("s3://") :].partition("/")
        return (bucket, key) if bucket else None
    match = re.match(r"https://s3[.-][^/]*amazonaws\.com(?:\.cn)?/([^/]+)/?(.*)$", url)
    if match:
        return match.group(1), match.group(2)
    return None


def model_data_problem(
    container: dict[str, Any], *, keys_under: Callable[[str, str], list[str] | None]
) -> str | None:
    """What the service says about a container's ``ModelDataUrl`` at ``CreateModel``, or None.

    ``keys_under(bucket, prefix)`` lists (at most a few) keys under a prefix, None when the
    bucket does not exist. A ``MultiModel`` container needs a prefix ending in ``/`` with
    at least one object under it; a single model needs the object itself.
    """
    url = container.get("ModelDataUrl")
    if not url:
        return None
    located = parse_s3_url(url)
    if located is None:
        return f"Could not find model data at {url}."
    bucket, key = located
    keys = keys_under(bucket, key)
    if container.get("Mode") == "MultiModel":
        if not key.endswith("/") and key:
            return (
                f"Could not find model data at {url}. For Mode MultiModel, ModelDataUrl is "
                f"the S3 prefix that holds the model tarballs and must end with '/' "
                f"(e.g. {url}/)."
            )
        if not keys:
            return f"Could not find model data at {url}."
        return None
    if keys is None or key not in keys:
        return f"Could not find model data at {url}."
    return None


__all__ = ["model_data_problem", "model_violations", "parse_s3_url"]
