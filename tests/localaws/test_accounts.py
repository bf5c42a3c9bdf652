"""Two ``LocalAws`` in one process (the session's ``local_aws`` and a test's own, say):
moto's backends are the process's, so each server files its records under a moto
account of its own and sees none of the other's. Control plane and S3 only: no Triton."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import ROLE, TRITON_IMAGE, unique
from shared_helpers import listed

from mmelocal.localaws import LocalAws
from mmelocal.localaws.server import MotoAccounts


def test_a_second_local_aws_sees_none_of_the_firsts_records(
    local_aws_env: LocalAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They shared moto's records: a model or bucket made through one was there through
    the other, an endpoint shown as moto wrote it (InService, served by no one)."""
    sm, s3 = boto3.client("sagemaker"), boto3.client("s3")
    model, bucket = unique("mine"), unique("mine")
    sm.create_model(
        ModelName=model, ExecutionRoleArn=ROLE, PrimaryContainer={"Image": TRITON_IMAGE}
    )
    s3.create_bucket(Bucket=bucket)
    first_account = boto3.client("sts").get_caller_identity()["Account"]
    try:
        with LocalAws(persist=False) as other:
            for key, value in other.env().items():
                monkeypatch.setenv(key, value)
            there = boto3.client("sagemaker")
            with pytest.raises(ClientError) as info:
                there.describe_model(ModelName=model)
            assert info.value.response["Error"]["Code"] == "ValidationException"
            assert model not in [
                m["ModelName"] for m in listed(there, "list_models", NameContains=model)
            ]
            assert bucket not in [b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]]
            account = boto3.client("sts").get_caller_identity()["Account"]
            assert account == other.account_id and account != first_account
            arn = there.create_model(
                ModelName=model, ExecutionRoleArn=ROLE, PrimaryContainer={"Image": TRITON_IMAGE}
            )["ModelArn"]
            assert f":{account}:model/" in arn
        for key, value in local_aws_env.env().items():
            monkeypatch.setenv(key, value)
        mine = boto3.client("sagemaker").describe_model(ModelName=model)  # the first's, intact
        assert f":{first_account}:model/" in mine["ModelArn"]
    finally:
        boto3.client("s3").delete_bucket(Bucket=bucket)
        boto3.client("sagemaker").delete_model(ModelName=model)


def test_accounts_claimed_from_many_threads_are_distinct_and_the_last_clears_once() -> None:
    """The servers of a process start and stop on any thread: each gets its own account,
    and moto is cleared once, by the last to stop (the count was read and written with
    no lock)."""
    accounts = MotoAccounts()
    cleared: list[int] = []
    gate = threading.Barrier(8)

    def claim(_: int) -> str:
        gate.wait()
        return accounts.claim("123456789012")

    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(claim, range(8)))
    assert len(set(claimed)) == 8 and "123456789012" in claimed

    def release(account: str) -> None:
        gate.wait()
        accounts.release(account, on_last=lambda: cleared.append(1))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(release, claimed))
    assert cleared == [1]
    assert accounts.claim("123456789012") == "123456789012"  # none runs: the default again
