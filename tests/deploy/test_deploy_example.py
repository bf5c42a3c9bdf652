"""examples/deploy_dry_run.py against the local AWS: a plan, and nothing changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import boto3
from deploy_helpers import ROLE

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deploy_dry_run.py"


def test_deploy_dry_run_example(store: Path, bucket: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(store), f"s3://{bucket}/models/", ROLE],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "s3 copy: models/model-1.tar.gz" in done.stdout  # the hard link: server-side
    assert "sagemaker CreateEndpoint create: example-mme" in lines
    assert any("RegisterScalableTarget put" in ln and "(once InService)" in ln for ln in lines)
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount") == 0
