"""``mmelocal local-aws``: a real start, an endpoint, SIGTERM that leaves no Triton behind,
and a port in use refused in one line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import boto3
import psutil
import pytest
from localaws_helpers import ROLE, TRITON_IMAGE, wait_for, wait_status

from mmelocal.runtime.config import pick_free_port
from mmelocal.testing.tiny_model import write_tarball


@pytest.mark.triton
def test_local_aws_command_serves_and_stops_cleanly(tmp_path: Path) -> None:
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mmelocal", "local-aws", "--port", str(port),
               "--data", str(tmp_path / "data"), "--memory-budget", "1GiB"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    keys = {"aws_access_key_id": "any", "aws_secret_access_key": "any", "region_name": "us-east-1"}
    try:
        sts = boto3.client("sts", endpoint_url=url, **keys)

        def answers() -> bool:
            try:
                return bool(sts.get_caller_identity()["Account"])
            except Exception:
                return False

        wait_for(answers, timeout_s=60)
        s3 = boto3.client("s3", endpoint_url=url, **keys)
        sm = boto3.client("sagemaker", endpoint_url=url, **keys)
        s3.create_bucket(Bucket="cli-bucket")
        s3.upload_file(str(write_tarball(tmp_path / "m.tar.gz")), "cli-bucket", "m/m.tar.gz")
        container = {
            "Image": TRITON_IMAGE,
            "ModelDataUrl": "s3://cli-bucket/m/",
            "Mode": "MultiModel",
        }
        sm.create_model(ModelName="m", ExecutionRoleArn=ROLE, PrimaryContainer=container)
        variant = {
            "VariantName": "AllTraffic",
            "ModelName": "m",
            "InstanceType": "ml.g5.xlarge",
            "InitialInstanceCount": 1,
        }
        sm.create_endpoint_config(EndpointConfigName="c", ProductionVariants=[variant])
        sm.create_endpoint(EndpointName="e", EndpointConfigName="c")
        assert wait_status(sm, "e", leaving="Creating")["EndpointStatus"] == "InService"
        tritons = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if p.name().startswith("tritonserver")
        ]
        assert len(tritons) == 1
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = out.decode()
    assert proc.returncode == 0, text
    assert f"export AWS_ENDPOINT_URL={url}" in text and "local AWS stopped" in text
    assert not [p for p in tritons if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "mmelocal", "local-aws", "--port", str(port)],
            capture_output=True, text=True, timeout=60, env=dict(os.environ),
        )  # fmt: skip
    text = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, text
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    assert f"cannot listen on 127.0.0.1:{port}" in text and "choose another --port" in text
