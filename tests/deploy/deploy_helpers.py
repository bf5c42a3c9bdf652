"""Constants and builders the deploy tests share (imported by name, not as fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


class _Raw:
    """The body of an answer with none (what botocore's AWSResponse reads)."""

    def stream(self, **_: object) -> object:
        return iter(())


def refuse_heads(s3: object, statuses: dict[str, int]) -> None:
    """HeadObject of each key of ``statuses`` is answered with that status, as S3 does: the
    status alone, no body (a HEAD has none). The local AWS (moto) models neither SSE-C nor
    per-object permissions, so a botocore ``before-send`` hook on the client answers them."""
    from botocore.awsrequest import AWSResponse

    def before_send(request: Any, **_: Any) -> AWSResponse | None:
        for key, status in statuses.items():
            if request.method == "HEAD" and request.url.split("?")[0].endswith("/" + key):
                return AWSResponse(request.url, status, {}, _Raw())
        return None

    s3.meta.events.register("before-send.s3.HeadObject", before_send)  # type: ignore[attr-defined]
