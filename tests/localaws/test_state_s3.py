"""What ``--data`` keeps of S3 across a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3

from mmelocal.localaws import LocalAws


def _s3(aws: LocalAws) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=aws.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_objects_keep_their_content_type_and_metadata(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LocalAws(data_dir=data) as aws:
        s3 = _s3(aws)
        s3.create_bucket(Bucket="kept")
        s3.put_object(
            Bucket="kept",
            Key="models/model.tar.gz",
            Body=b"payload",
            ContentType="application/x-gzip",
            Metadata={"framework": "pytorch"},
        )
    with LocalAws(data_dir=data) as aws:
        head = _s3(aws).head_object(Bucket="kept", Key="models/model.tar.gz")
    assert head["ContentType"] == "application/x-gzip"
    assert head["Metadata"] == {"framework": "pytorch"}
