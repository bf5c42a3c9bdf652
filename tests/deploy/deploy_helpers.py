"""Constants and builders the deploy tests share (imported by name, not as fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_helpers import write_reference_tarball  # noqa: F401 (re-exported)

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
#: a GPU type moto's (lagging) instance list accepts
INSTANCE_TYPE = "ml.g4dn.xlarge"


def cli_args(store: Path, bucket: str, name: str, *more: str) -> list[str]:
    """``mmelocal deploy`` of ``store`` under ``s3://bucket/models/`` (then ``more``)."""
    return [
        "deploy", str(store), "--endpoint-name", name, "--s3-uri", f"s3://{bucket}/models/",
        "--role", ROLE, "--instance-type", INSTANCE_TYPE, "--max-instances", "3", *more,
    ]  # fmt: skip


def run_split(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``mmelocal ARGS`` in this process: exit code, stdout, stderr."""
    from mmelocal.cli.main import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``mmelocal ARGS`` in this process: exit code, stdout and stderr together."""
    code, out, err = run_split(capsys, *args)
    return code, out + err


def keys(bucket: str) -> dict[str, str]:
    """key -> ETag of every object in the bucket."""
    import boto3

    listing = boto3.client("s3").list_objects_v2(Bucket=bucket)
    return {o["Key"]: o["ETag"] for o in listing.get("Contents", [])}
