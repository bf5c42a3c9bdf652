"""``mmelocal local-aws``: a real start, an endpoint, SIGTERM that leaves no Triton behind,
the state back at the next start with the same ``--data``, and a port in use refused in
one line."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import numpy as np
import psutil
import pytest
from localaws_helpers import ROLE, TRITON_IMAGE, wait_for, wait_status

from mmelocal.runtime.server_config import pick_free_port
from mmelocal.testing.tiny_model import expected, request_json, write_tarball

KEYS = {"aws_access_key_id": "any", "aws_secret_access_key": "any", "region_name": "us-east-1"}


def start(command: list[str], url: str) -> subprocess.Popen[bytes]:
    """Start ``mmelocal local-aws``; return once its STS answers."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sts = boto3.client("sts", endpoint_url=url, **KEYS)

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[0].decode())
        try:
            return bool(sts.get_caller_identity()["Account"])
        except Exception:
            return False

    wait_for(answers, timeout_s=60)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> str:
    """SIGTERM, then its output (it must exit 0)."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out.decode()
    return out.decode()


def tritons_of(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    children = psutil.Process(proc.pid).children(recursive=True)
    return [p for p in children if p.name().startswith("tritonserver")]


@pytest.mark.triton
def test_local_aws_command_serves_stops_cleanly_and_keeps_its_state(tmp_path: Path) -> None:
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mmelocal", "local-aws", "--port", str(port),
               "--data", str(tmp_path / "data"), "--memory-budget", "1GiB",
               "--time-scale", "60"]  # fmt: skip
    tarball = write_tarball(tmp_path / "m.tar.gz", scale=3.0)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    procs = []
    try:
        procs.append(start(command, url))
        s3 = boto3.client("s3", endpoint_url=url, **KEYS)
        sm = boto3.client("sagemaker", endpoint_url=url, **KEYS)
        s3.create_bucket(Bucket="cli-bucket")
        s3.upload_file(str(tarball), "cli-bucket", "m/m.tar.gz")
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
        aas = boto3.client("application-autoscaling", endpoint_url=url, **KEYS)
        target = {"ServiceNamespace": "sagemaker", "ResourceId": "endpoint/e/variant/AllTraffic",
                  "ScalableDimension": "sagemaker:variant:DesiredInstanceCount"}  # fmt: skip
        aas.register_scalable_target(**target, MinCapacity=1, MaxCapacity=4)
        for value in (50.0, 100.0):  # put again: it replaces the first one's alarms
            aas.put_scaling_policy(
                PolicyName="p", PolicyType="TargetTrackingScaling", **target,
                TargetTrackingScalingPolicyConfiguration={"TargetValue": value,
                    "PredefinedMetricSpecification": {
                        "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}},
            )  # fmt: skip
        step = aas.put_scaling_policy(
            PolicyName="step", PolicyType="StepScaling", **target,
            StepScalingPolicyConfiguration={"AdjustmentType": "ChangeInCapacity",
                "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1}]},
        )  # fmt: skip
        cloudwatch = boto3.client("cloudwatch", endpoint_url=url, **KEYS)
        cloudwatch.put_metric_alarm(
            AlarmName="latency", Namespace="AWS/SageMaker", MetricName="ModelLatency",
            Statistic="Average", Period=60, EvaluationPeriods=1, Threshold=1e6,
            ComparisonOperator="GreaterThanThreshold", AlarmActions=[step["PolicyARN"]],
        )  # fmt: skip
        cloudwatch.put_metric_alarm(
            AlarmName="errors", Namespace="AWS/SageMaker", MetricName="Invocation5XXErrors",
            Statistic="Sum", Period=60, EvaluationPeriods=1, Threshold=0,
            ComparisonOperator="GreaterThanThreshold",
        )  # fmt: skip
        # a weight set since the creation is kept (a count would be too, at a Triton each)
        sm.update_endpoint_weights_and_capacities(
            EndpointName="e",
            DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredWeight": 0.5}],
        )
        variants = wait_status(sm, "e", leaving="Updating")["ProductionVariants"]
        counts = {"VariantName": "AllTraffic", "CurrentInstanceCount": 1, "CurrentWeight": 0.5,
                  "DesiredInstanceCount": 1, "DesiredWeight": 0.5}  # fmt: skip
        assert variants == [counts]
        tritons = tritons_of(procs[0])
        assert len(tritons) == 1
        text = stop(procs[0])
        assert f"export AWS_ENDPOINT_URL={url}" in text and "local AWS stopped" in text
        assert "fast clock: x60 (one CloudWatch minute = 1 s)" in text
        assert not [p for p in tritons if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

        # the next start with the same --data has the objects, resources and endpoint back
        procs.append(start(command, url))
        body = s3.get_object(Bucket="cli-bucket", Key="m/m.tar.gz")["Body"].read()
        assert body == tarball.read_bytes()
        described = wait_status(sm, "e", leaving="Creating")
        assert (described["EndpointStatus"], described["EndpointConfigName"]) == ("InService", "c")
        assert described["ProductionVariants"] == [counts]  # not the config's weight, 1.0
        (restored,) = aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
        assert (restored["ResourceId"], restored["MaxCapacity"]) == (target["ResourceId"], 4)
        policies = aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
        policy, step = sorted(policies, key=lambda p: p["PolicyName"])
        assert policy["PolicyName"] == "p" and len(policy["Alarms"]) == 2  # AlarmHigh, AlarmLow
        assert policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 100.0
        alarms = {a["AlarmName"]: a for a in cloudwatch.describe_alarms()["MetricAlarms"]}
        assert set(alarms) == {"errors", "latency", *(a["AlarmName"] for a in policy["Alarms"])}
        # the step scaling alarm acts on the restored policy (its ARN is a new one here)
        assert alarms["latency"]["AlarmActions"] == [step["PolicyARN"]]
        config = sm.describe_endpoint_config(EndpointConfigName="c")
        assert config["ProductionVariants"][0]["InstanceType"] == "ml.g5.xlarge"
        answer = boto3.client("sagemaker-runtime", endpoint_url=url, **KEYS).invoke_endpoint(
            EndpointName="e", TargetModel="m.tar.gz", ContentType="application/json",
            Body=json.dumps(request_json(x)),
        )  # fmt: skip
        out = json.loads(answer["Body"].read())["outputs"][0]
        assert out["data"] == expected(x, 3.0).ravel().tolist()
        stop(procs[1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_port_in_use_is_one_line(tmp_path: Path, held_port: int) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mmelocal", "local-aws", "--port", str(held_port)],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )  # fmt: skip
    text = (result.stdout + result.stderr).strip()
    assert result.returncode == 2, text
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    # as `mmelocal serve` says it (the system's reason once, not the socket module's
    # "(while attempting to bind on address ...)" beside it)
    assert text == (
        f"error: cannot listen on 127.0.0.1:{held_port}: {os.strerror(errno.EADDRINUSE)} "
        "(another server uses it: choose another --port)"
    )


def test_the_printed_exports_can_be_pasted_as_they_are(tmp_path: Path) -> None:
    """The export lines are whole lines (never wrapped at the terminal's width: a wrapped
    ``AWS_CA_BUNDLE=...`` pasted on its own line is a shell variable, not exported) and name
    the CA bundle by an absolute path (a script run from another folder finds it), even for
    a relative ``--data``."""
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mmelocal", "local-aws", "--port", str(port),
               "--data", "data"]  # fmt: skip
    proc = subprocess.Popen(
        command, cwd=tmp_path, env={**os.environ, "COLUMNS": "80"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        sts = boto3.client("sts", endpoint_url=url, **KEYS)

        def answers() -> bool:
            if proc.poll() is not None:
                raise AssertionError(proc.communicate()[0].decode())
            try:
                return bool(sts.get_caller_identity()["Account"])
            except Exception:
                return False

        wait_for(answers, timeout_s=60)
        text = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    bundle = (tmp_path / "data" / "ca").resolve()
    lines = text.splitlines()
    assert f"  export AWS_ENDPOINT_URL={url}" in lines, text
    (proxy,) = [line for line in lines if "HTTPS_PROXY=" in line]
    assert proxy.startswith(f"  export HTTPS_PROXY={url} AWS_CA_BUNDLE={bundle}/"), text
    assert Path(proxy.split("AWS_CA_BUNDLE=")[1]).is_absolute()
