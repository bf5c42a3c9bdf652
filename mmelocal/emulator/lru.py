"""Which models to unload: pure policy over plain data, testable with no server.

:func:`plan_eviction` answers "to make room for ``need_bytes`` under ``limit_bytes``,
which loaded models should go, least recently used first?". Models with requests in
flight, with callers waiting for them, or still loading are never picked.
:func:`plan_disk_eviction` does the same for artifacts on disk.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mmelocal.errors import UserInputError
from mmelocal.units import mib


@dataclass(frozen=True, kw_only=True)
class ModelUsage:
    """One loaded (or loading) model as the policy sees it.

    ``footprint_bytes`` is the model's own memory, as its load measured it (None =
    unknown); ``runtime_bytes`` the framework's shared runtime that leaves with it (it is
    the last loaded model of its framework; 0 otherwise); ``pinned`` covers in-flight
    requests, waiting callers and loads in progress.
    """

    name: str
    last_used_s: float
    footprint_bytes: int | None = None
    in_flight: int = 0
    pinned: bool = False
    runtime_bytes: int = 0

    def __post_init__(self) -> None:
        if self.in_flight < 0:
            raise UserInputError(f"in_flight must be >= 0, got {self.in_flight}")
        if self.footprint_bytes is not None and self.footprint_bytes < 0:
            raise UserInputError(f"footprint_bytes must be >= 0, got {self.footprint_bytes}")

    @property
    def evictable(self) -> bool:
        """True when nothing uses the model right now."""
        return self.in_flight == 0 and not self.pinned


@dataclass(frozen=True, kw_only=True)
class EvictionPlan:
    """The policy's answer: victims in eviction order and whether that makes room."""

    victims: tuple[str, ...]
    needed_bytes: int
    expected_freed_bytes: int
    fits: bool
    reason: str


def estimate_footprint(models: Iterable[ModelUsage], default_bytes: int = 0) -> int:
    """Mean measured footprint of ``models`` (``default_bytes`` when none is known)."""
    known = [m.footprint_bytes for m in models if m.footprint_bytes]
    return int(sum(known) / len(known)) if known else default_bytes


def eviction_order(
    models: Iterable[ModelUsage], *, exclude: Iterable[str] = ()
) -> list[ModelUsage]:
    """The evictable models, least recently used first: the order every eviction follows
    (planned ones, and one more after Triton's 507)."""
    skip = set(exclude)
    return sorted(
        (m for m in models if m.evictable and m.name not in skip),
        key=lambda m: (m.last_used_s, m.name),
    )


def plan_eviction(
    models: Sequence[ModelUsage],
    *,
    used_bytes: int,
    limit_bytes: int,
    need_bytes: int,
    exclude: Iterable[str] = (),
) -> EvictionPlan:
    """Least recently used evictable models to unload so ``used + need <= limit``.

    A model whose footprint is unknown counts as the mean of the known ones (its real
    release is measured afterwards, and the caller plans again). When ``used_bytes`` is
    already over ``limit_bytes`` with ``need_bytes == 0`` the plan trims down to the limit.
    """
    if limit_bytes <= 0:
        raise UserInputError(f"limit_bytes must be > 0, got {limit_bytes}")
    need_bytes = max(0, need_bytes)
    overshoot = used_bytes + need_bytes - limit_bytes
    if overshoot <= 0 and used_bytes < limit_bytes:
        return EvictionPlan(
            victims=(),
            needed_bytes=0,
            expected_freed_bytes=0,
            fits=True,
            reason=(
                f"fits: used {mib(used_bytes)} + need {mib(need_bytes)} <= limit {mib(limit_bytes)}"
            ),
        )
    fallback = estimate_footprint(models)
    candidates = eviction_order(models, exclude=exclude)
    victims: list[str] = []
    freed = 0
    target = max(overshoot, used_bytes - limit_bytes + 1, 1)
    for model in candidates:
        if freed >= target:
            break
        victims.append(model.name)
        freed += (model.footprint_bytes or fallback or 1) + model.runtime_bytes
    fits = freed >= target
    reason = (
        f"used {mib(used_bytes)} + need {mib(need_bytes)} > limit {mib(limit_bytes)}: "
        f"free {mib(target)} from {len(victims)} least recently used model(s)"
    )
    if not fits:
        busy = sum(1 for m in models if not m.evictable)
        reason += f"; not enough: {busy} model(s) are busy and cannot be unloaded"
    return EvictionPlan(
        victims=tuple(victims),
        needed_bytes=target,
        expected_freed_bytes=freed,
        fits=fits,
        reason=reason,
    )


@dataclass(frozen=True, kw_only=True)
class ArtifactUsage:
    """One artifact on disk as the disk policy sees it."""

    target: str
    size_bytes: int
    last_used_s: float
    in_use: bool = False


def plan_disk_eviction(
    artifacts: Sequence[ArtifactUsage], *, used_bytes: int, budget_bytes: int, need_bytes: int
) -> tuple[str, ...]:
    """Least recently used artifacts not in use to delete so ``used + need <= budget``."""
    overshoot = used_bytes + need_bytes - budget_bytes
    if overshoot <= 0:
        return ()
    victims: list[str] = []
    freed = 0
    for art in sorted(artifacts, key=lambda a: (a.last_used_s, a.target)):
        if freed >= overshoot:
            break
        if art.in_use:
            continue
        victims.append(art.target)
        freed += art.size_bytes
    return tuple(victims)


__all__ = [
    "ArtifactUsage",
    "EvictionPlan",
    "ModelUsage",
    "estimate_footprint",
    "eviction_order",
    "plan_disk_eviction",
    "plan_eviction",
]
