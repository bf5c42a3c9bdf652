"""The services' own input checks, where moto accepts what the service refuses.

Four kinds:

* the constraints in botocore's SageMaker model (``pattern``, ``enum`` and ``min``/``max``
  length of strings, ``min``/``max`` of numbers) that botocore does not enforce on the
  client (it checks a number's ``min`` only: ``botocore/validate.py``, ``range_check``) and
  moto does not check either; the service answers them with ``ValidationException``
  "1 validation error detected: Value 'x' at 'executionRoleArn' failed to satisfy
  constraint: ...". :func:`model_violations` walks the operation's input shape: strings
  (a pattern matches the whole value), the entries of lists and maps, a map's keys and
  values (each reported once, with every constraint of its shape).
* the page size of a ``List*``/``Describe*`` call (``MaxResults``, ``MaxRecords``) of
  SageMaker, CloudWatch and Application Auto Scaling, over its maximum (the member's
  ``max`` in botocore's model; Application Auto Scaling documents its ranges in prose
  only: :data:`~mmelocal.facts.autoscaling.MOST_MAX_RESULTS`). moto serves any size, and
  so did the pages the local AWS serves itself. :func:`page_size_problem` says which.
* the sizes the API reference states in prose: a model's containers' ``Environment`` maps,
  32 KB of keys and values together (:func:`environment_problem`).
* the multi-model rule the service applies at ``CreateModel``: the artifacts must be
  reachable ("Could not find model data at s3://..."); a ``MultiModel`` container's
  ``ModelDataUrl`` is a prefix, with or without a trailing ``/`` (no AWS source refuses
  one without; the SageMaker Python SDK's ``MultiDataModel`` passes it as given).
  :func:`model_data_problem` says what failed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeGuard

from mmelocal.errors import AwsServiceError
from mmelocal.facts.autoscaling import MOST_MAX_RESULTS
from mmelocal.facts.sagemaker import MAX_ENVIRONMENT_TOTAL_BYTES, environment_bytes

#: the services whose page sizes :func:`page_size_problem` checks (botocore's names)
_PAGED_SERVICES = ("sagemaker", "cloudwatch", "application-autoscaling")
#: the top-level members that size a page of an answer
_PAGE_SIZE_MEMBERS = ("MaxResults", "MaxRecords")


@functools.lru_cache(maxsize=8)
def _service_model(name: str) -> Any:
    from mmelocal.facts.aws import service_model

    return service_model(name)


def _sagemaker_model() -> Any:
    return _service_model("sagemaker")


@functools.lru_cache(maxsize=1)
def _paged_services() -> dict[str, Any]:
    """X-Amz-Target prefix -> the service model, for :data:`_PAGED_SERVICES`."""
    models = [_service_model(name) for name in _PAGED_SERVICES]
    return {model.metadata["targetPrefix"]: model for model in models}


def _validation_code(model: Any) -> str:
    """The code of the service's validation error: its model's ``ValidationException``
    shape's (CloudWatch: ``ValidationError``), else ``ValidationException``."""
    for shape in model.error_shapes:
        if shape.name == "ValidationException":
            return str(shape.metadata.get("error", {}).get("code", shape.name))
    return "ValidationException"


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
        found.extend(
            f"Value '{_shown(value)}' at '{where}' failed to satisfy constraint: {rule}"
            for rule in _length_rules(len(value), meta)
        )
        for index, item in enumerate(value):
            _walk(shape.member, item, f"{where}.{index + 1}.member", found)
    elif kind == "map" and isinstance(value, dict):
        _walk_map(shape, value, where, found)
    elif kind == "string" and isinstance(value, str):
        found.extend(
            f"Value '{value}' at '{where}' failed to satisfy constraint: {rule}"
            for rule in _string_rules(shape, value)
        )
    elif kind in ("integer", "long", "float", "double") and _is_number(value):
        found.extend(_range_violations(value, where, meta))


def _walk_map(shape: Any, value: dict[Any, Any], where: str, found: list[str]) -> None:
    """A map: its entry count, then its keys and its values, each reported once with every
    constraint of the key's or value's shape, however many entries break them (the
    service's words: "Map keys must satisfy constraint: [Member must have length less than
    or equal to 64, Member must have length greater than or equal to 1, Member must
    satisfy regular expression pattern: ...]"); a value that is a structure is walked."""
    head = f"Value '{_shown(value)}' at '{where}' failed to satisfy constraint:"
    found.extend(f"{head} {rule}" for rule in _length_rules(len(value), shape.metadata))
    for part, member, items in (("keys", shape.key, value), ("value", shape.value, value.values())):
        if member.type_name == "string" and any(
            isinstance(item, str) and _string_rules(member, item) for item in items
        ):
            found.append(
                f"{head} Map {part} must satisfy constraint: [{', '.join(_all_rules(member))}]"
            )
    if shape.value.type_name != "string":
        for key, item in value.items():
            _walk(shape.value, item, f"{where}.{key}", found)


def _shown(value: Any) -> str:
    """``value`` as the service echoes it (Java's ``toString``: ``[a, b]``, ``{k=v}``)."""
    if isinstance(value, list):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def _length_rules(length: int, meta: dict[str, Any]) -> list[str]:
    """The length constraints (``min``/``max`` of a string, list or map) ``length`` breaks."""
    rules = []
    if "min" in meta and length < meta["min"]:
        rules.append(f"Member must have length greater than or equal to {meta['min']}")
    if "max" in meta and length > meta["max"]:
        rules.append(f"Member must have length less than or equal to {meta['max']}")
    return rules


def _string_rules(shape: Any, value: str) -> list[str]:
    """The constraints of the string ``shape`` that ``value`` breaks. A pattern is matched
    against the whole value, as the service matches it (an unanchored ``[0-9a-zA-Z-]*``
    refuses ``table_map1``)."""
    meta = shape.metadata
    rules = _length_rules(len(value), meta)
    enum = getattr(shape, "enum", None)
    if enum and value not in enum:
        rules.append(f"Member must satisfy enum value set: [{', '.join(enum)}]")
    compiled = _compiled(meta["pattern"]) if "pattern" in meta else None
    if compiled is not None and compiled.fullmatch(value) is None:
        rules.append(f"Member must satisfy regular expression pattern: {meta['pattern']}")
    return rules


def _all_rules(shape: Any) -> list[str]:
    """Every constraint of the string ``shape``, in the service's order (the most, the
    least, the pattern): what it lists for a map's keys or values."""
    meta = shape.metadata
    rules = []
    if "max" in meta:
        rules.append(f"Member must have length less than or equal to {meta['max']}")
    if "min" in meta:
        rules.append(f"Member must have length greater than or equal to {meta['min']}")
    if "pattern" in meta:
        rules.append(f"Member must satisfy regular expression pattern: {meta['pattern']}")
    return rules


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _range_violations(value: float, where: str, meta: dict[str, Any]) -> list[str]:
    """The service's words for a number outside its member's ``min``/``max``."""
    found = []
    if value < meta.get("min", value):
        found.append(
            f"Value '{value}' at '{where}' failed to satisfy constraint: Member must "
            f"have value greater than or equal to {meta['min']}"
        )
    if value > meta.get("max", value):
        found.append(
            f"Value '{value}' at '{where}' failed to satisfy constraint: Member must "
            f"have value less than or equal to {meta['max']}"
        )
    return found


def _message(found: list[str]) -> str:
    noun = "error" if len(found) == 1 else "errors"
    return f"{len(found)} validation {noun} detected: " + "; ".join(found)


def model_violations(operation: str, params: dict[str, Any]) -> str | None:
    """The service's message for the input constraints ``params`` breaks, or None."""
    shape = _sagemaker_model().operation_model(operation).input_shape
    found: list[str] = []
    if shape is not None:
        _walk(shape, params, "", found)
    return _message(found) if found else None


def environment_problem(params: dict[str, Any]) -> str | None:
    """What the service says of a ``CreateModel`` whose containers' ``Environment`` maps hold
    more than :data:`~mmelocal.facts.sagemaker.MAX_ENVIRONMENT_TOTAL_BYTES` of keys and
    values together, or None. The API reference states the limit in prose ("the maximum
    length of all of their maps, combined, is also 32 KB"; botocore's model has no figure
    for it), so the wording is mmelocal's; the code is the service's validation error."""
    containers = [params.get("PrimaryContainer") or {}, *(params.get("Containers") or [])]
    total = sum(
        environment_bytes(c["Environment"])
        for c in containers
        if isinstance(c, dict) and isinstance(c.get("Environment"), dict)
    )
    if total <= MAX_ENVIRONMENT_TOTAL_BYTES:
        return None
    return (
        f"The Environment maps of the model's containers hold {total} bytes of keys and "
        f"values; the most is {MAX_ENVIRONMENT_TOTAL_BYTES // 1024} KB "
        f"({MAX_ENVIRONMENT_TOTAL_BYTES} bytes) for all containers together."
    )


def checks_page_size(target: str) -> bool:
    """Whether ``target`` (an ``X-Amz-Target`` header) names an operation of a service whose
    page sizes :func:`page_size_problem` checks."""
    return target.partition(".")[0] in _paged_services()


def page_size_problem(target: str, params: dict[str, Any]) -> AwsServiceError | None:
    """The service's refusal of the page size ``params`` ask of the operation ``target``
    names (an ``X-Amz-Target`` header), or None: a ``MaxResults``/``MaxRecords`` outside the
    member's ``min``/``max`` in botocore's model (the service's validation error, in its
    words), or outside the range the Application Auto Scaling API reference gives
    (``ValidationException``; the model has no bounds, so the wording is mmelocal's)."""
    prefix, _, operation = target.partition(".")
    model = _paged_services().get(prefix)
    if model is None or operation not in model.operation_names:
        return None
    shape = model.operation_model(operation).input_shape
    documented = model.service_name == "application-autoscaling"
    for name in _PAGE_SIZE_MEMBERS:
        value = params.get(name) if isinstance(params, dict) else None
        if shape is None or name not in shape.members or not _is_number(value):
            continue
        most = MOST_MAX_RESULTS.get(operation) if documented else None
        if most is not None and not 1 <= value <= most:
            return AwsServiceError(
                f"{name} must be between 1 and {most} for {operation} (Application Auto "
                f"Scaling API reference), got {value}; page through the rest with NextToken."
            )
        found = _range_violations(value, _camel(name), shape.members[name].metadata)
        if found:
            return AwsServiceError(_message(found), code=_validation_code(model))
    return None


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
    bucket does not exist. A ``MultiModel`` container needs at least one object under its
    prefix, taken as given (a trailing ``/`` or none); a single model needs the object
    itself.
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
        return None if keys else f"Could not find model data at {url}."
    if keys is None or key not in keys:
        return f"Could not find model data at {url}."
    return None


__all__ = [
    "checks_page_size",
    "environment_problem",
    "model_data_problem",
    "model_violations",
    "page_size_problem",
    "parse_s3_url",
]
