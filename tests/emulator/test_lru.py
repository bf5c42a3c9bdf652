"""Eviction policy over plain data: no server."""

from __future__ import annotations

import pytest

from mmelocal.emulator.lru import (
    ArtifactUsage,
    ModelUsage,
    estimate_footprint,
    plan_disk_eviction,
    plan_eviction,
)
from mmelocal.errors import UserInputError

MB = 1024 * 1024


def models(*specs: tuple[str, float, int | None, int]) -> list[ModelUsage]:
    return [
        ModelUsage(name=n, last_used_s=t, footprint_bytes=f, in_flight=i) for n, t, f, i in specs
    ]


def test_fits_without_victims() -> None:
    plan = plan_eviction(
        models(("a", 1, 10 * MB, 0)), used_bytes=50 * MB, limit_bytes=100 * MB, need_bytes=10 * MB
    )
    assert plan.fits and plan.victims == ()


def test_least_recently_used_go_first_until_it_fits() -> None:
    loaded = models(("new", 9, 10 * MB, 0), ("old", 1, 10 * MB, 0), ("mid", 5, 10 * MB, 0))
    plan = plan_eviction(loaded, used_bytes=95 * MB, limit_bytes=100 * MB, need_bytes=12 * MB)
    assert plan.victims == ("old",)
    plan = plan_eviction(loaded, used_bytes=95 * MB, limit_bytes=100 * MB, need_bytes=22 * MB)
    assert plan.victims == ("old", "mid")
    assert plan.fits


def test_models_with_requests_in_flight_are_never_picked() -> None:
    loaded = models(("busy", 1, 50 * MB, 3), ("idle", 2, 10 * MB, 0))
    plan = plan_eviction(loaded, used_bytes=95 * MB, limit_bytes=100 * MB, need_bytes=30 * MB)
    assert "busy" not in plan.victims
    assert plan.victims == ("idle",)
    assert not plan.fits
    assert "busy" in plan.reason


def test_pinned_models_are_never_picked() -> None:
    loaded = [
        ModelUsage(name="loading", last_used_s=0, footprint_bytes=10 * MB, pinned=True),
        ModelUsage(name="idle", last_used_s=5, footprint_bytes=10 * MB),
    ]
    plan = plan_eviction(loaded, used_bytes=100 * MB, limit_bytes=100 * MB, need_bytes=5 * MB)
    assert plan.victims == ("idle",)


def test_at_threshold_with_nothing_needed_trims() -> None:
    loaded = models(("a", 1, 10 * MB, 0), ("b", 2, 10 * MB, 0))
    plan = plan_eviction(loaded, used_bytes=100 * MB, limit_bytes=100 * MB, need_bytes=0)
    assert plan.victims == ("a",)


def test_unknown_footprints_count_as_the_mean_of_known_ones() -> None:
    loaded = models(("a", 1, None, 0), ("b", 2, None, 0), ("c", 3, 20 * MB, 0))
    assert estimate_footprint(loaded) == 20 * MB
    plan = plan_eviction(loaded, used_bytes=100 * MB, limit_bytes=100 * MB, need_bytes=30 * MB)
    assert plan.victims == ("a", "b")


def test_exclude_and_empty() -> None:
    loaded = models(("a", 1, 10 * MB, 0))
    plan = plan_eviction(
        loaded, used_bytes=100 * MB, limit_bytes=100 * MB, need_bytes=1, exclude=["a"]
    )
    assert plan.victims == () and not plan.fits
    assert estimate_footprint([], default_bytes=7) == 7


def test_invalid_values_are_refused() -> None:
    with pytest.raises(UserInputError, match="limit_bytes"):
        plan_eviction([], used_bytes=0, limit_bytes=0, need_bytes=0)
    with pytest.raises(UserInputError, match="in_flight"):
        ModelUsage(name="a", last_used_s=0, in_flight=-1)


def test_disk_eviction_skips_artifacts_in_use() -> None:
    arts = [
        ArtifactUsage(target="loaded", size_bytes=50, last_used_s=0, in_use=True),
        ArtifactUsage(target="old", size_bytes=30, last_used_s=1),
        ArtifactUsage(target="new", size_bytes=30, last_used_s=9),
    ]
    assert plan_disk_eviction(arts, used_bytes=110, budget_bytes=120, need_bytes=5) == ()
    assert plan_disk_eviction(arts, used_bytes=110, budget_bytes=120, need_bytes=20) == ("old",)
    assert plan_disk_eviction(arts, used_bytes=110, budget_bytes=120, need_bytes=60) == (
        "old",
        "new",
    )
