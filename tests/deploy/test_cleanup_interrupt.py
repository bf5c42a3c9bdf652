"""A second Ctrl-C while ``mmelocal benchmark`` deletes its temporary endpoint: the CLI in a
subprocess, real SIGINTs, against a local AWS whose endpoint stays Creating until the test
lets its (stand-in) tritonserver start and fail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import boto3
import pytest
from deploy_helpers import INSTANCE_TYPE, ROLE, run, write_reference_tarball
from shared_helpers import (
    gated_tritonserver,
    listed,
    local_aws_running,
    unique,
    wait_for,
    wait_gone,
)


def test_a_second_ctrl_c_during_the_clean_up_says_what_still_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first Ctrl-C (while the endpoint is Creating) starts the clean-up, which waits
    for the endpoint to settle before it can delete it; a second Ctrl-C then left it
    running and billing without a word. Now the CLI says, before it exits, that the
    endpoint still runs and the exact command that removes it; that command does."""
    gate = tmp_path / "gate"
    with local_aws_running(gated_tritonserver(gate), tmp_path, monkeypatch):
        bucket, name = unique("sigint"), unique("sigint")
        boto3.client("s3").create_bucket(Bucket=bucket)
        source = write_reference_tarball(tmp_path / "rn-python.tar.gz", scale=2.0)
        s3_uri = f"s3://{bucket}/bench/"
        command = [
            sys.executable, "-m", "mmelocal", "benchmark", str(source),
            "--endpoint-name", name, "--s3-uri", s3_uri, "--role", ROLE,
            "--instance-type", INSTANCE_TYPE, "--poll", "0.05s", "--yes",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "COLUMNS": "400"}
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(process.stderr or ()))
        reader.start()
        sm = boto3.client("sagemaker")
        try:
            endpoint = f"{name}-python"

            def creating() -> bool:
                found = listed(sm, "list_endpoints", NameContains=endpoint)
                return any(e["EndpointStatus"] == "Creating" for e in found)

            wait_for(lambda: creating() or process.poll() is not None, what="endpoint Creating")
            assert process.poll() is None, "".join(lines)
            process.send_signal(signal.SIGINT)
            wait_for(
                lambda: any("Ctrl-C again" in line for line in lines) or process.poll() is not None,
                timeout_s=60,
                what="the clean-up starting",
            )
            assert process.poll() is None, "".join(lines)
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
            reader.join(timeout=10)
            text = " ".join("".join(lines).split())
            assert process.returncode == 130, text
            assert sm.describe_endpoint(EndpointName=endpoint)["EndpointStatus"] == "Creating"
            assert f"{endpoint} may still be running and billing" in text, text
            hint = (
                f"mmelocal undeploy {endpoint} --delete-artifacts --s3-uri {s3_uri}python/ "
                "--region us-east-1"
            )
            assert hint in text, text
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            gate.touch()  # its tritonserver starts, exits: the endpoint fails
        code, text = run(capsys, *hint.split()[1:])
        assert code == 0 and f"endpoint {endpoint}" in text, text
        wait_gone(sm, endpoint)
        assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("Contents", []) == []
