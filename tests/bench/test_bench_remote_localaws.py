"""``mmelocal benchmark`` against the local AWS (:class:`mmelocal.localaws.LocalAws`):
deploy -> capacity -> load test -> sweep -> report -> undeploy. The endpoint mmelocal
deploys there is served by a real Triton, so nothing stands in for the runtime; the probe
reads host memory (no GPU)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from remote_helpers import (
    INSTANCE_TYPE,
    ROLE,
    write_onnx_reference_tarball,
    write_reference_tarball,
)
from shared_helpers import listed, unique

from mmelocal.cli.main import main

pytestmark = pytest.mark.triton


def _args(tarball: Path, base: str, bucket: str, out: Path) -> list[str]:
    return ["benchmark", str(tarball), "--endpoint-name", base,
            "--s3-uri", f"s3://{bucket}/bench/", "--role", ROLE,
            "--instance-type", INSTANCE_TYPE, "--memory-budget", "1GiB",
            "--max-copies", "2", "--max-users", "2", "--duration", "3s",
            "--users", "2", "--step-duration", "2s", "--dynamic-batching", "off",
            "--instances", "2", "--poll", "0.2s",
            "--report", str(out / "report"), "--json", str(out / "results.json")]  # fmt: skip


def _fresh(tmp_path: Path) -> tuple[Path, str, str]:
    import boto3

    bucket, base = unique("mme"), unique("la")
    boto3.client("s3").create_bucket(Bucket=bucket)
    return write_reference_tarball(tmp_path / "tiny.tar.gz", scale=2.0), base, bucket


def test_benchmark_asks_first_and_creates_nothing_when_refused(
    local_aws_env: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import boto3

    tarball, base, bucket = _fresh(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code = main(_args(tarball, base, bucket, tmp_path))
    captured = capsys.readouterr()
    assert code == 1
    assert f"{base}-python: create the endpoint" in captured.out
    assert INSTANCE_TYPE in captured.out and "USD/h =" in captured.out
    assert "nothing was created" in captured.err
    assert listed(boto3.client("sagemaker"), "list_endpoints", NameContains=base) == []
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_benchmark_deploys_measures_reports_and_undeploys(
    local_aws_env: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two frameworks (the Python model and an ONNX one): two endpoints, one after the
    other, each measured on its own prefix; the sweep runs both on the last one."""
    import boto3
    from botocore.exceptions import ClientError

    tarball, base, bucket = _fresh(tmp_path)
    onnx = write_onnx_reference_tarball(tmp_path / "tiny-onnx.tar.gz")
    args = _args(tarball, base, bucket, tmp_path)
    code = main([*args[:2], str(onnx), *args[2:], "--yes"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    results = json.loads((tmp_path / "results.json").read_text())
    assert [(r["kind"], r.get("framework")) for r in results] == [
        ("benchmark", "python"), ("benchmark", "onnx"), ("sweep", None), ("sweep", None),
    ]  # fmt: skip
    for bench in results[:2]:
        framework = bench["framework"]
        assert bench["endpoint"] == f"{base}-{framework}" and bench["model"] == "tiny"
        capacity = bench["capacity"]
        assert capacity["count"] == 2 and capacity["instance_type"] == INSTANCE_TYPE
        assert capacity["probe"].startswith("host PSS") and bench["endpoint"] in capacity["probe"]
        # CPU figures under a GPU instance type: named as such, never projected onto GPUs
        assert capacity["projection"] is None
        assert bench["figures_from"] == (
            f"local AWS, CPU host memory, as {INSTANCE_TYPE}; latency and throughput on CPU"
        )
        assert all(load["delta_bytes"] > 0 for load in capacity["loads"])
        steps = bench["loadtest"]["steps"]
        assert bench["loadtest"]["target_count"] == 2 and bench["loadtest"]["failures"] == 0
        assert sum(step["requests"] for step in steps) > 0
        assert bench["throughput_rps"] == max(step["throughput_rps"] for step in steps)
    assert [[(r["name"], r["status"]) for r in sweep["rows"]] for sweep in results[2:]] == [
        [("model-ig", "ok")], [("onnx-ig", "ok")],
    ]  # fmt: skip
    page = (tmp_path / "report" / "index.html").read_text()
    assert "Comparison per model and framework" in page
    assert f"measured on {INSTANCE_TYPE}" not in page and "no GPU projection" in page
    assert "CPU figures (host memory, CPU latency), not GPU figures" in " ".join(printed.split())
    steps_csv = (tmp_path / "report" / "benchmark-steps.csv").read_text().splitlines()
    assert steps_csv[0].endswith(",failed_requests,figures_from")
    comparison = (tmp_path / "report" / "benchmark-comparison.csv").read_text().splitlines()
    assert comparison[0].startswith("instance_type,model,framework,max_models_loaded")
    assert [line.split(",")[:4] for line in comparison[1:]] == [
        [INSTANCE_TYPE, "tiny", "onnx", "2"], [INSTANCE_TYPE, "tiny", "python", "2"],
    ]  # fmt: skip
    # nothing billable is left (DeleteEndpoint returns while the endpoint is Deleting), nor
    # the objects mmelocal put in S3
    sagemaker = boto3.client("sagemaker")
    for name in (f"{base}-python", f"{base}-onnx"):
        assert f"deleted endpoint {name}" in printed
        try:
            status = sagemaker.describe_endpoint(EndpointName=name)["EndpointStatus"]
        except ClientError as exc:
            status = exc.response["Error"]["Code"]
        assert status in ("Deleting", "ValidationException"), status
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_a_source_without_a_request_body_is_refused_before_anything_is_created(
    local_aws_env: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import tarfile

    import boto3

    from mmelocal.testing.tiny_model import write_model

    _, base, bucket = _fresh(tmp_path)
    bare = tmp_path / "bare.tar.gz"  # no mmelocal_reference.npz: no payload to send
    with tarfile.open(bare, "w:gz") as tar:
        tar.add(write_model(tmp_path / "m", name="bare"), arcname="bare")
    code = main([*_args(bare, base, bucket, tmp_path), "--yes"])
    err = capsys.readouterr().err
    assert code != 0 and "mmelocal_reference.npz" in err and "Traceback" not in err
    assert listed(boto3.client("sagemaker"), "list_endpoints", NameContains=base) == []
    # with a body of its own it passes the check and gets to the question
    body = tmp_path / "body.json"
    body.write_text('{"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", '
                    '"data": [1, 2, 3, 4]}]}')  # fmt: skip
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code = main([*_args(bare, base, bucket, tmp_path), "--payload", str(body)])
    captured = capsys.readouterr()
    assert code == 1 and "nothing was created" in captured.err
    assert f"{base}-python: create the endpoint" in captured.out


def test_a_run_that_fails_deletes_its_endpoint_and_says_why(
    local_aws_env: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    tarball, base, bucket = _fresh(tmp_path)
    args = _args(tarball, base, bucket, tmp_path)
    args[args.index("--memory-budget") + 1] = "1MiB"  # the empty server is already over it
    code = main([*args, "--yes"])
    captured = capsys.readouterr()
    assert code == 1
    assert f"failed {base}-python:" in captured.err
    assert "the empty server already uses" in captured.err
    assert f"deleted endpoint {base}-python" in captured.out
    found = listed(boto3.client("sagemaker"), "list_endpoints", NameContains=base)
    assert [e["EndpointStatus"] for e in found] in ([], ["Deleting"])
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
