"""The whole benchmark against the local AWS (:class:`mmelocal.localaws.LocalAws`): the
endpoint mmelocal deploys there is served by a real Triton, so nothing stands in for the
runtime; the probe reads host memory (no GPU)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from remote_helpers import INSTANCE_TYPE, ROLE, write_reference_tarball

from mmelocal.cli.main import main

pytestmark = pytest.mark.triton


def test_benchmark_on_the_local_aws(
    local_aws_env: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3
    from botocore.exceptions import ClientError

    bucket, base = f"mme-{uuid.uuid4().hex[:12]}", f"la-{uuid.uuid4().hex[:8]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    tarball = write_reference_tarball(tmp_path / "tiny.tar.gz", scale=2.0)
    code = main(["benchmark", str(tarball), "--endpoint-name", base,
                 "--s3-uri", f"s3://{bucket}/bench/", "--role", ROLE,
                 "--instance-type", INSTANCE_TYPE, "--memory-budget", "1GiB",
                 "--max-copies", "2", "--max-users", "2", "--duration", "3s",
                 "--users", "2", "--step-duration", "2s", "--dynamic-batching", "off",
                 "--instances", "2", "--poll", "0.2s", "--yes",
                 "--json", str(tmp_path / "results.json")])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    bench, sweep = json.loads((tmp_path / "results.json").read_text())
    assert bench["kind"] == "benchmark" and bench["instance_type"] == INSTANCE_TYPE
    capacity = bench["capacity"]
    assert capacity["count"] == 2 and capacity["probe"].startswith("host PSS")
    assert f"{base}-python" in capacity["probe"]
    assert all(load["delta_bytes"] > 0 for load in capacity["loads"])
    assert sum(step["requests"] for step in bench["loadtest"]["steps"]) > 0
    assert bench["loadtest"]["failures"] == 0
    assert [(row["name"], row["status"]) for row in sweep["rows"]] == [("model-ig", "ok")]
    # nothing billable is left (DeleteEndpoint returns while the endpoint is Deleting), nor
    # mmelocal's objects
    try:
        status = boto3.client("sagemaker").describe_endpoint(EndpointName=f"{base}-python")[
            "EndpointStatus"
        ]
    except ClientError as exc:
        status = exc.response["Error"]["Code"]
    assert status in ("Deleting", "ValidationException"), status
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
