"""Which models to unload: the pure eviction policy now lives in
:mod:`mmelocal.rules.routing` (one definition, shared with the traffic simulator); this
module keeps the emulator's names for it.
"""

from __future__ import annotations

from mmelocal.rules.routing import (
    ArtifactUsage,
    EvictionPlan,
    ModelUsage,
    estimate_footprint,
    eviction_order,
    plan_disk_eviction,
    plan_eviction,
)

__all__ = [
    "ArtifactUsage",
    "EvictionPlan",
    "ModelUsage",
    "estimate_footprint",
    "eviction_order",
    "plan_disk_eviction",
    "plan_eviction",
]
