"""A store tarball whose key already holds an object with other bytes: whose that object
is decides. One mmelocal uploaded for this endpoint is the update path (replaced, and the
plan says so); one it did not (the user's own, another tool's, another endpoint's) is not
destroyed unasked, and one whose HeadObject S3 refuses is never overwritten (local AWS,
moto; the refusals answered as S3 does, see ``deploy_helpers.refuse_heads``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from deploy_helpers import cli_args, refuse_heads, run_split

from mmelocal.aws.objects import object_metadata
from mmelocal.aws.session import connect
from mmelocal.deploy.upload import plan_objects
from mmelocal.errors import DeployError

KEY = "models/model-2.tar.gz"
THEIRS = b"the user's own model.tar.gz, not in the store"


def _body(bucket: str, key: str = KEY) -> bytes:
    return bytes(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def _dry_run(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, name: str, *more: str
) -> tuple[int, str]:
    code, out, err = run_split(capsys, *cli_args(store, bucket, name, "--dry-run", *more))
    return code, " ".join((out + err).split())


def test_an_object_mmelocal_did_not_upload_at_a_store_key_is_refused_not_replaced(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str
) -> None:
    """A store tarball whose key held the user's own object (no mmelocal metadata, other
    bytes) was planned as an upload and overwrote it, unread. The deploy is now refused
    before anything changes, naming the key and the way on; --replace-foreign says it may
    go (the plan then says what it replaces)."""
    s3 = boto3.client("s3")
    s3.put_object(Bucket=bucket, Key=KEY, Body=THEIRS)
    code, text = _dry_run(capsys, store, bucket, endpoint_name)
    assert code == 2, text
    assert KEY in text and "not uploaded by mmelocal" in text, text
    assert "--replace-foreign" in text and "new name" in text, text
    assert _body(bucket) == THEIRS

    code, text = _run_deploy(capsys, store, bucket, endpoint_name)
    assert code == 2 and _body(bucket) == THEIRS, text
    assert "models/model-0.tar.gz" not in _listed(bucket)  # refused before any upload

    code, text = _dry_run(capsys, store, bucket, endpoint_name, "--replace-foreign")
    assert code == 0, text
    assert f"{KEY} (replaces an object not uploaded by mmelocal (--replace-foreign))" in text
    assert "might still be loaded" in text, text


def test_another_endpoints_object_at_a_store_key_is_refused_this_endpoints_is_replaced(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    """An object mmelocal uploaded for this endpoint is the update path (a new build of the
    same model): replaced, its step noting it. One uploaded for another endpoint on the
    prefix is that endpoint's model: refused; one with no endpoint recorded (mmelocal
    2026-11-24 or earlier) is replaced once --prune-unrecorded says such objects are this
    endpoint's."""
    clients = connect()
    s3 = clients.s3
    s3.put_object(Bucket=bucket, Key=KEY, Body=b"old build",
                  Metadata=object_metadata("1" * 64, endpoint_name))  # fmt: skip
    steps = {s.key: s for s in plan_objects(s3, bucket, "models/", store, endpoint=endpoint_name)}
    assert steps[KEY].action == "upload"
    assert steps[KEY].note.startswith("replaces the object an earlier deploy placed"), steps[KEY]
    assert steps["models/model-0.tar.gz"].note == ""

    s3.put_object(Bucket=bucket, Key=KEY, Body=b"old build",
                  Metadata=object_metadata("1" * 64, "another-ep"))  # fmt: skip
    with pytest.raises(DeployError, match=rf"{KEY} \(deployed for endpoint another-ep\)"):
        plan_objects(s3, bucket, "models/", store, endpoint=endpoint_name)

    s3.put_object(Bucket=bucket, Key=KEY, Body=b"old build",
                  Metadata={"mmelocal-sha256": "1" * 64})  # fmt: skip
    with pytest.raises(DeployError, match="no endpoint recorded"):
        plan_objects(s3, bucket, "models/", store, endpoint=endpoint_name)
    mine = plan_objects(s3, bucket, "models/", store, endpoint=endpoint_name, unrecorded_mine=True)
    assert {s.key: s.action for s in mine}[KEY] == "upload"


def test_a_store_key_whose_head_s3_refuses_is_never_overwritten(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, endpoint_name: str
) -> None:
    """A HeadObject S3 refused on a store key (400: SSE-C; 403: no s3:GetObject) stopped
    the plan with a bare 'HeadObject failed ... 400' when the sizes matched, and was
    overwritten unread when they did not. It is now refused with the key, S3's answer and
    what to do, --replace-foreign or not: whose it is cannot be known."""
    clients = connect()
    s3 = clients.s3
    for key in (KEY, "models/model-0.tar.gz"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"sse-c bytes")
    refuse_heads(s3, {KEY: 400, "models/model-0.tar.gz": 403})
    for replace in (False, True):
        with pytest.raises(DeployError) as refused:
            plan_objects(s3, bucket, "models/", store, endpoint=endpoint_name,
                         replace_foreign=replace)  # fmt: skip
        text = str(refused.value)
        assert f"{KEY} (HeadObject answered 400" in text and "SSE-C" in text, text
        assert "models/model-0.tar.gz (HeadObject answered 403" in text, text
        assert "another name" in text, text
        assert refused.value.keys == ("models/model-0.tar.gz", KEY)  # type: ignore[attr-defined]


def test_only_the_keys_about_to_be_overwritten_are_read(
    store: Path, bucket: str, endpoint_name: str
) -> None:
    """The owner is read with one HeadObject per key whose object differs, none for the
    keys that hold the same bytes (ETag) or nothing."""
    clients = connect()
    s3 = clients.s3
    s3.upload_file(str(store / "model-0.tar.gz"), bucket, "models/model-0.tar.gz")
    s3.put_object(Bucket=bucket, Key=KEY, Body=b"old build",
                  Metadata=object_metadata("1" * 64, endpoint_name))  # fmt: skip
    heads: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        heads.append(str(params["Key"]))

    s3.meta.events.register("provide-client-params.s3.HeadObject", count)
    steps = plan_objects(s3, bucket, "models/", store, endpoint=endpoint_name)
    assert heads == [KEY]
    assert [s.action for s in steps] == ["skip", "copy", "upload", "upload"]


def _run_deploy(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, name: str
) -> tuple[int, str]:
    code, out, err = run_split(capsys, *cli_args(store, bucket, name, "--max-instances", "1"))
    return code, " ".join((out + err).split())


def _listed(bucket: str) -> list[str]:
    found = boto3.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])
    return [str(o["Key"]) for o in found]
