"""A model's part of an instance's memory: taken at its load, read again later, measured
at its unload.

A plan works against one reading of the whole instance (the host probe's summed PSS of
Triton's process tree, or the card's used memory); a model's footprint is its part of it:

* a model whose load started processes of its own (Python-backend stubs, kept as
  :attr:`~.model_state.ModelEntry.pids`) is what they hold: their PSS on the host (each
  shared page divided among the processes that map it, as the budget's sum divides it),
  the driver's per-process figure on a GPU; with a step in the server's process (an ONNX
  or TorchScript step of an ensemble), plus the server's growth at its load;
* a model with no process of its own (Triton runs TorchScript, ONNX Runtime, TensorRT in
  its own process) is the server process's growth at its load;
* either grows at its first call (allocator pools, lazy initialisation, workspaces): its
  processes are read again at every reading a plan or the trim takes, and the server's
  growth across its first call is its own when nothing else happened between the two
  readings around that call (:func:`remeasure`);
* with no per-process figures, the whole growth.

Plain functions over the loaded set and readings already taken: nothing here reads the
probe, and nothing runs on the invocation path.
"""

from __future__ import annotations

from collections.abc import Collection

from mmelocal.emulator.model_state import READY, LoadedSet, ModelEntry, QuietMark
from mmelocal.emulator.probes import MemoryReading
from mmelocal.runtime.memory import marginal_bytes, started_pids


def held_bytes(reading: MemoryReading, pids: Collection[int]) -> int | None:
    """What ``pids`` hold in ``reading`` (their PSS where it has PSS, else their
    per-process figures; a process gone holds 0); None without per-process figures."""
    figures = reading.per_process_pss_bytes
    if figures is None:
        figures = reading.per_process_bytes
    if figures is None:
        return None
    return sum(figures.get(pid, 0) for pid in pids)


def record_load(
    state: LoadedSet, entry: ModelEntry, before: MemoryReading, after: MemoryReading
) -> int:
    """Split a load's growth into the model's own memory (kept as its footprint) and, for
    the first model of a framework, the shared runtime it brought (kept per framework,
    reserved once; returned, 0 when none).

    The model's own memory is what the processes its load started hold (kept as
    :attr:`ModelEntry.pids`: its unload and later readings count them as its alone), 0
    included (a KIND_CPU-instance stub holds none of a card), plus the server process's
    growth when a step of it runs there. The server's change is left out otherwise: its
    USS moves with every process that maps the same pages (three loads of one tiny model
    moved it by +24.4, -19.1 and -1.8 MiB, for stubs of 16.5 MiB). A model that started
    no process is the server's growth; with no per-process figures, the whole growth."""
    grown = after.used_bytes - before.used_bytes
    pids = started_pids(before, after)
    entry.pids, entry.server_bytes = frozenset(), 0  # a load again starts new ones
    first = not state.framework_loaded(entry.framework, besides=entry.target)
    measured = marginal_bytes(before, after)
    own: int | None
    if pids and measured is not None:
        entry.pids = pids
        own = held_bytes(after, pids) or 0
        if entry.server_steps:
            entry.server_bytes = max(0, _server_change(before, after) or 0)
            own += entry.server_bytes
    else:
        own = grown if measured is None or measured <= 0 or measured > grown else measured
        entry.server_bytes = max(0, own) if measured is not None else 0
    runtime = 0
    if entry.framework and first and grown > own:
        runtime = state.runtimes[entry.framework] = grown - own
    if own > 0 or entry.pids:
        entry.footprint_bytes = max(own, entry.footprint_bytes or 0)
        state.footprints[entry.target] = entry.footprint_bytes
        state.held[entry.target] = own
    # the base for its first call (the calls it waits for come right after); when other
    # models serve calls now there is none, and what is known of them carries over
    state.quiet = _quiet_mark(state, after, loading=entry) or state.quiet
    return runtime


def remeasure(state: LoadedSet, reading: MemoryReading) -> None:
    """Read each idle loaded model's footprint again from ``reading``.

    A model with processes of its own is what they hold now (plus its part of the server):
    it grows at its first call (the tiny model's stub: 16.6 MiB USS after its load, 19.9
    after its first call, the same after 10 more) and its PSS moves as other processes map
    or leave the pages it shares, so its load-time figure is not what evicting it frees.
    The figure kept for its next load (``state.footprints``) only rises; what it holds now
    is also kept as its held figure (``state.held``). A model serving a
    call is left alone (its memory then holds the call's own buffers). The server's growth
    across a first call goes to that model (:func:`_first_call`)."""
    if reading.per_process_bytes is None:
        return
    _first_call(state, reading)
    present = reading.per_process_bytes.keys()
    for entry in state.models.values():
        if entry.state != READY or entry.in_flight or not entry.pids:
            continue
        if not entry.pids <= present:
            continue  # a stub of its went away: Triton lost it (recovery loads it again)
        own = (held_bytes(reading, entry.pids) or 0) + entry.server_bytes
        entry.footprint_bytes = state.held[entry.target] = own
        if own > state.footprints.get(entry.target, 0):
            state.footprints[entry.target] = own


def _first_call(state: LoadedSet, reading: MemoryReading) -> None:
    """Give the server's growth since the last quiet reading to the one model whose first
    call fell between the two, when that model has memory in the server (no processes of
    its own, or a step there) and nothing else happened meanwhile: no load or unload sent
    (:attr:`LoadedSet.changes`), no process started or left, no other model called for the
    first time (or not known to have been called before). A reading with a call in flight
    or a load or unload under way is skipped: the last quiet one stays the base."""
    mark = _quiet_mark(state, reading)
    if mark is None:
        return
    base, state.quiet = state.quiet, mark
    if base is None or (base.server_pid, base.processes, base.changes) != (
        mark.server_pid,
        mark.processes,
        mark.changes,
    ):
        return
    if tuple(map(id, base.entries)) != tuple(map(id, mark.entries)):
        return
    firsts = [
        e
        for e, used_s in zip(base.entries, base.last_used_s, strict=True)
        if e.last_used_s != used_s and id(e) not in base.called
    ]
    if len(firsts) != 1 or id(firsts[0]) not in base.fresh:
        return
    (entry,) = firsts
    growth = mark.server_bytes - base.server_bytes
    if growth <= 0 or (entry.pids and not entry.server_steps):
        return  # a stub model's calls run in its stub: the server's change is not its
    entry.server_bytes += growth
    if not entry.pids:
        entry.footprint_bytes = (entry.footprint_bytes or 0) + growth
        state.held[entry.target] = state.held.get(entry.target, 0) + growth
        kept = state.footprints.get(entry.target, 0)
        state.footprints[entry.target] = max(kept, entry.footprint_bytes)


def _quiet_mark(
    state: LoadedSet, reading: MemoryReading, *, loading: ModelEntry | None = None
) -> QuietMark | None:
    """``reading`` as a base for the first-call accounting; None when something but calls
    may move the server then (a load other than ``loading``, an unload, a call in flight)
    or it has no figure of the server. Which entries are known to have been called, or
    not, carries over from the last base by identity."""
    figures, server = reading.per_process_bytes, reading.server_pid
    if figures is None or server is None or server not in figures:
        return None
    # an unload still finishing (its model already out of the set) can only lower the
    # server's memory, or change the processes: never credit a model with its memory
    entries = tuple(state.models.values())
    if any(e is not loading and (e.state != READY or e.in_flight) for e in entries):
        return None
    ids = {id(e) for e in entries}
    fresh: set[int] = set()
    called: set[int] = set()
    base = state.quiet
    if base is not None:
        seen = dict(zip(map(id, base.entries), base.last_used_s, strict=True))
        changed = {id(e) for e in entries if id(e) in seen and e.last_used_s != seen[id(e)]}
        fresh = (set(base.fresh) - changed) & ids
        called = (set(base.called) | changed) & ids
    if loading is not None:
        fresh.add(id(loading))
        called.discard(id(loading))
    return QuietMark(
        server_pid=server,
        server_bytes=figures[server],
        processes=frozenset(figures),
        changes=state.changes,
        entries=entries,
        last_used_s=tuple(e.last_used_s for e in entries),
        fresh=frozenset(fresh),
        called=frozenset(called),
    )


def unload_own_bytes(
    state: LoadedSet,
    entry: ModelEntry,
    before: MemoryReading,
    after: MemoryReading,
    *,
    overlapped: bool,
) -> int | None:
    """The memory an unload gave back that was the model's own (None: not measurable).

    The readings around a ``DELETE`` also see what other processes gave back meanwhile:
    an earlier victim's stub that exits late, an undo's DELETE. So only what belongs to
    the model counts: with per-process figures and the processes its load started, what
    those held just before the ``DELETE``, however late they exit, with the server
    process's drop for a model with a step there (when another unload overlapped, the
    server part its load and first call measured). Without processes of its own (a model
    in the server's process, or no per-process figures) the drop is its only when no other
    unload ran meanwhile; otherwise nothing is measured and its known footprint stays. The
    drop may include its framework's runtime leaving with the last model of it: with no
    per-process figures that drop is not taken as the model's."""
    own = held_bytes(before, entry.pids) if entry.pids else None
    if own is not None:
        if not entry.server_steps:
            return own
        drop = None if overlapped else _server_change(after, before)
        return own + (entry.server_bytes if drop is None else max(0, drop))
    if overlapped:
        return None
    left = marginal_bytes(after, before)  # the server's drop and the processes that left
    if left is not None and left > 0:
        return left
    if state.runtimes.get(entry.framework):
        return None
    return before.used_bytes - after.used_bytes


def released_bytes(
    entry: ModelEntry, before: MemoryReading, reading: MemoryReading
) -> tuple[int, int | None, bool]:
    """How much of an unloading model's memory is back in ``reading``, against how much
    there is to come back (None: not known), and whether all of it is (its processes all
    gone). Its own processes where the readings have per-process figures and its load
    started some (another victim's stub exiting late frees memory too, but not this
    model's); the server process's drop for a model in the server's process; the whole
    drop otherwise."""
    if entry.pids:
        held = held_bytes(before, entry.pids)
        now = held_bytes(reading, entry.pids)
        present = reading.per_process_bytes
        if held is not None and now is not None and present is not None:
            gone = entry.pids.isdisjoint(present.keys())
            return held - now, held, gone
    drop = _server_change(reading, before)
    if drop is not None and not entry.pids:
        return drop, entry.footprint_bytes, False
    return before.used_bytes - reading.used_bytes, entry.footprint_bytes, False


def idle_memory_bytes(state: LoadedSet, reading: MemoryReading) -> int | None:
    """What the server holds beside its models in ``reading``: its used memory less the
    loaded models' footprints and the runtimes they brought; None while something loads
    or unloads or a loaded model has no footprint yet (its memory is half there)."""
    models = list(state.models.values())
    if state.load_lock.locked() or state.deletes or state.finishing:
        return None
    if any(e.state != READY or e.footprint_bytes is None for e in models):
        return None
    frameworks = {e.framework for e in models if e.framework}
    runtimes = sum(state.runtimes.get(f, 0) for f in frameworks)
    own = sum(e.footprint_bytes or 0 for e in models)
    return max(0, reading.used_bytes - own - runtimes)


def _server_change(before: MemoryReading, after: MemoryReading) -> int | None:
    """How much the server process's own memory went up from ``before`` to ``after``
    (None: no per-process figures, or another server process: a restart)."""
    server = before.server_pid
    old, new = before.per_process_bytes, after.per_process_bytes
    if old is None or new is None or server is None or after.server_pid != server:
        return None
    return new.get(server, 0) - old.get(server, 0)


__all__ = [
    "held_bytes",
    "idle_memory_bytes",
    "record_load",
    "released_bytes",
    "remeasure",
    "unload_own_bytes",
]
