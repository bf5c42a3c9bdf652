"""The platform's routing, replication and eviction rules as pure functions over plain data.

One definition of each rule, used by the emulator (:mod:`mmelocal.emulator.router`,
:mod:`mmelocal.emulator.eviction`) and by the traffic simulator (:mod:`mmelocal.traffic`):

* **Routing** (model affinity): a request goes to an up instance where its target is ready
  (the least busy one when several are, :func:`choose_ready`), else to one already loading
  it, else (cold) to the instance with the most free memory, fewer models breaking ties
  (:func:`choose_instance`).
* **Replication**: a target whose request rate over a window (:func:`open_rate_window`,
  :func:`count_request`) reaches
  the hot threshold and that only one instance holds is loaded on a second one, the up
  instance with the most free memory (:func:`replica_instance`).
* **Eviction**: least recently used idle models first, until the new load fits under the
  limit (:func:`plan_eviction`; :func:`eviction_order`; :func:`plan_disk_eviction` for
  artifacts on disk).

The simulator replays millions of events, where building :class:`ModelUsage` lists and
sorting them per miss (30-400 us) is too slow: :class:`FastLru` keeps the loaded set in
recency order and plans the same evictions in time proportional to the victims; the tests
check it equal to :func:`plan_eviction` on random inputs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from mmelocal.errors import UserInputError
from mmelocal.units import mib


# -- routing ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class InstanceView:
    """One instance as the routing rule sees it, for one target.

    ``ready``: the target is loaded and ready there; ``loading``: it is there but still
    loading; ``in_flight``: the target's requests in flight there; ``free_bytes``: memory
    left under the instance's limit; ``model_count``: models it holds.
    """

    up: bool
    ready: bool = False
    loading: bool = False
    in_flight: int = 0
    free_bytes: int = 0
    model_count: int = 0


def choose_ready(views: Sequence[InstanceView]) -> int | None:
    """The position of the up instance where the target is ready with the fewest requests in
    flight (the first such on a tie), or None when it is ready nowhere."""
    best: int | None = None
    best_busy = 0
    for i, view in enumerate(views):
        if not (view.up and view.ready):
            continue
        if best is None or view.in_flight < best_busy:
            best, best_busy = i, view.in_flight
    return best


def choose_cold(views: Sequence[InstanceView]) -> int | None:
    """The position of the up instance with the most free memory (fewer models on a tie,
    then the first), or None when no instance is up: where a cold target loads."""
    best: int | None = None
    best_key: tuple[int, int] = (0, 0)
    for i, view in enumerate(views):
        if not view.up:
            continue
        key = (view.free_bytes, -view.model_count)
        if best is None or key > best_key:
            best, best_key = i, key
    return best


def choose_instance(views: Sequence[InstanceView]) -> int | None:
    """Where a request for the target goes: ready (least busy), else loading it, else the
    cold choice; None when no instance is up."""
    ready = choose_ready(views)
    if ready is not None:
        return ready
    for i, view in enumerate(views):
        if view.up and view.loading:
            return i
    return choose_cold(views)


def open_rate_window(now_s: float) -> tuple[float, int]:
    """``(window_start_s, count)`` of the window a target's first request opens: it starts
    there and is not counted in it, as a window closed by a request starts the next one at
    that request, counted in the window it closed. Every window then counts the requests in
    ``(start, end]``: ``n`` requests at equal spacing over ``window_s`` measure ``n /
    window_s`` (the intervals), the first window as the later ones."""
    return now_s, 0


def count_request(
    window_start_s: float, count: int, now_s: float, window_s: float
) -> tuple[float, int, float | None]:
    """Count one request in a target's rate window (the first request opens it instead:
    :func:`open_rate_window`).

    Returns the new ``(window_start_s, count)`` and, when the window closed with this
    request, the rate it measured in requests per second (None otherwise).
    """
    count += 1
    elapsed = now_s - window_start_s
    if elapsed < window_s:
        return window_start_s, count, None
    return now_s, 0, count / elapsed


def replica_instance(
    rate_rps: float,
    hot_rps_threshold: float,
    holders: Iterable[int],
    candidates: Sequence[tuple[int, bool, int]],
) -> int | None:
    """The instance to load a hot target on a second time, or None.

    ``holders``: the instances that hold the target (ready or loading); ``candidates``:
    every instance as ``(index, up, free_bytes)``. A target is replicated when its measured
    rate reaches the threshold and exactly one instance holds it; the replica goes to the
    up non-holder with the most free memory (the first on a tie).
    """
    if rate_rps < hot_rps_threshold:
        return None
    held = set(holders)
    if len(held) != 1:
        return None
    best: int | None = None
    best_free = 0
    for index, up, free_bytes in candidates:
        if not up or index in held:
            continue
        if best is None or free_bytes > best_free:
            best, best_free = index, free_bytes
    return best


# -- eviction --------------------------------------------------------------------------------
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
    """Mean measured footprint of ``models`` (``default_bytes`` when none is known; None is
    unknown, 0 a known zero)."""
    known = [m.footprint_bytes for m in models if m.footprint_bytes is not None]
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

    A model whose footprint is unknown (None; 0 is a known zero) counts as the mean of the
    known ones, 1 byte when none is known (its real release is measured afterwards, and
    the caller plans again). When ``used_bytes`` is
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
        footprint = model.footprint_bytes
        freed += (footprint if footprint is not None else fallback or 1) + model.runtime_bytes
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


K = TypeVar("K", bound=Hashable)


class FastLru(Generic[K]):
    """The loaded set of one instance in recency order, for the simulator: the same plans as
    :func:`plan_eviction` (every footprint known, no shared runtimes) without sorting.

    ``footprints`` maps target -> bytes, least recently used first; ``used_bytes`` is their
    sum plus what the instance holds besides (its baseline).
    """

    __slots__ = ("footprints", "limit_bytes", "used_bytes")

    def __init__(self, limit_bytes: int, *, baseline_bytes: int = 0) -> None:
        if limit_bytes <= 0:
            raise UserInputError(f"limit_bytes must be > 0, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self.used_bytes = baseline_bytes
        self.footprints: OrderedDict[K, int] = OrderedDict()

    def __contains__(self, target: object) -> bool:
        return target in self.footprints

    def __len__(self) -> int:
        return len(self.footprints)

    def touch(self, target: K) -> None:
        """Mark ``target`` most recently used."""
        self.footprints.move_to_end(target)

    def add(self, target: K, footprint_bytes: int) -> None:
        """Count ``target`` loaded (most recently used)."""
        self.footprints[target] = footprint_bytes
        self.used_bytes += footprint_bytes

    def remove(self, target: K) -> None:
        """Count ``target`` unloaded."""
        self.used_bytes -= self.footprints.pop(target)

    def plan(
        self, need_bytes: int, busy: Callable[[K], bool] | None = None
    ) -> tuple[list[K], bool]:
        """The victims (least recently used idle models first) so that ``need_bytes`` fits,
        and whether they make room: :func:`plan_eviction`'s answer."""
        used, limit = self.used_bytes, self.limit_bytes
        need_bytes = max(0, need_bytes)
        overshoot = used + need_bytes - limit
        if overshoot <= 0 and used < limit:
            return [], True
        target = max(overshoot, used - limit + 1, 1)
        victims: list[K] = []
        freed = 0
        for name, footprint in self.footprints.items():
            if freed >= target:
                break
            if busy is not None and busy(name):
                continue
            victims.append(name)
            freed += footprint  # a known 0 frees nothing, as in plan_eviction
        return victims, freed >= target


__all__ = [
    "ArtifactUsage",
    "EvictionPlan",
    "FastLru",
    "InstanceView",
    "ModelUsage",
    "choose_cold",
    "choose_instance",
    "choose_ready",
    "count_request",
    "estimate_footprint",
    "eviction_order",
    "open_rate_window",
    "plan_disk_eviction",
    "plan_eviction",
    "replica_instance",
]
