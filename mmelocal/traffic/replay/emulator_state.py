"""What ``mmelocal serve``'s ``GET /emulator/state`` tells a replay: whether the target is
the emulator at all, the loaded set and the load events while it runs (polled, every load
and failed load kept: the emulator's own log is bounded), the note when polls failed, the
memory probes (where the replay measured), the store it serves, what a simulation of it
needs (its options and memory), and each load's cycle."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from mmelocal.errors import UserInputError
from mmelocal.traffic.replay.schedule import _Record
from mmelocal.traffic.trace import Trace

STATE_PATH = "/emulator/state"


async def _state_before(aiohttp: Any, session: Any, base: str) -> tuple[bool, Any]:
    """Whether ``base`` is an emulator (it has a state page), and that state before the
    replay; a server that cannot be reached is a UserInputError."""
    try:
        async with session.get(base + STATE_PATH) as resp:
            if resp.status != 200:
                return False, None
            return True, await resp.json()
    except aiohttp.ClientError as exc:
        raise UserInputError(f"cannot reach {base}: {exc}") from exc


async def _poll_state(
    session: Any, base: str, interval_s: float, stop: asyncio.Event, out: dict[str, Any]
) -> None:
    """Sample the emulator's loaded count (all instances together, and the most any one
    instance held) and keep every load event (the emulator's own log is bounded: the
    replay keeps its record)."""
    seen: set[tuple[str, float, str, int]] = set()
    samples: list[tuple[float, int]] = out.setdefault("samples", [])
    loads: list[tuple[float, str, int, float]] = out.setdefault("load_events", [])
    failed: list[tuple[float, str, int]] = out.setdefault("failed_load_events", [])
    while True:
        out["state_polls"] = out.get("state_polls", 0) + 1
        try:
            async with session.get(base + STATE_PATH) as resp:
                if resp.status == 200:
                    state = await resp.json()
                else:
                    state = None
                    out["state_error"] = f"HTTP {resp.status}"
        except Exception as exc:  # the replay goes on; the report says what is missing
            out["state_error"] = f"{type(exc).__name__}: {exc}"
            state = None
        if state is None:
            out["state_failures"] = out.get("state_failures", 0) + 1
        else:
            now = time.monotonic()
            per_instance = [
                sum(1 for e in i.get("loaded") or [] if e["state"] == "ready")
                for i in state["instances"]
            ]
            samples.append((now, sum(per_instance)))
            out["instance_count"] = len(per_instance)
            out["max_loaded_per_instance"] = max(
                out.get("max_loaded_per_instance", 0), max(per_instance, default=0)
            )
            out["load_count"] = state.get("event_counts", {}).get("load", 0)
            out["capacity"] = _capacity(state)
            for e in state.get("events", []):
                kind = e.get("kind")
                if not (kind == "error" or (kind == "load" and e.get("duration_ms") is not None)):
                    continue
                key = (kind, e["time_s"], e["target"], e["instance"])
                if key in seen:
                    continue
                seen.add(key)
                if kind == "load":
                    loads.append((e["time_s"], e["target"], e["instance"], e["duration_ms"] / 1e3))
                else:  # a load that failed (refused, past the load limit): its callers' end
                    failed.append((e["time_s"], e["target"], e["instance"]))
        if stop.is_set():
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)


def _capacity(state: Mapping[str, Any]) -> dict[str, Any]:
    """What a simulation of the emulator needs from one read of its state page (empty for
    an emulator whose page does not say): ``emulator_options`` (its load wait, load
    limit, busy wait...), ``memory_room_bytes`` (the room one instance has for models:
    its memory limit less what its server holds beside its models and the runtimes its
    models brought, the smallest of the instances) and the footprints it measured: the most
    each model was measured at, which its next load plans for (``footprints_bytes``), and
    what each held the last time it was measured loaded (``held_footprints_bytes``)."""
    options = state.get("options")
    rooms = [
        i["memory_limit_bytes"] - i["memory_idle_bytes"] - sum(i["runtime_bytes"].values())
        for i in state.get("instances", [])
        if i.get("memory_idle_bytes") is not None and i.get("runtime_bytes") is not None
    ]
    if options is None or not rooms:
        return {}
    return {
        "emulator_options": dict(options),
        "memory_room_bytes": min(rooms),
        "footprints_bytes": dict(state.get("footprints_bytes") or {}),
        "held_footprints_bytes": dict(state.get("held_footprints_bytes") or {}),
    }


def _state_note(state: Mapping[str, Any]) -> str | None:
    """What the report must say when polls of the emulator's state page failed (None when
    none did): the loaded set has gaps then, and loads the emulator's bounded event log
    dropped meanwhile are missing from the load times."""
    failures = int(state.get("state_failures", 0))
    if not failures:
        return None
    return (
        f"{failures} of {int(state.get('state_polls', failures))} reads of the emulator's "
        f"{STATE_PATH} failed (last: {state.get('state_error')}): the loaded models have "
        "gaps then, and load times the emulator's event log dropped meanwhile are missing "
        "(hits, errors and latencies come from each answer and are complete)."
    )


def _probe_kinds(state: Mapping[str, Any]) -> list[str]:
    """``gpu`` / ``host`` of each emulator instance's memory probe."""
    return [str(i.get("probe_kind", "")) for i in state.get("instances", [])]


def load_cycles(
    trace: Trace,
    rec: _Record,
    events: Sequence[tuple[float, str, int, float]],
    t0_wall: float,
    speed: float,
    *,
    failed: Sequence[tuple[float, str, int]] = (),
) -> np.ndarray:
    """How long each load held its instance, in the endpoint's seconds (wall clock, as the
    latencies; never scaled by ``speed``): from the later of the miss that asked for it
    and the previous load's end on that instance, to its own end. Beside Triton's load
    call this holds the eviction that made room, memory readings and, for a first use, the
    download: the cold-load time a simulation of this endpoint needs.

    A caller that got an error (ModelNotReadyException after its wait) asked for the load
    too; a load no caller asked for (a hot model's replica) is its own load time.
    ``events`` are (wall time it ended, target, instance, seconds); ``failed`` the loads
    that failed (the emulator's ``error`` events: wall time, target, instance), whose
    callers asked for them and not for the next load of that model; request ``i`` was
    sent ``trace.times_s[i] / speed`` after ``t0_wall``."""
    index = {m: i for i, m in enumerate(trace.models)}
    misses = ~rec.hit  # answered misses and failed calls: either may have asked for a load
    sent = trace.times_s / speed  # when each request left, in seconds from the start
    by_model: dict[int, np.ndarray] = {}
    previous_end: dict[int, float] = {}
    last_load_of: dict[int, float] = {}
    out: list[float] = []
    timeline = sorted(
        [(wall, target, instance, seconds) for wall, target, instance, seconds in events]
        + [(wall, target, instance, None) for wall, target, instance in failed],
        key=lambda e: e[0],
    )
    for wall, target, instance, seconds in timeline:
        m = index.get(target)
        if m is None:
            continue
        end = wall - t0_wall
        if seconds is None:  # failed: the calls until then were its callers
            last_load_of[m] = max(end, last_load_of.get(m, -1.0))
            continue
        if m not in by_model:
            by_model[m] = sent[(trace.model_ids == m) & misses]
        asked = by_model[m]
        after = asked[(asked > last_load_of.get(m, -1.0)) & (asked <= end)]
        if len(after):
            start = max(float(after[0]), previous_end.get(instance, -1.0))
            out.append(max(0.0, end - start))
        else:  # nobody waited for it: all there is to go by is the load itself
            out.append(seconds)
        previous_end[instance] = end
        last_load_of[m] = end
    return np.asarray(out)


def _emulator_store(url: str) -> str | None:
    """The emulator's store when it is a folder here or an s3:// prefix (None otherwise or
    when ``url`` is no emulator)."""
    import urllib.error
    import urllib.request

    parsed = urlparse(url)
    try:
        with urllib.request.urlopen(
            f"{parsed.scheme}://{parsed.netloc}{STATE_PATH}", timeout=10
        ) as resp:
            store = json.loads(resp.read()).get("store")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(store, str):
        return None
    if store.startswith("s3://") or Path(store).is_dir():
        return store
    return None
