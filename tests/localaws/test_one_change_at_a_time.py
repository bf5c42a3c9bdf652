"""The autoscaler and UpdateEndpointWeightsAndCapacities change an endpoint one at a time:
the autoscaler claims it under the endpoint manager's lock (Updating), the API's change is
refused meanwhile, and the claim's end returns it to InService unless it moved on."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mmelocal.localaws.endpoints import EndpointManager, EndpointState
from mmelocal.localaws.variants import VariantFleets


def _manager(tmp_path: Path) -> tuple[EndpointManager, EndpointState, Any]:
    def unused(*_: Any) -> Any:
        raise AssertionError("no fleet starts here")

    manager = EndpointManager(describe=unused, start_fleet=unused, forget=unused, work_dir=tmp_path)
    fleet = SimpleNamespace(
        plan=SimpleNamespace(variant_name="AllTraffic", weight=1.0, instances=1),
        instance_count=1,
    )
    fleets = VariantFleets(SimpleNamespace(endpoint_name="e"), [fleet])  # type: ignore[arg-type, list-item]
    state = EndpointState(region="r", name="e", status="InService", fleets=fleets)
    manager._endpoints[("r", "e")] = state
    return manager, state, fleet


def test_a_resize_claims_the_endpoint_and_the_api_waits(tmp_path: Path) -> None:
    manager, state, fleet = _manager(tmp_path)
    assert manager.begin_resize("r", "e", "Missing") is None
    assert manager.begin_resize("r", "e", "AllTraffic") is fleet
    assert state.status == "Updating"
    assert manager.begin_resize("r", "e", "AllTraffic") is None  # one resize at a time
    change = [{"VariantName": "AllTraffic", "DesiredInstanceCount": 2}]
    assert manager.update_weights_and_capacities("r", "e", change) is False
    assert state.fleets is not None
    assert state.fleets.variants[0].desired_instance_count == 1  # nothing changed
    manager.end_resize("r", "e")
    assert state.status == "InService"


def test_a_resize_ending_after_the_endpoint_moved_on_leaves_its_status(tmp_path: Path) -> None:
    manager, state, _ = _manager(tmp_path)
    assert manager.begin_resize("r", "e", "AllTraffic") is not None
    state.generation += 1  # an UpdateEndpoint or a delete took over meanwhile
    manager.end_resize("r", "e")
    assert state.status == "Updating"


def test_an_endpoint_is_not_deleted_while_a_change_is_under_way(tmp_path: Path) -> None:
    """The service refuses DeleteEndpoint on an endpoint Creating or Updating ("Cannot
    update in-progress endpoint"): an autoscaler's resize shows Updating, so a delete then
    changes nothing and the resize's end returns the endpoint to InService."""
    manager, state, _ = _manager(tmp_path)
    assert manager.begin_resize("r", "e", "AllTraffic") is not None
    assert manager.delete("r", "e") is False
    assert state.status == "Updating" and state.fleets is not None
    manager.end_resize("r", "e")
    assert state.status == "InService"
    state.status = "Creating"
    assert manager.delete("r", "e") is False
    assert state.status == "Creating"


def test_a_deleted_endpoint_shows_deleting_until_moto_forgets_it(tmp_path: Path) -> None:
    """DescribeEndpoint goes from Deleting to "Could not find endpoint", never back to the
    status moto keeps for it (InService): the endpoint stays Deleting here until moto has
    forgotten it."""
    seen: list[str | None] = []

    def forget(region: str, name: str) -> None:
        state = manager.get(region, name)
        seen.append(state.status if state is not None else None)

    manager = EndpointManager(
        describe=lambda *_: None,  # type: ignore[arg-type, return-value]
        start_fleet=lambda *_: None,  # type: ignore[arg-type, return-value]
        forget=forget,
        work_dir=tmp_path,
    )
    manager._endpoints[("r", "e")] = EndpointState(region="r", name="e", status="Failed")
    assert manager.delete("r", "e") is True
    manager.wait(timeout_s=30)
    assert seen == ["Deleting"]
    assert manager.get("r", "e") is None
