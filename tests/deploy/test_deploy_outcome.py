"""What ``mmelocal deploy --json`` reports: what happened (the endpoint's final status, the
objects moved, the requests sent, the time taken, the error), not only what was planned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import cli_args, run_split
from shared_helpers import local_aws_running, unique


def deploy_json(
    capsys: pytest.CaptureFixture[str], store: Path, bucket: str, name: str, *more: str
) -> tuple[int, dict[str, Any], str]:
    """deploy ``--json -``: exit code, the JSON document on stdout, stderr."""
    code, out, err = run_split(
        capsys, *cli_args(store, bucket, name, "--max-instances", "1", "--json", "-", *more)
    )
    try:
        return code, json.loads(out), err
    except json.JSONDecodeError:
        raise AssertionError(f"stdout is not one JSON document: {out[:300]!r}") from None


def sent(result: dict[str, Any], operation: str) -> list[str]:
    return [
        r["resource"]
        for r in result["requests"]
        if r["operation"] == operation and r["result"] == "sent"
    ]


def test_json_is_the_outcome_of_the_deploy(
    capsys: pytest.CaptureFixture[str],
    store: Path,
    bucket: str,
    endpoint_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A script learns the endpoint's final status, the objects uploaded, copied and
    pruned, the configs deleted and the time taken from stdout alone (tables: stderr)."""
    monkeypatch.chdir(tmp_path)  # a '--json' that took '-' for a file name writes it here
    code, first, err = deploy_json(capsys, store, bucket, endpoint_name)
    assert code == 0, err
    assert first["ok"] is True and first["error"] is None
    assert first["endpoint"]["status"] == "InService"
    assert first["elapsed_s"] > 0
    assert first["objects"]["uploaded"]["keys"] == [
        "models/model-0.tar.gz",
        "models/model-2.tar.gz",
        "models/team/model-3.tar.gz",
    ]
    assert first["objects"]["copied"]["keys"] == ["models/model-1.tar.gz"]
    assert first["objects"]["uploaded"]["bytes"] == sum(
        (store / k.removeprefix("models/")).stat().st_size
        for k in first["objects"]["uploaded"]["keys"]
    )
    assert sent(first, "CreateEndpoint") == [endpoint_name]
    assert [s["operation"] for s in first["plan"]["steps"]][:3] == [
        "CreateModel",
        "CreateEndpointConfig",
        "CreateEndpoint",
    ]
    (config,) = sent(first, "CreateEndpointConfig")

    (store / "model-2.tar.gz").unlink()
    code, second, err = deploy_json(capsys, store, bucket, endpoint_name)
    assert code == 0, err
    assert second["objects"]["uploaded"]["keys"] == []
    assert second["objects"]["skipped"]["count"] == 3
    assert second["objects"]["deleted"]["keys"] == ["models/model-2.tar.gz"]
    assert sent(second, "UpdateEndpoint") == [endpoint_name]
    assert sent(second, "DeleteEndpointConfig") == [config]
    assert second["endpoint"]["config"] != config


def test_json_reports_a_failure_with_its_error(
    capsys: pytest.CaptureFixture[str],
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An endpoint that fails: non-zero exit, and still the JSON on stdout, with the error,
    the endpoint's final status and what was done before it failed."""
    import boto3

    monkeypatch.chdir(tmp_path)
    with local_aws_running("#!/bin/sh\nexit 3\n", tmp_path, monkeypatch):
        bucket, name = unique("fail"), unique("fail")
        boto3.client("s3").create_bucket(Bucket=bucket)
        code, result, err = deploy_json(capsys, store, bucket, name)
        assert code != 0
        assert "failed" in err
        assert result["ok"] is False
        assert result["error"]["type"] == "DeployError"
        assert f"endpoint {name} failed" in result["error"]["message"]
        assert result["endpoint"]["status"] == "Failed"
        assert result["endpoint"]["failure_reason"]
        assert len(result["objects"]["uploaded"]["keys"]) == 3
        assert sent(result, "CreateEndpoint") == [name]
        boto3.client("sagemaker").delete_endpoint(EndpointName=name)


def test_json_reports_a_refused_plan(
    capsys: pytest.CaptureFixture[str],
    store: Path,
    endpoint_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deploy refused at plan time (no such bucket) writes its JSON too: no plan, the
    error saying what to do, nothing done."""
    monkeypatch.chdir(tmp_path)
    code, result, err = deploy_json(capsys, store, unique("missing"), endpoint_name)
    assert code == 2, err
    assert result["ok"] is False and result["plan"] is None
    assert "does not exist" in result["error"]["message"]
    assert result["requests"] == [] and result["objects"]["uploaded"]["keys"] == []


def put_unrecorded(store: Path, bucket: str, key: str) -> None:
    """An object as mmelocal 2026-11-24 or earlier uploaded it: its checksum, no endpoint."""
    import boto3

    from mmelocal.aws.s3 import SHA256_METADATA

    old = {SHA256_METADATA: "0" * 64}
    tarball = str(store / "model-2.tar.gz")
    boto3.client("s3").upload_file(tarball, bucket, key, ExtraArgs={"Metadata": old})


def test_objects_with_no_endpoint_recorded_are_named_never_deleted_unasked(
    capsys: pytest.CaptureFixture[str],
    store: Path,
    bucket: str,
    endpoint_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An object an mmelocal of 2026-11-24 or earlier uploaded records no endpoint: nobody
    can prove whose it is, so neither deploy nor undeploy --delete-artifacts deletes it
    unasked (undeploy did), and both say it is there, served, and how to delete it:
    deploy --prune-unrecorded, undeploy --unrecorded (each still refused while another
    model reads it)."""
    from deploy_helpers import keys

    monkeypatch.chdir(tmp_path)
    put_unrecorded(store, bucket, "models/old-9.tar.gz")
    code, result, err = deploy_json(capsys, store, bucket, endpoint_name)
    assert code == 0, err
    flat = " ".join(err.split())
    assert "1 object (" in flat and "record no endpoint" in flat, err
    assert "--prune-unrecorded" in flat, err
    assert result["objects"]["unrecorded"]["keys"] == ["models/old-9.tar.gz"]
    assert "models/old-9.tar.gz" in keys(bucket)

    code, result, err = deploy_json(capsys, store, bucket, endpoint_name, "--prune-unrecorded")
    assert code == 0, err
    assert result["objects"]["deleted"]["keys"] == ["models/old-9.tar.gz"]
    assert "models/old-9.tar.gz" not in keys(bucket)

    put_unrecorded(store, bucket, "models/old-8.tar.gz")
    code, out, err = run_split(capsys, "undeploy", endpoint_name, "--delete-artifacts")
    assert code == 0, err
    flat = " ".join((out + err).split())
    assert "models/old-8.tar.gz" in keys(bucket)
    assert "1 object" in flat and "record no endpoint" in flat and "--unrecorded" in flat, flat
    prefix = f"s3://{bucket}/models/"
    code, out, err = run_split(
        capsys, "undeploy", endpoint_name, "--delete-artifacts", "--unrecorded", "--s3-uri", prefix
    )
    assert code == 0, err
    assert keys(bucket) == {}


def test_undeploy_without_delete_artifacts_says_where_the_objects_are(
    capsys: pytest.CaptureFixture[str],
    store: Path,
    bucket: str,
    endpoint_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """undeploy leaves the objects unless --delete-artifacts: it said nothing of them. It
    now names the prefix, the count and the bytes, and the command that deletes them."""
    monkeypatch.chdir(tmp_path)
    code, _, err = deploy_json(capsys, store, bucket, endpoint_name)
    assert code == 0, err
    size = sum(p.stat().st_size for p in store.rglob("*.tar.gz"))
    code, out, err = run_split(capsys, "undeploy", endpoint_name)
    assert code == 0, err
    flat = " ".join((out + err).split())
    prefix = f"s3://{bucket}/models/"
    assert f"4 objects ({size:,} bytes" in flat and f"under {prefix}" in flat, flat
    hint = f"mmelocal undeploy {endpoint_name} --delete-artifacts --s3-uri {prefix}"
    assert hint in flat, flat
    code, out, err = run_split(capsys, *hint.split()[1:])
    assert code == 0, err
    from deploy_helpers import keys

    assert keys(bucket) == {}
