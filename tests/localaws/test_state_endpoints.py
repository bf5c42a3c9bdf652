"""What ``--data`` keeps of an endpoint across a restart (the endpoints here cost no
Triton: their image is not one the local AWS runs, so they fail as soon as they are
planned, or their tritonserver is a stand-in script)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import model_and_config, unique, wait_status
from shared_helpers import gated_tritonserver, listed, local_aws_running, wait_for, wait_gone

from mmelocal.localaws import LocalAws
from mmelocal.localaws.state import STATE_FILE
from mmelocal.testing.tiny_model import write_tarball

#: an image the local AWS does not run: the endpoint fails as soon as it is planned
XGBOOST = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def _failed_endpoint_saved(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, Any]]:
    """A local AWS on ``data`` with one endpoint, Failed, then stopped (its state saved):
    the endpoint's name and its last DescribeEndpoint."""
    name = unique("kept")
    with LocalAws(data_dir=data) as aws:
        for key, value in aws.env().items():
            monkeypatch.setenv(key, value)
        s3, sm = boto3.client("s3"), boto3.client("sagemaker")
        bucket = unique("kept")
        s3.create_bucket(Bucket=bucket)
        tarball = write_tarball(tmp_path / "m.tar.gz", scale=2.0)
        s3.upload_file(str(tarball), bucket, "m/model.tar.gz")
        config = model_and_config(f"s3://{bucket}/m/", image=XGBOOST)
        sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
        saved = wait_status(sm, name, leaving="Creating")
        assert saved["EndpointStatus"] == "Failed"
    return name, saved


def test_a_restored_endpoint_keeps_its_creation_and_modification_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restore re-creates the endpoint (its Triton starts again), but the endpoint was
    neither created nor modified then: DescribeEndpoint and ListEndpoints show the times
    saved at the stop (they showed the restore's), and ListEndpoints' time filters read
    them. The state here is one an earlier mmelocal wrote, without the FailureReason of
    an endpoint saved Failed: the endpoint is re-created, as one saved InService is (its
    image fails it again at once, starting no Triton)."""
    data = tmp_path / "data"
    name, saved = _failed_endpoint_saved(data, tmp_path, monkeypatch)
    manifest = data / "state" / STATE_FILE
    state = json.loads(manifest.read_text())
    for region in state["regions"].values():
        for endpoint in region["endpoints"]:
            assert endpoint.pop("failure_reason")
    manifest.write_text(json.dumps(state))
    with LocalAws(data_dir=data) as aws:
        for key, value in aws.env().items():
            monkeypatch.setenv(key, value)
        sm = boto3.client("sagemaker")
        restored = wait_status(sm, name, leaving="Creating")
        assert restored["EndpointStatus"] == "Failed"
        times = ("CreationTime", "LastModifiedTime")
        assert [restored[t] for t in times] == [saved[t] for t in times]
        (summary,) = listed(sm, "list_endpoints", NameContains=name)
        assert [summary[t] for t in times] == [saved[t] for t in times]
        before = listed(
            sm, "list_endpoints", NameContains=name, CreationTimeBefore=saved["LastModifiedTime"]
        )
        assert [s["EndpointName"] for s in before] == [name]


def test_a_stopped_local_aws_leaves_no_endpoint_behind_in_a_running_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``LocalAws`` in one process (the session's ``local_aws`` fixture and a test's
    own, say) keep their records in moto accounts of their own: the endpoints of one that
    stopped are not shown by the other, and a restart restores them. They stayed in the
    records the two shared: the other showed moto's record (InService, served by no one)
    and the restore, finding the endpoint there, kept that record, so a Failed endpoint
    came back InService (seen in a full run, where an earlier test module's session
    ``local_aws`` was still running)."""
    data = tmp_path / "data"
    with LocalAws(persist=False) as other:
        name, _ = _failed_endpoint_saved(data, tmp_path, monkeypatch)
        for key, value in other.env().items():
            monkeypatch.setenv(key, value)
        with pytest.raises(ClientError, match="Could not find endpoint"):
            boto3.client("sagemaker").describe_endpoint(EndpointName=name)
        with LocalAws(data_dir=data) as aws:
            for key, value in aws.env().items():
                monkeypatch.setenv(key, value)
            restored = wait_status(boto3.client("sagemaker"), name, leaving="Creating")
            assert restored["EndpointStatus"] == "Failed"


def test_a_failed_endpoint_comes_back_failed_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Failed endpoint stays Failed ("DeleteEndpoint is the only operation that can be
    performed on a failed endpoint": EndpointStatus, botocore's sagemaker model): the
    restore shows it Failed with its FailureReason and starts no tritonserver, even where
    a start would now go further. The restore re-created it and it started again: Creating
    here, where the restarted tritonserver waits (InService where one starts)."""
    name, gate, started = unique("failed"), tmp_path / "gate", tmp_path / "started"
    with local_aws_running("#!/bin/sh\nexit 3\n", tmp_path, monkeypatch):
        sm = boto3.client("sagemaker")
        bucket = unique("failed")
        boto3.client("s3").create_bucket(Bucket=bucket)
        tarball = write_tarball(tmp_path / "m.tar.gz", scale=2.0)
        boto3.client("s3").upload_file(str(tarball), bucket, "m/model.tar.gz")
        config = model_and_config(f"s3://{bucket}/m/")
        sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
        saved = wait_status(sm, name, leaving="Creating")
        assert saved["EndpointStatus"] == "Failed" and saved["FailureReason"]
    waits = f"#!/bin/sh\ntouch {started}\n" + gated_tritonserver(gate).removeprefix("#!/bin/sh\n")
    with local_aws_running(waits, tmp_path, monkeypatch):
        sm = boto3.client("sagemaker")
        try:
            restored = sm.describe_endpoint(EndpointName=name)
            assert (restored["EndpointStatus"], restored.get("FailureReason")) == (
                "Failed",
                saved["FailureReason"],
            )
            times = ("CreationTime", "LastModifiedTime")
            assert [restored[t] for t in times] == [saved[t] for t in times]
        finally:
            gate.touch()
        sm.delete_endpoint(EndpointName=name)
        wait_gone(sm, name)
    assert not started.exists()


def test_a_stop_gives_up_a_creation_and_the_restart_creates_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopping the local AWS (Ctrl-C on ``mmelocal local-aws``, a fixture's teardown) while
    an endpoint is Creating does not wait for its Triton: the stop stops the tritonserver
    it had spawned and returns (it waited 30 s for the creation and left the tritonserver
    running). The state saved has the endpoint Creating, and the restart does what the
    service does, which goes on creating it: Creating, with its saved times, its
    tritonserver started again."""
    name, pids = unique("creating"), tmp_path / "pids"
    script = f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 600\n"  # never ready
    with local_aws_running(script, tmp_path, monkeypatch):
        sm = boto3.client("sagemaker")
        bucket = unique("creating")
        boto3.client("s3").create_bucket(Bucket=bucket)
        # never read: the stand-in loads nothing
        boto3.client("s3").put_object(Bucket=bucket, Key="m/model.tar.gz", Body=b"x")
        sm.create_endpoint(
            EndpointName=name, EndpointConfigName=model_and_config(f"s3://{bucket}/m/")
        )
        wait_for(pids.exists, timeout_s=60, what="the endpoint's tritonserver")
        saved = sm.describe_endpoint(EndpointName=name)
        assert saved["EndpointStatus"] == "Creating"
        stopping_s = time.monotonic()
    assert time.monotonic() - stopping_s < 20  # the join alone was 30 s
    (first,) = (int(pid) for pid in pids.read_text().split())
    assert not _runs(first)
    with local_aws_running(script, tmp_path, monkeypatch):  # its stop ends this start too
        restored = boto3.client("sagemaker").describe_endpoint(EndpointName=name)
        assert restored["EndpointStatus"] == "Creating"
        times = ("CreationTime", "LastModifiedTime")
        assert [restored[t] for t in times] == [saved[t] for t in times]
        wait_for(lambda: len(pids.read_text().split()) == 2, timeout_s=60, what="a restart")
    assert not any(_runs(int(pid)) for pid in pids.read_text().split())


def _runs(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
