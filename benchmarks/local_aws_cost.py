"""What the local AWS costs: at start with nothing created, and per endpoint.

Measured in one run, each in its own process, against references:

* start: ``mmelocal local-aws`` until an STS call answers, against moto's own server
  (``moto_server``) started the same way; memory is the process's PSS and RSS once it
  answers (nothing created);
* one endpoint (the tiny Python-backend model, one instance): ``CreateEndpoint`` until
  ``InService`` and the process tree's PSS growth from just before ``CreateEndpoint`` (S3,
  SageMaker, CloudWatch and Application Auto Scaling already in use: moto loads each
  backend at its first call), against ``mmelocal serve`` on the same
  tarball (start until ``/ping`` answers, then the tree's PSS).

* InvokeEndpoint p50 through the local AWS's port against the endpoint's emulator called
  directly (the router's cost per call).
* scaling the endpoint to two instances (a scalable target with MinCapacity 2, acted on at
  the next period of the fast clock, ``--time-scale 60``): from ``RegisterScalableTarget``
  until ``CurrentInstanceCount`` is 2, and the tree's PSS growth, against ``mmelocal serve
  --instances 2`` less ``mmelocal serve`` (what one more instance costs there).

Goal: start < 2 s and < 200 MiB; an endpoint costs what one ``mmelocal serve`` costs.
Run: ``.venv/bin/python benchmarks/local_aws_cost.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import numpy as np

from mmelocal.runtime.memory import TreeMemory, process_tree_memory
from mmelocal.runtime.readiness import start_logging_server, stop_child
from mmelocal.runtime.server_config import pick_free_port
from mmelocal.testing.tiny_model import write_tarball

MiB = 1024**2

BIN = Path(sys.executable).parent
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"
KEYS = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}


def until(check: Callable[[], object], timeout_s: float = 120.0) -> float:
    """Seconds until ``check()`` stops raising (polled every 10 ms)."""
    t0 = time.perf_counter()
    while True:
        try:
            check()
            return time.perf_counter() - t0
        except Exception:
            if time.perf_counter() - t0 > timeout_s:
                raise
            time.sleep(0.01)


def sts_answers(url: str) -> Callable[[], object]:
    client = boto3.client("sts", endpoint_url=url, **_keys())
    return client.get_caller_identity


def _keys() -> dict[str, str]:
    return {
        "aws_access_key_id": "x",
        "aws_secret_access_key": "x",
        "region_name": "us-east-1",
    }


def start(args: list[str], check: Callable[[], object]) -> tuple[subprocess.Popen[bytes], float]:
    """Start a server; the process and the seconds until ``check`` passes (from Popen)."""
    t0 = time.perf_counter()
    env = {**os.environ, **KEYS}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    until(check)
    return proc, time.perf_counter() - t0


def start_ours(
    args: list[str], check: Callable[[str], Callable[[], object]], log: Path
) -> tuple[subprocess.Popen[bytes], float, str]:
    """One of mmelocal's servers on port 0: the process, the seconds until ``check(url)``
    passes (from Popen) and its URL (the port it bound, read back from its log: no port
    picked here and bound there later)."""
    t0 = time.perf_counter()
    proc, url = start_logging_server(args, log, timeout_s=120, env=KEYS)
    until(check(url))
    return proc, time.perf_counter() - t0, url


def serve_answers(url: str) -> Callable[[], object]:
    return lambda: urllib.request.urlopen(f"{url}/ping", timeout=2)


def mib(value: int) -> str:
    return f"{value / MiB:,.0f} MiB"


def endpoint_config(url: str, tarball: Path, *, bucket: str) -> Any:
    """Upload ``tarball`` to ``s3://bucket/models/``, create model ``m`` and endpoint config
    ``c`` (one ml.g5.xlarge) on the AWS at ``url``; the SageMaker client."""
    s3 = boto3.client("s3", endpoint_url=url, **_keys())
    sm = boto3.client("sagemaker", endpoint_url=url, **_keys())
    s3.create_bucket(Bucket=bucket)
    s3.upload_file(str(tarball), bucket, "models/model.tar.gz")
    container = {"Image": IMAGE, "ModelDataUrl": f"s3://{bucket}/models/", "Mode": "MultiModel"}
    sm.create_model(
        ModelName="m",
        ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
        PrimaryContainer=container,
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": "m",
        "InstanceType": "ml.g5.xlarge",
        "InitialInstanceCount": 1,
    }
    sm.create_endpoint_config(EndpointConfigName="c", ProductionVariants=[variant])
    return sm


def scale_to_two(url: str, sm: Any) -> float:
    """Register endpoint ``e`` as a scalable target with MinCapacity 2 (the autoscaler
    scales it out at its next period); seconds until DescribeEndpoint shows 2 instances."""
    aas = boto3.client("application-autoscaling", endpoint_url=url, **_keys())
    t0 = time.perf_counter()
    aas.register_scalable_target(
        ServiceNamespace="sagemaker", ResourceId="endpoint/e/variant/AllTraffic",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount", MinCapacity=2, MaxCapacity=2,
    )  # fmt: skip

    def two() -> None:
        described = sm.describe_endpoint(EndpointName="e")
        variant = described["ProductionVariants"][0]
        if described["EndpointStatus"] != "InService" or variant["CurrentInstanceCount"] != 2:
            raise RuntimeError("not yet")

    until(two)
    return time.perf_counter() - t0


def invoke_latency(work: Path, tarball: Path) -> list[tuple[str, str, str, str]]:
    """InvokeEndpoint p50 through the local AWS's router against the endpoint's emulator
    called directly (``LocalAws.emulator_url``), 300 sequential calls each, in-process."""
    import json

    from mmelocal.localaws import LocalAws
    from mmelocal.testing.tiny_model import request_json

    body = json.dumps(request_json(np.ones((2, 4), dtype=np.float32)))
    with LocalAws(data_dir=work / "latency", memory_budget_bytes=2 * 1024**3) as aws:
        sm = endpoint_config(aws.url, tarball, bucket="latency")
        sm.create_endpoint(EndpointName="e", EndpointConfigName="c")

        def serving() -> None:
            if aws.emulator_url("e") is None:
                raise RuntimeError("not in service yet")

        until(serving)
        p50 = {}
        for label, url in (("router", aws.url), ("direct", str(aws.emulator_url("e")))):
            runtime = boto3.client("sagemaker-runtime", endpoint_url=url, **_keys())
            call = {"EndpointName": "e", "TargetModel": "model.tar.gz", "Body": body,
                    "ContentType": "application/json"}  # fmt: skip
            runtime.invoke_endpoint(**call)["Body"].read()  # the cold load
            times = []
            for _ in range(300):
                t0 = time.perf_counter()
                runtime.invoke_endpoint(**call)["Body"].read()
                times.append(time.perf_counter() - t0)
            p50[label] = sorted(times)[len(times) // 2]
    return [
        (
            "invoke p50 through the local AWS",
            f"{p50['router'] * 1e3:.2f} ms",
            "",
            f"+{(p50['router'] - p50['direct']) * 1e3:.2f} ms, "
            f"{p50['router'] / p50['direct']:.2f}x",
        ),
        ("  the emulator direct (reference)", f"{p50['direct'] * 1e3:.2f} ms", "", ""),
    ]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="local-aws-cost-"))
    (work / "store").mkdir()
    tarball = write_tarball(work / "store" / "model.tar.gz", scale=2.0)
    rows: list[tuple[str, str, str, str]] = []

    port = pick_free_port()  # moto_server (the reference, not ours) takes a number only
    moto, moto_s = start(
        [str(BIN / "moto_server"), "-p", str(port)], sts_answers(f"http://127.0.0.1:{port}")
    )
    moto_mem = process_tree_memory(moto.pid)
    stop_child(moto)

    ours, ours_s, url = start_ours(
        [str(BIN / "mmelocal"), "local-aws", "--data", str(work / "data"),
         "--memory-budget", "2GiB", "--time-scale", "60"],
        sts_answers,
        work / "local-aws.log",
    )  # fmt: skip
    idle: TreeMemory = process_tree_memory(ours.pid)
    rows.append(
        (
            "start, nothing created",
            f"{ours_s:.2f} s",
            mib(idle.pss_bytes),
            f"RSS {mib(idle.rss_bytes)}",
        )
    )
    rows.append(
        (
            "  moto_server (reference)",
            f"{moto_s:.2f} s",
            mib(moto_mem.pss_bytes),
            f"RSS {mib(moto_mem.rss_bytes)}",
        )
    )

    sm = endpoint_config(url, tarball, bucket="cost")
    # the services an endpoint's clock uses (moto loads a backend at its first call)
    boto3.client("cloudwatch", endpoint_url=url, **_keys()).list_metrics()
    aas = boto3.client("application-autoscaling", endpoint_url=url, **_keys())
    aas.describe_scalable_targets(ServiceNamespace="sagemaker")
    before_endpoint = process_tree_memory(ours.pid)  # the services in use, no endpoint
    t0 = time.perf_counter()
    sm.create_endpoint(EndpointName="e", EndpointConfigName="c")

    def in_service() -> None:
        if sm.describe_endpoint(EndpointName="e")["EndpointStatus"] != "InService":
            raise RuntimeError("not yet")

    until(in_service)
    endpoint_s = time.perf_counter() - t0
    with_endpoint = process_tree_memory(ours.pid)
    scale_s, scaled = scale_to_two(url, sm), process_tree_memory(ours.pid)
    stop_child(ours)

    serve, serve_s, _ = start_ours(
        [str(BIN / "mmelocal"), "serve", "--store", str(work / "store"),
         "--memory-budget", "2GiB"],
        serve_answers,
        work / "serve.log",
    )  # fmt: skip
    serve_mem = process_tree_memory(serve.pid)
    stop_child(serve)
    serve2, serve2_s, _ = start_ours(
        [str(BIN / "mmelocal"), "serve", "--store", str(work / "store"),
         "--memory-budget", "2GiB", "--instances", "2"],
        serve_answers,
        work / "serve-2.log",
    )  # fmt: skip
    serve2_mem = process_tree_memory(serve2.pid)
    stop_child(serve2)

    endpoint_pss = with_endpoint.pss_bytes - before_endpoint.pss_bytes
    rows.append(
        ("S3, SageMaker, CloudWatch, AAS in use", "", mib(before_endpoint.pss_bytes), "no endpoint")
    )
    rows.append(
        (
            "one endpoint (InService)",
            f"{endpoint_s:.2f} s",
            mib(endpoint_pss),
            f"ratio {endpoint_pss / serve_mem.pss_bytes:.2f}x serve",
        )
    )
    rows.append(
        (
            "  mmelocal serve (reference)",
            f"{serve_s:.2f} s",
            mib(serve_mem.pss_bytes),
            f"time ratio {endpoint_s / serve_s:.2f}x",
        )
    )

    one_more = serve2_mem.pss_bytes - serve_mem.pss_bytes
    scaled_pss = scaled.pss_bytes - with_endpoint.pss_bytes
    rows.append(
        (
            "scale-out 1 -> 2 instances",
            f"{scale_s:.2f} s",
            mib(scaled_pss),
            f"ratio {scaled_pss / one_more:.2f}x serve's 2nd instance",
        )
    )
    rows.append(
        (
            "  serve --instances 2 (reference)",
            f"{serve2_s:.2f} s",
            mib(serve2_mem.pss_bytes),
            f"2nd instance {mib(one_more)}; scale-out time {scale_s / serve_s:.2f}x serve start",
        )
    )
    rows.extend(invoke_latency(work, tarball))
    print(f"{'what':32} {'time':>9} {'PSS':>10}  note")
    for what, seconds, pss, note in rows:
        print(f"{what:32} {seconds:>9} {pss:>10}  {note}")
    print(f"goal: start < 2 s ({'met' if ours_s < 2 else 'MISSED'}) and < 200 MiB "
          f"({'met' if idle.pss_bytes < 200 * MiB else 'MISSED'})")  # fmt: skip


if __name__ == "__main__":
    main()
