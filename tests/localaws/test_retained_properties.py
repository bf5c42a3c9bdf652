"""UpdateEndpoint with RetainAllVariantProperties: the new config's variants start with the
instance counts and weights the endpoint's variants have now (autoscaling's count kept),
except the properties ExcludeRetainedVariantProperties names, which the config gives."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from localaws_helpers import model_and_config, unique, wait_gone, wait_status

from mmelocal.localaws import LocalAws
from mmelocal.localaws.endpoints import EndpointManager, EndpointState
from mmelocal.localaws.fleet import FleetPlan
from mmelocal.localaws.variants import EndpointPlan, VariantFleets
from mmelocal.testing.tiny_model import write_tarball


def _variant(config: str, name: str, instances: int, weight: float) -> FleetPlan:
    return FleetPlan(
        endpoint_name="e",
        config_name=config,
        bucket="b",
        prefix="p/",
        instances=instances,
        instance_type="ml.g5.xlarge",
        variant_name=name,
        weight=weight,
    )


def _plan(config: str, instances: int, weight: float) -> EndpointPlan:
    variants = tuple(_variant(config, name, instances, weight) for name in ("A", "B"))
    return EndpointPlan(endpoint_name="e", config_name=config, variants=variants)


def _fake_fleet(plan: FleetPlan, _: Path) -> Any:
    return SimpleNamespace(
        plan=plan, instance_count=plan.instances, url="http://fleet", inflight=0,
        drain=lambda _timeout_s: True, stop=lambda: None,
    )  # fmt: skip


def _started(tmp_path: Path, retain: frozenset[str]) -> dict[str, tuple[int, float]]:
    """Update an endpoint serving config "old" (A and B on 3 instances, weight 0.25, as
    autoscaling and UpdateEndpointWeightsAndCapacities left them) to config "new" (1
    instance, weight 1.0 each), retaining ``retain``; what each new variant started with."""
    started: dict[str, tuple[int, float]] = {}

    def start(plan: FleetPlan, work: Path) -> Any:
        started[plan.variant_name] = (plan.instances, plan.weight)
        return _fake_fleet(plan, work)

    manager = EndpointManager(
        describe=lambda _r, _e, config: _plan(config, 1, 1.0),
        start_fleet=start,
        forget=lambda *_: None,
        work_dir=tmp_path,
    )
    old = _plan("old", 3, 0.25)
    fleets = VariantFleets(old, [_fake_fleet(v, tmp_path) for v in old.variants])
    manager._endpoints[("r", "e")] = EndpointState(
        region="r", name="e", status="InService", config_name="old", fleets=fleets
    )
    manager.update("r", "e", "new", retain=retain)
    manager.wait(timeout_s=30)
    state = manager.get("r", "e")
    assert state is not None and state.status == "InService" and state.config_name == "new"
    return started


@pytest.mark.parametrize(
    ("retain", "expected"),
    [
        (frozenset(), (1, 1.0)),
        (frozenset({"DesiredInstanceCount", "DesiredWeight"}), (3, 0.25)),
        (frozenset({"DesiredInstanceCount"}), (3, 1.0)),
        (frozenset({"DesiredWeight"}), (1, 0.25)),
    ],
)
def test_retained_properties_come_from_the_running_variants(
    tmp_path: Path, retain: frozenset[str], expected: tuple[int, float]
) -> None:
    assert _started(tmp_path, retain) == {"A": expected, "B": expected}


@pytest.mark.triton
def test_update_endpoint_keeps_the_instance_count_it_is_asked_to(
    local_aws_env: LocalAws, tmp_path: Path
) -> None:
    """Through boto3: an endpoint scaled to 2 instances and updated to a config of 1 with
    RetainAllVariantProperties serves on 2 (``mmelocal deploy`` updates so, to keep the count
    autoscaling reached); without it, on the config's 1."""
    sm, s3 = boto3.client("sagemaker"), boto3.client("s3")
    bucket = unique("retain")
    s3.create_bucket(Bucket=bucket)
    s3.upload_file(str(write_tarball(tmp_path / "m.tar.gz")), bucket, "m/model.tar.gz")
    first, second, third = (model_and_config(f"s3://{bucket}/m/") for _ in range(3))
    name = unique("retain")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=first)
    assert wait_status(sm, name, leaving="Creating")["EndpointStatus"] == "InService"
    change = [{"VariantName": "AllTraffic", "DesiredInstanceCount": 2}]
    sm.update_endpoint_weights_and_capacities(EndpointName=name, DesiredWeightsAndCapacities=change)
    wait_status(sm, name, leaving="Updating")

    def counts() -> tuple[int, int]:
        described = wait_status(sm, name, leaving="Updating")
        assert described["EndpointStatus"] == "InService", described
        variant = described["ProductionVariants"][0]
        return variant["CurrentInstanceCount"], variant["DesiredInstanceCount"]

    retained = {"RetainAllVariantProperties": True}
    sm.update_endpoint(EndpointName=name, EndpointConfigName=second, **retained)
    # while it deploys, DescribeEndpoint summarises the deployment (PendingDeploymentSummary:
    # botocore's sagemaker model) beside the variants that serve meanwhile
    updating = sm.describe_endpoint(EndpointName=name)
    assert updating["EndpointStatus"] == "Updating"
    assert updating["EndpointConfigName"] == first  # the config that serves until it ends
    pending = updating["PendingDeploymentSummary"]
    start = pending["StartTime"]
    assert start == updating["LastModifiedTime"]
    assert pending == {
        "EndpointConfigName": second,
        "StartTime": start,
        "ProductionVariants": [
            {
                "VariantName": "AllTraffic",
                "DesiredInstanceCount": 2,  # retained
                "DesiredWeight": 1.0,
                "InstanceType": "ml.g5.xlarge",
                "VariantStatus": [{"Status": "Creating", "StartTime": start}],
            }
        ],
    }
    assert counts() == (2, 2)
    assert "PendingDeploymentSummary" not in sm.describe_endpoint(EndpointName=name)
    sm.update_endpoint(EndpointName=name, EndpointConfigName=third)
    pending = sm.describe_endpoint(EndpointName=name)["PendingDeploymentSummary"]
    assert [v["DesiredInstanceCount"] for v in pending["ProductionVariants"]] == [1]
    assert counts() == (1, 1)
    assert "PendingDeploymentSummary" not in sm.describe_endpoint(EndpointName=name)
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)
