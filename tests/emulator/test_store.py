"""Model stores and TargetModel validation (the S3 store against the session's local AWS,
moto's S3 on loopback)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mmelocal.emulator.store import (
    InvalidTargetError,
    LocalStore,
    S3Store,
    open_store,
    validate_target,
)
from mmelocal.errors import EmulatorError, ModelNotFoundError, UserInputError
from mmelocal.facts.sagemaker import MAX_TARGET_MODEL_LENGTH
from mmelocal.runtime.server_config import pick_free_port

if TYPE_CHECKING:
    from mmelocal.localaws import LocalAws

BAD_TARGETS = [
    "",
    "../model.tar.gz",
    "a/../../b.tar.gz",
    "a/..",
    "/etc/passwd",
    "./model.tar.gz",
    "a//b.tar.gz",
    "model\x00.tar.gz",
    "model\n.tar.gz",
    "model\x7f.tar.gz",
    "a\\b.tar.gz",
    " model.tar.gz",
    "x" * (MAX_TARGET_MODEL_LENGTH + 1),
]


@pytest.mark.parametrize("target", BAD_TARGETS)
def test_bad_targets_are_refused_with_a_message(target: str) -> None:
    with pytest.raises(InvalidTargetError) as info:
        validate_target(target)
    assert "TargetModel" in str(info.value)


@pytest.mark.parametrize("target", ["model-7.tar.gz", "team/a/model.tar.gz", "m..x.tar.gz"])
def test_good_targets_pass(target: str) -> None:
    assert validate_target(target) == target


def test_local_store(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.tar.gz").write_bytes(b"abc")
    (tmp_path.parent / "outside.tar.gz").write_bytes(b"x")
    (tmp_path / "link.tar.gz").symlink_to(tmp_path.parent / "outside.tar.gz")
    store = LocalStore(tmp_path)
    assert store.stat("sub/m.tar.gz").size_bytes == 3
    dest = tmp_path.parent / "copy.tar.gz"
    assert store.fetch("sub/m.tar.gz", dest) == 3
    with pytest.raises(ModelNotFoundError, match="not found"):
        store.stat("missing.tar.gz")
    with pytest.raises(ModelNotFoundError):
        store.stat("link.tar.gz")  # a symlink leading out of the store is not served
    with pytest.raises(ModelNotFoundError):
        store.stat("sub")
    with pytest.raises(UserInputError, match="does not exist"):
        LocalStore(tmp_path / "nope")
    with pytest.raises(UserInputError, match="is a file, not a folder"):
        LocalStore(tmp_path / "sub" / "m.tar.gz")


def test_open_store_kinds(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path), LocalStore)
    s3 = open_store("s3://bucket/some/prefix/", s3_endpoint_url="http://127.0.0.1:1")
    assert isinstance(s3, S3Store)
    assert s3.description == "s3://bucket/some/prefix/"


def test_s3_store_against_the_local_aws(
    local_aws_env: LocalAws, bucket: str, tmp_path: Path
) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=local_aws_env.url, region_name="us-east-1")
    client.put_object(Bucket=bucket, Key="pre/team/m.tar.gz", Body=b"hello")
    store = S3Store(bucket, "pre", endpoint_url=local_aws_env.url)
    info = store.stat("team/m.tar.gz")
    assert info.size_bytes == 5 and info.version
    assert store.fetch("team/m.tar.gz", tmp_path / "m.tar.gz") == 5
    with pytest.raises(ModelNotFoundError, match=re.escape(f"s3://{bucket}/pre/missing.tar.gz")):
        store.stat("missing.tar.gz")
    with pytest.raises(InvalidTargetError):
        store.stat("../pre/team/m.tar.gz")
    listed: list[str] = []
    store._client.meta.events.register(
        "before-call.s3.ListObjectsV2", lambda **_: listed.append("list")
    )
    store.check()
    store.check()  # the emulator's start after `serve`'s own check: nothing asked again
    assert listed == ["list"]
    with pytest.raises(UserInputError, match="NoSuchBucket"):
        S3Store("no-such-bucket", endpoint_url=local_aws_env.url).check()


def test_s3_store_without_credentials_fails_at_check(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = S3Store("bucket", "prefix", endpoint_url="http://127.0.0.1:1")
    with pytest.raises(UserInputError, match=r"no AWS credentials .*AWS_ACCESS_KEY_ID"):
        store.check()


def test_s3_store_unreachable_endpoint_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    port = pick_free_port()  # nothing listens there
    store = S3Store("bucket", endpoint_url=f"http://127.0.0.1:{port}")
    t0 = time.monotonic()
    with pytest.raises(EmulatorError, match=rf"cannot reach the S3 store .*127\.0\.0\.1:{port}"):
        store.check()
    assert time.monotonic() - t0 < 30


@pytest.fixture
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "x")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.mark.parametrize("status", [403, 404, 500, 503])
@pytest.mark.usefixtures("fake_credentials")
def test_s3_refusals_are_told_apart(status: int, tmp_path: Path) -> None:
    """Only a missing object is "not found". A 403 is a permission the credentials lack
    (S3 answers 403 for a missing key too when they lack s3:ListBucket: HeadObject's API
    reference), 5xx and throttling a store that a retry may serve."""
    from s3_refusals import refusing_s3, url_of

    from mmelocal.errors import StoreAccessError, StoreUnavailableError

    with refusing_s3({"pre/m.tar.gz": status}) as server:
        store = S3Store("bucket", "pre", endpoint_url=url_of(server))
        expected: type[Exception] = {
            403: StoreAccessError,
            404: ModelNotFoundError,
            500: StoreUnavailableError,
            503: StoreUnavailableError,
        }[status]
        with pytest.raises(expected) as info:
            store.stat("m.tar.gz")
    message = str(info.value)
    assert "s3://bucket/pre/m.tar.gz" in message
    if status == 403:
        assert "s3:GetObject" in message and "s3:ListBucket" in message
    elif status == 404:
        assert "not found" in message
    else:
        assert "retry" in message
        assert len(server.requests) == 3  # the LOCAL policy's 2 retries came first


@pytest.mark.usefixtures("fake_credentials")
def test_a_download_refused_after_the_head_is_told_apart_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GetObject's own refusal (S3's error document, here AccessDenied) is classed as
    HeadObject's."""
    from s3_refusals import refusing_s3, url_of

    from mmelocal.errors import StoreAccessError

    with refusing_s3({"HEAD m.tar.gz": 200, "GET m.tar.gz": 403}) as server:
        store = S3Store("bucket", endpoint_url=url_of(server))
        with pytest.raises(StoreAccessError, match="AccessDenied"):
            store.fetch("m.tar.gz", tmp_path / "m.tar.gz")


def test_sample_targets_of_a_folder_and_an_s3_prefix(
    local_aws_env: LocalAws, bucket: str, tmp_path: Path
) -> None:
    """What ``serve``'s banner offers as a TargetModel: a model archive the store holds."""
    import boto3

    from mmelocal.emulator.store import sample_targets

    folder = tmp_path / "store"
    (folder / "team").mkdir(parents=True)
    (folder / "notes.txt").write_text("not a model")
    assert sample_targets(LocalStore(folder)) == []
    (folder / "team" / "b.tar.gz").write_bytes(b"x")
    (folder / "a.tgz").write_bytes(b"x")
    assert sample_targets(LocalStore(folder), limit=5) == ["a.tgz", "team/b.tar.gz"]
    client = boto3.client("s3", endpoint_url=local_aws_env.url, region_name="us-east-1")
    store = S3Store(bucket, "sample", endpoint_url=local_aws_env.url)
    assert sample_targets(store) == []
    client.put_object(Bucket=bucket, Key="sample/x/m-1.tar.gz", Body=b"x")
    client.put_object(Bucket=bucket, Key="samplex/other.tar.gz", Body=b"x")
    assert sample_targets(store, limit=5) == ["x/m-1.tar.gz"]
    assert sample_targets(S3Store("no-such-bucket", endpoint_url=local_aws_env.url)) is None
