"""Loading a model on one instance: fetch the artifact, make room, ``POST /models``.

:class:`Loader` loads on one instance: the artifact comes from the cache (downloaded and
extracted when absent), room is made by the :class:`~mmelocal.emulator.eviction.Evictor`,
then Triton's SageMaker front end loads it; a 507 evicts one more model and retries. The
memory gauge before and after measures the model's footprint
(:func:`~mmelocal.emulator.footprints.record_load`). One load runs at a time per instance
(``LoadedSet.load_lock``), so the readings measure that load alone.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mmelocal.emulator.cache import Claim, Prepare, target_key
from mmelocal.emulator.eviction import Evictor
from mmelocal.emulator.footprints import record_load
from mmelocal.emulator.lru import estimate_footprint
from mmelocal.emulator.model_state import (
    LOADING,
    READY,
    InstanceUnavailableError,
    ModelEntry,
    quiet_future,
)
from mmelocal.emulator.sagemaker_control import past_load_limit
from mmelocal.errors import ModelLoadError, OutOfMemoryError

_Failure = TypeVar("_Failure", ModelLoadError, OutOfMemoryError)


class Loader:
    """Loads on one instance; concurrent callers of one target share its load."""

    def __init__(
        self,
        *,
        evictor: Evictor,
        prepare: Prepare | None = None,
        url_for: Callable[[Path], str] = str,
    ) -> None:
        """Loads share the evictor's parts: the loaded set, the front end's control calls,
        the memory gauge, the artifact cache, metrics and events. ``prepare`` derives what
        this server cannot serve as it is; ``url_for`` is an artifact folder as the server
        sees it (a container mounts the cache elsewhere)."""
        self.evictor = evictor
        self.state = evictor.state
        self.control = evictor.control
        self.gauge = evictor.gauge
        self.cache = evictor.cache
        self.metrics = evictor.metrics
        self.events = evictor.events
        self.prepare = prepare
        self.url_for = url_for

    def new_entry(self, target: str) -> ModelEntry:
        """A new entry for ``target``, loading, in the loaded set (start it with :meth:`load`)."""
        entry = ModelEntry(
            target=target,
            key=target_key(target),
            state=LOADING,
            last_used_s=time.monotonic(),
            future=quiet_future(),
            footprint_bytes=self.state.footprints.get(target),
        )
        self.state.models[target] = entry
        return entry

    def start(self, entry: ModelEntry) -> None:
        """Run :meth:`load` for ``entry`` as its task (``entry.task``). A task cancelled
        before it began (an instance stopped in the same turn) never runs :meth:`load`'s
        code: its callers are answered then, as for a load interrupted later."""
        entry.task = task = asyncio.ensure_future(self.load(entry))
        task.add_done_callback(lambda _: self._not_begun(entry, task))

    def _not_begun(self, entry: ModelEntry, task: asyncio.Future[None]) -> None:
        if not task.cancelled() or entry.task is not task or entry.future.done():
            return  # load() ran and answered (its own handler turns a cancel into an answer)
        if self.state.models.get(entry.target) is entry:
            del self.state.models[entry.target]
        entry.future.set_exception(self._interrupted())

    def _interrupted(self) -> InstanceUnavailableError:
        return InstanceUnavailableError(
            f"instance {self.state.index}: load interrupted (the server is stopping or "
            "restarting); retry"
        )

    async def load(self, entry: ModelEntry) -> None:
        """Run one load; its outcome goes to ``entry.future`` (what every caller awaits)."""
        try:
            await self._load_inner(entry)
        except BaseException as exc:
            if isinstance(exc, ModelLoadError) and exc.log_path is None:
                exc.log_path = self.control.log_path()  # every ModelError names the log
            callers = entry.future
            if self.state.models.get(entry.target) is entry:
                if entry.undo is not None and not entry.undo.done():
                    self._until_undone(entry, entry.undo)
                else:
                    del self.state.models[entry.target]
            if not callers.done():
                if isinstance(exc, asyncio.CancelledError):
                    exc = self._interrupted()
                callers.set_exception(exc)
            return
        if not entry.future.done():
            entry.future.set_result(None)

    def _until_undone(self, entry: ModelEntry, undo: asyncio.Future[int]) -> None:
        """Keep ``entry`` in the loaded set as unloading while the DELETE undoing its load
        runs (Triton still holds the name: a new call for it waits, as for any unload, and
        a new load waits for the DELETE), its artifact pinned; then let it go, recorded as
        any unload (:meth:`_record_undo`)."""
        entry.future = quiet_future()
        self.state.deletes[entry.target] = undo
        t0 = time.perf_counter()  # the DELETE started in this turn, as the load gave up

        def undone(_: object) -> None:
            if self.state.deletes.get(entry.target) is undo:
                del self.state.deletes[entry.target]
            if self.state.models.get(entry.target) is entry:
                del self.state.models[entry.target]
            self.cache.unpin(entry.target)
            if not entry.future.done():
                entry.future.set_result(None)
            if not undo.cancelled():  # a restart cancels it: the unload never ended
                self._record_undo(entry, undo.result(), time.perf_counter() - t0)

        undo.add_done_callback(undone)

    def _record_undo(self, entry: ModelEntry, status: int, seconds: float) -> None:
        """The undo's DELETE ended: an ``unload`` event, ``ModelUnloadingTime`` and
        ``ModelUnloads``, as the evictor records every other unload."""
        reason = (
            f"its load passed the load limit ({self.state.options.load_timeout_s:g}s) while "
            "Triton still loaded it: undone"
        )
        if status != 200:
            reason += " (the DELETE failed)" if status == 0 else f" (Triton answered {status})"
        self.metrics.observe("ModelUnloadingTime", seconds * 1e6)
        self.metrics.inc("ModelUnloads")
        self.events.add(
            "unload",
            entry.target,
            instance=self.state.index,
            reason=reason,
            duration_ms=seconds * 1e3,
        )

    async def _load_inner(self, entry: ModelEntry) -> None:
        # the artifact is held for this load until it pins it; a load that gives up before
        # (past the limit, its download still going on, or failed) lets it go at once
        claim = Claim()
        try:
            await self._fetch_and_load(entry, claim)
        finally:
            self.cache.release(claim)  # nothing left to release once pinned

    async def _fetch_and_load(self, entry: ModelEntry, claim: Claim) -> None:
        loop = asyncio.get_running_loop()
        limit_s = self.state.options.load_timeout_s
        # the platform's limit runs from the load's start: download, extraction, the wait
        # for the loads before it and Triton's load together (the MME guide)
        entry.load_deadline_s = deadline = loop.time() + limit_s
        try:
            async with asyncio.timeout_at(deadline):
                fetch = await loop.run_in_executor(
                    None,
                    lambda: self.cache.ensure(entry.target, prepare=self.prepare, claim=claim),
                )
        except TimeoutError:
            # the download goes on in its thread: its artifact stays on disk for a retry
            raise self._failed(
                entry, past_load_limit(entry.target, limit_s, "its artifact was still downloading")
            ) from None
        if fetch.downloaded:
            seconds = fetch.download_s + fetch.extract_s + fetch.prepare_s
            self.metrics.observe("ModelDownloadingTime", seconds * 1e6)
            self.events.add(
                "download",
                entry.target,
                instance=self.state.index,
                reason=f"not on disk; from {self.cache.store.description}",
                bytes=fetch.artifact.size_bytes,
                duration_ms=seconds * 1e3,
                detail={
                    "download_s": fetch.download_s,
                    "extract_s": fetch.extract_s,
                    "prepare_s": fetch.prepare_s,
                    "compressed_bytes": float(fetch.compressed_bytes),
                },
            )
        entry.framework = framework_of(fetch.artifact.serve_dir)
        entry.server_steps = has_server_steps(fetch.artifact.serve_dir)
        lock = self.state.load_lock
        try:
            async with asyncio.timeout_at(deadline):
                await lock.acquire()
        except TimeoutError:
            raise self._failed(
                entry, past_load_limit(entry.target, limit_s, "it waited for the loads before it")
            ) from None
        try:
            if not self.state.up:
                raise InstanceUnavailableError(f"instance {self.state.index} is restarting; retry")
            self.cache.pin(entry.target, claim)
            try:
                await self._load_locked(entry, self.url_for(fetch.artifact.serve_dir))
            except BaseException:
                if entry.undo is None:  # an undo keeps the pin until its DELETE ends
                    self.cache.unpin(entry.target)
                raise
        finally:
            lock.release()
        entry.state = READY
        entry.loaded_at_s = time.monotonic()

    def _failed(self, entry: ModelEntry, exc: _Failure) -> _Failure:
        """Record the ``error`` event of a load that failed before Triton answered it: past
        the load limit, or no room (every other model stayed busy, or a reload that may
        evict none), as a load Triton refused has one: the log shows every failed load;
        return ``exc``."""
        self.events.add("error", entry.target, instance=self.state.index, reason=str(exc)[:300])
        return exc

    def _need_bytes(self, entry: ModelEntry) -> int:
        """What the load will add: the model's own footprint (measured before, else the
        mean of those known), plus its framework's runtime when no loaded model holds it."""
        runtime = self.state.runtime_need_bytes(entry.framework, besides=entry.target)
        if entry.footprint_bytes is not None:
            return entry.footprint_bytes + runtime
        if self.state.footprints:
            mean = int(sum(self.state.footprints.values()) / len(self.state.footprints))
            return mean + runtime
        return estimate_footprint(e.usage() for e in self.state.models.values()) + runtime

    async def _load_locked(self, entry: ModelEntry, url_dir: str) -> None:
        pending = self.state.deletes.get(entry.target)
        if pending is not None:
            await asyncio.wait([pending])  # Triton still holds this name until its DELETE ends
        need = self._need_bytes(entry)
        try:
            before = await self.evictor.make_room(
                need, exclude=entry.target, why=f"load {entry.target}", evict=entry.evicts
            )
        except OutOfMemoryError as exc:
            self._failed(entry, exc)
            raise
        attempts = 0
        while True:
            t0 = time.perf_counter()
            self.state.changes += 1
            try:
                status, text = await self.control.post_load(entry, url_dir)
            except ModelLoadError as exc:  # past the load limit (its only ModelLoadError)
                self._failed(entry, exc)
                raise
            seconds = time.perf_counter() - t0
            if status == 200 or status == 409:
                break
            if status == 507 and entry.evicts and attempts < self.state.options.oom_retries:
                attempts += 1
                victim = await self.evictor.idle_victim(exclude=entry.target)
                if victim is not None:
                    delete = await self.evictor.unload(
                        victim,
                        kind="evict",
                        reason=f"Triton answered 507 loading {entry.target}: {text[:200]}",
                    )
                    if delete is not None:  # all its memory back before Triton tries again
                        await asyncio.wait([delete], timeout=self.state.options.release_timeout_s)
                    before = await self.gauge.read()
                    continue
            self.events.add("error", entry.target, instance=self.state.index, reason=text[:300])
            busy = self.evictor.busy_others(exclude=entry.target)
            if status == 507 and not entry.evicts:
                raise OutOfMemoryError(
                    f"TargetModel {entry.target!r} was not loaded again after the restart: "
                    f"Triton answered 507 and the models loaded were used more recently: {text}"
                )
            if status == 507 and busy:
                raise OutOfMemoryError(
                    f"TargetModel {entry.target!r} does not fit in memory beside {len(busy)} "
                    f"other model(s) that stayed busy with calls for "
                    f"{self.state.options.busy_wait_s:g}s: {text}. Retry when fewer calls are in "
                    f"flight, or give the instance more memory (--memory-budget on a host "
                    f"without a GPU, a larger GPU otherwise)"
                )
            if status == 507:
                raise OutOfMemoryError(
                    f"TargetModel {entry.target!r} does not fit in memory even with nothing "
                    f"else loaded: {text}. Give the instance more memory (--memory-budget on a "
                    f"host without a GPU, a larger GPU otherwise) or shrink the model "
                    f"(fewer instance_group copies, a smaller max_batch_size)"
                )
            raise ModelLoadError(
                f"Triton could not load {entry.target!r} (HTTP {status}): {text}"
                + self._step_collision(entry.target),
                model_name=entry.target,
                triton_message=text,
                status_code=status,
                log_path=self.control.log_path(),
            )
        after = await self.gauge.read()
        runtime = record_load(self.state, entry, before, after)
        self.metrics.observe("ModelLoadingTime", seconds * 1e6)
        self.metrics.inc("ModelLoads")
        self.events.add(
            "load",
            entry.target,
            instance=self.state.index,
            reason=f"cold call ({len(self.state.models)} model(s) here)"
            + (f"; it brought the {entry.framework} runtime: {runtime:,} bytes" if runtime else ""),
            bytes=entry.footprint_bytes,
            duration_ms=seconds * 1e3,
            memory_used_bytes=after.used_bytes,
            detail={"runtime_bytes": float(runtime)} if runtime else None,
        )
        if after.used_bytes > self.gauge.limit_bytes and entry.evicts:
            await self.evictor.make_room(
                0, exclude=entry.target, why=f"over the limit after {entry.target}", strict=False
            )

    def _step_collision(self, target: str) -> str:
        """Which loaded TargetModels already hold ``target``'s ensemble steps ('' if none)."""
        mine = self.cache.lookup(target)
        if self.state.options.model_namespacing or mine is None or not mine.steps:
            return ""
        clashes = []
        for other in self.state.loaded():
            art = self.cache.lookup(other)
            shared = sorted(set(mine.steps) & set(art.steps)) if art is not None else []
            clashes += [f"step {name!r} is also loaded by {other!r}" for name in shared]
        if not clashes:
            return ""
        return (
            f"; {'; '.join(clashes)}: without model namespacing "
            "(SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING=false) ensemble step names are global "
            "in one Triton, on SageMaker too: rename the steps or leave namespacing on"
        )


_PLATFORM = re.compile(r'^\s*(platform|backend)\s*:\s*"([^"]+)"', re.MULTILINE)
_SOURCE = re.compile(r'mmelocal_source_platform"\s*value\s*\{\s*string_value\s*:\s*"([^"]+)"')


def _config_texts(serve_dir: Path) -> list[str]:
    """The config.pbtxt of ``serve_dir`` and of each model folder in it (those readable)."""
    texts = []
    for config in [serve_dir / "config.pbtxt", *serve_dir.glob("*/config.pbtxt")]:
        try:
            texts.append(config.read_text(errors="replace"))
        except OSError:
            continue
    return texts


def framework_of(serve_dir: Path) -> str:
    """The runtimes a load of ``serve_dir`` needs, e.g. ``pytorch_libtorch`` or
    ``onnxruntime_onnx+python`` ("" when no config says): the platform or backend of each
    model folder's config.pbtxt (a derived Python copy counts as its source's)."""
    found: set[str] = set()
    for text in _config_texts(serve_dir):
        source = _SOURCE.search(text)
        if source is not None:
            found.add(source.group(1))
            continue
        found.update(m.group(2) for m in _PLATFORM.finditer(text) if m.group(2) != "ensemble")
    return "+".join(sorted(found))


def has_server_steps(serve_dir: Path) -> bool:
    """Whether a model of ``serve_dir`` runs in Triton's own process: a platform or backend
    other than ``python`` (TorchScript, ONNX Runtime, TensorRT...; a Python-backend model,
    a derived Python copy included, runs in a stub process of its own)."""
    return any(
        m.group(2) not in ("python", "ensemble")
        for text in _config_texts(serve_dir)
        for m in _PLATFORM.finditer(text)
    )


__all__ = ["Loader", "framework_of", "has_server_steps"]
