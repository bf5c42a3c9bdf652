"""The replay's check, before anything is sent, that the store holds every TargetModel: it
reads the store URL as the emulator does (``mmelocal serve --store``), in the local AWS's S3."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from mmelocal.emulator.store import open_store
from mmelocal.errors import ModelNotFoundError, UserInputError
from mmelocal.traffic.replay import check_targets
from mmelocal.traffic.trace import Trace

if TYPE_CHECKING:
    from mmelocal.localaws import LocalAws


def _trace(*models: str) -> Trace:
    return Trace(
        times_s=np.arange(len(models), dtype=np.float64),
        model_ids=np.arange(len(models), dtype=np.int32),
        models=models,
    )


def _emulator_finds(store: str, target: str) -> bool:
    try:
        open_store(store).stat(target)
    except ModelNotFoundError:
        return False
    return True


@pytest.mark.parametrize("slash", ["/", ""])
def test_an_s3_prefix_with_or_without_its_slash_is_the_emulators_folder(
    local_aws_env: LocalAws, bucket: str, slash: str
) -> None:
    import boto3

    s3 = boto3.client("s3")
    for key in ("pre/a.tar.gz", "pre/team/b.tar.gz", "preview/c.tar.gz"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    store = f"s3://{bucket}/pre{slash}"
    held = _trace("a.tar.gz", "team/b.tar.gz")
    assert all(_emulator_finds(store, m) for m in held.models)
    check_targets(held, store)  # before: "lacks 2 TargetModel(s)" without the slash
    # a key beside the prefix (preview/...) is no model of s3://bucket/pre: the emulator
    # would answer it "not found", so the check refuses it before the replay
    assert not _emulator_finds(store, "view/c.tar.gz")
    with pytest.raises(UserInputError, match=r"lacks 1 TargetModel\(s\).*'view/c.tar.gz'"):
        check_targets(_trace("a.tar.gz", "view/c.tar.gz"), store)


def test_the_whole_bucket_is_a_store(local_aws_env: LocalAws, bucket: str) -> None:
    import boto3

    boto3.client("s3").put_object(Bucket=bucket, Key="top.tar.gz", Body=b"x")
    check_targets(_trace("top.tar.gz"), f"s3://{bucket}")
    check_targets(_trace("top.tar.gz"), f"s3://{bucket}/")


def test_a_folder_store_refuses_what_the_emulator_would_not_serve(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "a.tar.gz").write_bytes(b"x")
    (tmp_path / "outside.tar.gz").write_bytes(b"x")
    check_targets(_trace("a.tar.gz"), str(tmp_path / "store"))
    with pytest.raises(UserInputError, match=r"lacks 1 TargetModel\(s\).*'../outside.tar.gz'"):
        check_targets(_trace("a.tar.gz", "../outside.tar.gz"), str(tmp_path / "store"))
