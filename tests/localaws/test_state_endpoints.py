"""What ``--data`` keeps of an endpoint across a restart (the endpoints here cost no
Triton: their image is not one the local AWS runs, so they fail as soon as they are
planned, or their tritonserver is a stand-in script)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import psutil
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import model_and_config, unique, wait_status
from shared_helpers import gated_tritonserver, listed, local_aws_running, wait_for, wait_gone

from mmelocal.errors import EndpointFailedError
from mmelocal.localaws import LocalAws
from mmelocal.localaws.endpoints import EndpointManager, EndpointState
from mmelocal.localaws.fleet import FleetPlan
from mmelocal.localaws.state import STATE_FILE
from mmelocal.localaws.variants import EndpointPlan
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


def test_a_stop_gives_up_a_creation_or_an_update_and_the_restart_goes_on_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopping the local AWS (Ctrl-C on ``mmelocal local-aws``, a fixture's teardown) while
    an endpoint is Creating does not wait for its Triton: the stop stops the tritonserver
    it had spawned and returns (it waited 30 s for the creation and left the tritonserver
    running). The state saved has the endpoint Creating, and the restart does what the
    service does, which goes on creating it: Creating, with its saved times, its
    tritonserver started again. An endpoint Updating at the stop (made so here by the
    manager's update of one Creating: the stand-in never serves) is saved with its update
    (DescribeEndpoint's PendingDeploymentSummary) and comes back Creating on the config it
    served, holding the update it goes on with once that serves
    (``test_an_update_under_way_at_the_stop_goes_on_after_the_restart``); the update was
    lost (failed before: KeyError, the saved endpoint had no "update")."""
    name, updating, starts = unique("creating"), unique("updating"), tmp_path / "starts"
    script = f'#!/bin/sh\necho $$ "$@" >> {starts}\nexec sleep 600\n'  # never ready

    def started() -> list[str]:  # each start's pid and arguments (its repository's path)
        return starts.read_text().splitlines() if starts.exists() else []

    with local_aws_running(script, tmp_path, monkeypatch) as aws:
        sm = boto3.client("sagemaker")
        bucket = unique("creating")
        boto3.client("s3").create_bucket(Bucket=bucket)
        # never read: the stand-in loads nothing
        boto3.client("s3").put_object(Bucket=bucket, Key="m/model.tar.gz", Body=b"x")
        old, new = (model_and_config(f"s3://{bucket}/m/") for _ in range(2))
        sm.create_endpoint(EndpointName=name, EndpointConfigName=old)
        sm.create_endpoint(EndpointName=updating, EndpointConfigName=old)
        assert aws.endpoints is not None
        variants = sm.describe_endpoint_config(EndpointConfigName=new)["ProductionVariants"]
        aws.endpoints.update("us-east-1", updating, new, variants=variants)
        wait_for(lambda: len(started()) == 3, timeout_s=60, what="the endpoints' tritonservers")
        saved = sm.describe_endpoint(EndpointName=name)
        assert saved["EndpointStatus"] == "Creating"
        saved_updating = sm.describe_endpoint(EndpointName=updating)
        assert (saved_updating["EndpointStatus"], saved_updating["EndpointConfigName"]) == (
            "Updating",
            old,
        )
        stopping_s = time.monotonic()
    assert time.monotonic() - stopping_s < 20  # the join alone was 30 s
    assert not any(_runs(int(line.split()[0])) for line in started())
    (region,) = json.loads((tmp_path / "data" / "state" / STATE_FILE).read_text())[
        "regions"
    ].values()
    (kept,) = (e for e in region["endpoints"] if e["params"]["EndpointName"] == updating)
    assert kept["params"]["EndpointConfigName"] == old
    update = {
        "EndpointConfigName": new,
        "ProductionVariants": [
            {"VariantName": "AllTraffic", "DesiredInstanceCount": 1, "DesiredWeight": 1.0,
             "InstanceType": "ml.g5.xlarge"}
        ],
    }  # fmt: skip
    assert kept["update"] == update
    with local_aws_running(script, tmp_path, monkeypatch) as aws:  # its stop ends these too
        sm = boto3.client("sagemaker")
        times = ("CreationTime", "LastModifiedTime")
        restored = sm.describe_endpoint(EndpointName=name)
        assert restored["EndpointStatus"] == "Creating"
        assert [restored[t] for t in times] == [saved[t] for t in times]
        restored = sm.describe_endpoint(EndpointName=updating)
        assert (restored["EndpointStatus"], restored["EndpointConfigName"]) == ("Creating", old)
        assert [restored[t] for t in times] == [saved_updating[t] for t in times]
        state = aws.endpoints.get("us-east-1", updating) if aws.endpoints else None
        assert state is not None and state.resume == update
        wait_for(lambda: len(started()) == 5, timeout_s=60, what="a restart")
        # each on the config it served: the update starts once that one serves
        again = [line.split("/us-east-1/")[1].split("/triton-")[0] for line in started()[3:]]
        assert sorted(r.rsplit("-", 1)[0] for r in again) == sorted(
            [f"{name}/{old}", f"{updating}/{old}"]
        )
    assert not any(_runs(int(line.split()[0])) for line in started())


def _runs(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _fleet_plan(config: str, variant: str, instances: int, weight: float) -> FleetPlan:
    return FleetPlan(
        endpoint_name="e", config_name=config, bucket="b", prefix="p/", instances=instances,
        instance_type="ml.g5.xlarge", variant_name=variant, weight=weight,
    )  # fmt: skip


#: an UpdateEndpoint under way at the save, as the state keeps it: the new config and each
#: variant as PendingDeploymentSummary showed it (A's count and weight retained)
_SAVED_UPDATE = {
    "EndpointConfigName": "new",
    "ProductionVariants": [
        {"VariantName": "A", "DesiredInstanceCount": 3, "DesiredWeight": 0.25,
         "InstanceType": "ml.g5.xlarge"},
        {"VariantName": "B", "DesiredInstanceCount": 1, "DesiredWeight": 1.0,
         "InstanceType": "ml.g5.xlarge"},
    ],
}  # fmt: skip


def _restore_updating(tmp_path: Path, *, new_starts: bool) -> tuple[EndpointState, list[Any]]:
    """The manager re-creating an endpoint the state saved Updating from config "old" (A and
    B, 1 instance of weight 1.0 each) to "new" (:data:`_SAVED_UPDATE`), as the restore does
    (saved at times 100 and 200); once it has settled, its state and, for each fleet
    started, its variant, count, weight and what DescribeEndpoint showed as it started."""
    starts: list[Any] = []
    stopped: list[str] = []

    def start(plan: FleetPlan, _: Path) -> Any:
        shown = manager.get("r", "e")
        assert shown is not None
        pending = (shown.pending or {}).get("EndpointConfigName")
        starts.append(
            (plan.config_name, plan.variant_name, plan.instances, plan.weight,
             shown.status, shown.config_name, pending, shown.last_modified_s)
        )  # fmt: skip
        if plan.config_name == "new" and not new_starts:
            raise EndpointFailedError("the new config cannot start")
        return SimpleNamespace(
            plan=plan, instance_count=plan.instances, url="http://fleet", inflight=0,
            drain=lambda _timeout_s: True, stop=lambda: stopped.append(plan.config_name),
        )  # fmt: skip

    manager = EndpointManager(
        describe=lambda _r, _e, config: EndpointPlan(
            endpoint_name="e",
            config_name=config,
            variants=tuple(_fleet_plan(config, v, 1, 1.0) for v in ("A", "B")),
        ),
        start_fleet=start,
        forget=lambda *_: None,
        work_dir=tmp_path,
    )
    manager.keep_saved("r", "e", created_s=100.0, modified_s=200.0, update=_SAVED_UPDATE)
    state = manager.create("r", "e", "old")
    manager.keep_saved("r", "e", created_s=None, modified_s=None)
    assert state is not None and state.status == "Creating"
    manager.start(state)
    settled = "new" if new_starts else "old"
    wait_for(
        lambda: state.status == "InService" and state.config_name == settled and len(starts) == 4,
        timeout_s=30,
        what="the resumed update's end",
    )
    assert stopped == (["old", "old"] if new_starts else [])
    return state, starts


def test_an_update_under_way_at_the_stop_goes_on_after_the_restart(tmp_path: Path) -> None:
    """An endpoint Updating (UpdateEndpoint) when the local AWS stopped comes back on the
    config it served, Creating, then goes on with the update as the service would have:
    Updating (its LastModifiedTime the saved one, the pending deployment the saved
    update's, the old config serving), the new config's variants started with the counts
    and weights the update asked for (retained ones included), then InService on the new
    config, the old fleets stopped. The update was lost: the restart served the old config
    (failed before: keep_saved() got an unexpected keyword argument 'update')."""
    state, starts = _restore_updating(tmp_path, new_starts=True)
    assert sorted(starts[:2]) == [
        ("old", "A", 1, 1.0, "Creating", "old", "old", 200.0),
        ("old", "B", 1, 1.0, "Creating", "old", "old", 200.0),
    ]
    assert sorted(starts[2:]) == [
        ("new", "A", 3, 0.25, "Updating", "old", "new", 200.0),
        ("new", "B", 1, 1.0, "Updating", "old", "new", 200.0),
    ]
    assert state.pending is None and state.failure_reason is None
    assert state.last_modified_s > 200.0  # the update ended now
    assert state.created_s == 100.0


def test_a_resumed_update_that_cannot_start_leaves_the_old_config_serving(
    tmp_path: Path,
) -> None:
    """The resumed update whose new config fails rolls back as an update does: InService on
    the config the endpoint served, with the reason as FailureReason."""
    state, starts = _restore_updating(tmp_path, new_starts=False)
    assert {s[0] for s in starts} == {"old", "new"}
    assert state.fleets is not None and state.fleets.config_name == "old"
    assert state.failure_reason is not None and "cannot start" in state.failure_reason
