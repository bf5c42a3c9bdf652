"""Whose objects are under a prefix, and which SageMaker models read them.

An MME serves every object under its ``ModelDataUrl`` prefix (a tarball removed from the
store is served until it is deleted), and two endpoints on one prefix serve each other's
tarballs. mmelocal records, on each object it uploads (deploy and the endpoint bench), the
endpoint it was placed for (``x-amz-meta-mmelocal-endpoint``, beside the checksum). Deletions go by
both facts: only objects mmelocal uploaded for this endpoint, and none that another existing
model reads (its ``ModelDataUrl`` or ``ModelDataSource`` names the object or a prefix above
it), because deleting those takes models away from an endpoint the user did not name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mmelocal.aws.parallel import map_bounded
from mmelocal.aws.s3 import ENDPOINT_METADATA, SHA256_METADATA, listed_objects
from mmelocal.aws.session import aws_error, error_code, not_found
from mmelocal.deploy import resources as rs
from mmelocal.deploy.plan import DeployPlan, ObjectStep
from mmelocal.facts.aws import HEAD_OBJECT_REFUSALS, s3_error_class


@dataclass(frozen=True, kw_only=True)
class MmelocalObject:
    """An object mmelocal uploaded: its key, size, checksum and the endpoint it was
    deployed for, or the endpoint bench placed it under (None: recorded by no endpoint,
    an upload of mmelocal 2026-11-24 or earlier)."""

    key: str
    size_bytes: int
    sha256: str
    endpoint: str | None


@dataclass(frozen=True, kw_only=True)
class UnreadableObject:
    """An object whose HeadObject S3 refused (``code``: the status botocore makes the code
    of a HEAD's answer, ``400``, ``403``): whose it is cannot be known, so nothing deletes
    or overwrites it; the plan and undeploy name it and say why (:attr:`reason`)."""

    key: str
    size_bytes: int
    code: str

    @property
    def reason(self) -> str:
        """S3's answer and what it means (:data:`~mmelocal.facts.aws.HEAD_OBJECT_REFUSALS`):
        ``403 Forbidden, as when ...``."""
        cause = HEAD_OBJECT_REFUSALS.get(self.code)
        return f"{self.code} {cause}" if cause else self.code


def head_or_refusal(
    s3: Any, bucket: str, key: str, size_bytes: int
) -> Mapping[str, Any] | UnreadableObject | None:
    """HeadObject's answer for ``key``; None: gone since the listing. A refusal of this
    object (400 for an SSE-C object asked without its key, 403 without s3:GetObject on it)
    is an :class:`UnreadableObject`: one foreign object under the prefix does not stop the
    others being read; a transient error that outlived the retries, or one that is no
    answer of S3's, raises."""
    try:
        head: Mapping[str, Any] = s3.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if not_found(exc):  # deleted since the listing
            return None
        if error_code(exc) and s3_error_class(exc) == "refused":
            return UnreadableObject(key=key, size_bytes=size_bytes, code=error_code(exc))
        raise aws_error(exc, "HeadObject", f"s3://{bucket}/{key}") from exc
    return head


def recorded_object(key: str, size_bytes: int, head: Mapping[str, Any]) -> MmelocalObject | None:
    """What mmelocal recorded on ``key``, from its HeadObject answer ``head`` (None: the
    object carries no mmelocal checksum, it is not mmelocal's)."""
    metadata = head.get("Metadata", {})
    if SHA256_METADATA not in metadata:
        return None
    return MmelocalObject(
        key=key,
        size_bytes=size_bytes,
        sha256=str(metadata[SHA256_METADATA]),
        endpoint=metadata.get(ENDPOINT_METADATA) or None,
    )


def mmelocal_object(
    s3: Any, bucket: str, key: str, size_bytes: int
) -> MmelocalObject | UnreadableObject | None:
    """What mmelocal recorded on ``key`` (one HeadObject, :func:`head_or_refusal`); None:
    not mmelocal's, or gone since the listing; an :class:`UnreadableObject` when S3 refused
    the HeadObject."""
    head = head_or_refusal(s3, bucket, key, size_bytes)
    if head is None or isinstance(head, UnreadableObject):
        return head
    return recorded_object(key, size_bytes, head)


#: ``on_head(done, total)``: HeadObject calls answered so far, of how many
HeadProgress = Callable[[int, int], None]


def mmelocal_objects_of(
    s3: Any, bucket: str, objects: Sequence[tuple[str, int]], *, on_head: HeadProgress | None = None
) -> list[MmelocalObject | UnreadableObject | None]:
    """:func:`mmelocal_object` of each ``(key, size)``, in that order: the HeadObject calls
    go on a bounded pool of threads (:func:`~mmelocal.aws.parallel.map_bounded`), as one
    per object one after another took minutes for a store of hundreds of tarballs."""
    return map_bounded(
        lambda item: mmelocal_object(s3, bucket, item[0], item[1]), objects, on_done=on_head
    )


@dataclass(frozen=True)
class _Read:
    """One S3 location a model reads: an object, or every key under a prefix."""

    bucket: str
    key: str
    prefix: bool

    def covers(self, bucket: str, key: str) -> bool:
        if bucket != self.bucket:
            return False
        return key.startswith(self.key) if self.prefix else key == self.key


def _reads(container: Mapping[str, Any]) -> Iterator[_Read]:
    url = container.get("ModelDataUrl")
    if url:
        bucket, key = _split(url)
        # an MME's ModelDataUrl is a prefix; otherwise it names one .tar.gz
        yield _Read(bucket, key, container.get("Mode") == "MultiModel" or key.endswith("/"))
    sources = [container.get("ModelDataSource") or {}]
    sources += [extra for extra in container.get("AdditionalModelDataSources") or []]
    for source in sources:
        s3 = source.get("S3DataSource") or {}
        if s3.get("S3Uri"):
            bucket, key = _split(s3["S3Uri"])
            yield _Read(bucket, key, s3.get("S3DataType") != "S3Object")


def _split(uri: str) -> tuple[str, str]:
    rest = uri.removeprefix("s3://")
    bucket, _, key = rest.partition("/")
    return bucket, key


def model_reads(described: Mapping[str, Any]) -> list[_Read]:
    """Every S3 location a DescribeModel answer reads (all its containers)."""
    containers = [described.get("PrimaryContainer") or {}]
    containers += list(described.get("Containers") or [])
    return [read for container in containers for read in _reads(container)]


class AccountReads:
    """What the account's models read, for the question "which model reads these keys":
    one ListModels listing and one DescribeModel per model (no API finds a model by what
    it reads: ListModels answers names, ARNs and creation times only, and a model of any
    name may read any prefix), many at once, made at the first question and kept for the
    next ones (an undeploy asks once per prefix). ``known`` holds DescribeModel answers
    read already (not asked again); ListTags only for a model that reads a key."""

    def __init__(
        self,
        sagemaker: Any,
        *,
        endpoint: str,
        known: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.sagemaker, self.endpoint = sagemaker, endpoint
        self.known = dict(known or {})
        self._reads: dict[str, tuple[str, list[_Read]]] | None = None
        self._owners: dict[str, str | None] = {}

    def _all(self, where: str) -> dict[str, tuple[str, list[_Read]]]:
        """model name -> (its ARN, what it reads), for every model that exists."""
        if self._reads is not None:
            return self._reads
        sm = self.sagemaker
        try:
            pages = list(sm.get_paginator("list_models").paginate())
        except Exception as exc:
            raise aws_error(exc, "ListModels", where) from exc
        names = [str(m["ModelName"]) for page in pages for m in page.get("Models", [])]
        asked = [n for n in names if n not in self.known]

        def describe(name: str) -> dict[str, Any] | None:
            return rs.describe(sm, "DescribeModel", ModelName=name)

        answers = dict(zip(asked, map_bounded(describe, asked), strict=True))
        self._reads = {}
        for name in names:
            described = self.known.get(name) or answers.get(name)
            if described:  # None: deleted since the listing
                self._reads[name] = (str(described["ModelArn"]), model_reads(described))
        return self._reads

    def readers(self, bucket: str, keys: Iterable[str]) -> dict[str, list[str]]:
        """``model name -> keys it reads`` for every model, except those mmelocal created
        for the endpoint, that reads one of ``keys`` in ``bucket``."""
        keys = list(keys)
        found: dict[str, list[str]] = {}
        if not keys:
            return found
        for name, (arn, reads) in self._all(f"s3://{bucket}").items():
            read = [k for k in keys if any(r.covers(bucket, k) for r in reads)]
            if not read:
                continue
            if name not in self._owners:
                self._owners[name] = rs.owner(self.sagemaker, arn)
            if self._owners[name] != self.endpoint:
                found[name] = read
        return found


def readers(
    clients: Any, bucket: str, keys: Iterable[str], *, endpoint: str
) -> dict[str, list[str]]:
    """``model name -> keys it reads`` for every existing model, except those mmelocal
    created for ``endpoint``, that reads one of ``keys`` (:class:`AccountReads`: a
    DescribeModel per model, none when ``keys`` is empty)."""
    return AccountReads(clients.sagemaker, endpoint=endpoint).readers(bucket, keys)


def readers_text(found: Mapping[str, list[str]]) -> str:
    """``model m (3 objects), model n (1 object)``."""
    return ", ".join(
        f"model {name} ({len(keys)} object{'s' if len(keys) != 1 else ''})"
        for name, keys in sorted(found.items())
    )


#: the plan's note on an object that records no endpoint (see :data:`UNRECORDED_RULE`)
UNRECORDED_NOTE = "uploaded by mmelocal with no endpoint recorded (2026-11-24 or earlier)"

#: the rule for an object with mmelocal's checksum and no endpoint recorded (uploaded by
#: mmelocal 2026-11-24 or earlier, by a deploy or by the endpoint bench): nothing proves
#: which endpoint it was placed for, so nothing deletes it unless the user names it theirs
#: (``deploy --prune-unrecorded``, ``undeploy --unrecorded``), and even then not while
#: another model reads it; deploy and undeploy say where such objects are
UNRECORDED_RULE = (
    "nothing proves whose they are, so mmelocal deletes them only when you say they are "
    "this endpoint's"
)


def count_text(count: int, size_bytes: int) -> str:
    """``4 objects (4,597 bytes, 0.0 MiB)``."""
    from mmelocal.units import mib

    noun = "object" if count == 1 else "objects"
    return f"{count} {noun} ({size_bytes:,} bytes, {mib(size_bytes, digits=1)})"


def removed_objects(
    clients: Any,
    bucket: str,
    prefix: str,
    store_keys: set[str],
    *,
    endpoint: str,
    prune: bool,
    prune_unrecorded: bool = False,
    on_head: HeadProgress | None = None,
) -> list[ObjectStep]:
    """One step per object under ``prefix`` that is not in the store (the endpoint serves
    it all the same): ``delete`` when mmelocal uploaded it for ``endpoint`` (or, with
    ``prune_unrecorded``, for no endpoint recorded) and no other model reads it (with
    ``prune``), else ``keep`` with the reason in ``note`` (also for an object S3 would not
    let mmelocal read: :func:`unreadable_note`). ``on_head`` hears the HeadObject calls as
    they are answered."""
    steps: list[ObjectStep] = []
    mine: dict[str, MmelocalObject] = {}
    owners = (endpoint, None) if prune_unrecorded else (endpoint,)
    listed = sorted(listed_objects(clients.s3, bucket, prefix).items())
    removed = [(key, size) for key, (size, _) in listed if key not in store_keys]
    items = mmelocal_objects_of(clients.s3, bucket, removed, on_head=on_head)
    for (key, size), item in zip(removed, items, strict=True):
        if isinstance(item, UnreadableObject):
            steps.append(_step(key, size, None, "keep", unreadable_note(item)))
            continue
        if item is not None and item.endpoint in owners and prune:
            mine[key] = item
            continue
        note = whose_note(item, endpoint) or "not pruned (--no-prune)"
        steps.append(_step(key, size, item, "keep", note))
    read = readers(clients, bucket, mine, endpoint=endpoint)
    for key, item in mine.items():
        by = {name: keys for name, keys in read.items() if key in keys}
        if by:
            steps.append(_step(key, item.size_bytes, item, "keep", f"read by {readers_text(by)}"))
        else:
            steps.append(_step(key, item.size_bytes, item, "delete", "not in the store"))
    return sorted(steps, key=lambda step: step.key)


def whose_note(item: MmelocalObject | None, endpoint: str) -> str:
    """Whose an object is when it is not ``endpoint``'s ("" when mmelocal uploaded it for
    ``endpoint``): ``not uploaded by mmelocal``, :data:`UNRECORDED_NOTE` or ``deployed for
    endpoint E``."""
    if item is None:
        return "not uploaded by mmelocal"
    if item.endpoint is None:
        return UNRECORDED_NOTE
    if item.endpoint != endpoint:
        return f"deployed for endpoint {item.endpoint}"
    return ""


def unreadable_note(item: UnreadableObject) -> str:
    """The plan's note on an object S3 would not let mmelocal read (kept)."""
    return f"could not be read (HeadObject answered {item.reason}): kept, whoever's it is"


def unrecorded_notice(plan: DeployPlan) -> str | None:
    """Where the objects that record no endpoint are (the endpoint serves them), why
    deploy keeps them and how to delete them (None: there are none)."""
    kept = [o for o in plan.objects_by_action("keep") if o.note == UNRECORDED_NOTE]
    if not kept:
        return None
    sample = ", ".join(o.key for o in kept[:3]) + (
        f", ... {len(kept) - 3} more" if len(kept) > 3 else ""
    )
    return (
        f"{count_text(len(kept), sum(o.size_bytes for o in kept))} under "
        f"{plan.model_data_url} record no endpoint (uploaded by mmelocal 2026-11-24 or "
        f"earlier: {sample}): {plan.endpoint_name} serves them, and {UNRECORDED_RULE}. If "
        "they are, run this deploy again with --prune-unrecorded (those another model "
        "reads are kept still); the JSON outcome lists them all"
    )


#: the SageMaker MME guide, "Add or Remove Models": an object replaced in S3 is not what
#: an instance that loaded the old one serves
OVERWRITE_ADVICE = (
    "Don't overwrite model artifacts in Amazon S3 because the old version of the model might "
    "still be loaded in the containers or on the storage volume of the instances on the "
    "endpoint"
)


def replaced_notice(plan: DeployPlan) -> str | None:
    """Which store tarballs replace an object at their key, and what a live endpoint serves
    meanwhile (None: none does)."""
    replaced = [o for o in plan.objects if o.note.startswith("replaces ")]
    if not replaced:
        return None
    named = "; ".join(f"{o.key} ({o.note})" for o in replaced[:5]) + (
        f"; ... {len(replaced) - 5} more" if len(replaced) > 5 else ""
    )
    updated = any(s.operation == "UpdateEndpoint" and s.action == "update" for s in plan.steps)
    then = (
        f"the store's digest changes, so UpdateEndpoint puts new instances in place; until "
        f"they take over (and if the update rolls back) the running instances of "
        f"{plan.endpoint_name} answer with the old model where they have it loaded"
        if updated
        else "an endpoint already serving the prefix answers with the old model where it "
        "has it loaded, until it unloads it"
    )
    return (
        f"{count_text(len(replaced), sum(o.size_bytes for o in replaced))} replace the "
        f"object at their key under {plan.model_data_url}: {named}. SageMaker's instances "
        f'keep a model they loaded (the MME guide: "{OVERWRITE_ADVICE}"; it advises a '
        f"new name for a new version): {then}"
    )


def _step(key: str, size: int, item: MmelocalObject | None, action: str, note: str) -> ObjectStep:
    sha256 = item.sha256 if item is not None else ""
    return ObjectStep(key=key, path="", size_bytes=size, sha256=sha256, action=action, note=note)


__all__ = [
    "OVERWRITE_ADVICE",
    "UNRECORDED_NOTE",
    "UNRECORDED_RULE",
    "AccountReads",
    "HeadProgress",
    "MmelocalObject",
    "UnreadableObject",
    "count_text",
    "head_or_refusal",
    "mmelocal_object",
    "mmelocal_objects_of",
    "model_reads",
    "readers",
    "readers_text",
    "recorded_object",
    "removed_objects",
    "replaced_notice",
    "unreadable_note",
    "unrecorded_notice",
    "whose_note",
]
