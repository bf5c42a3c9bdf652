"""Loading a model on one instance: fetch the artifact, make room, ``POST /models``.

:class:`LoadingMixin` is the part of :class:`~mmelocal.emulator.instance.TritonInstance`
that loads: the artifact comes from the cache (downloaded and extracted when absent), room
is made by eviction (:class:`~mmelocal.emulator.eviction.EvictionMixin`), then Triton's
SageMaker front end loads it; a 507 evicts one more model and retries. The memory probe
before and after measures the model's footprint for next time. One load runs at a time
per instance (``_load_lock``), so the readings measure that load alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp

from mmelocal.emulator.cache import target_key
from mmelocal.emulator.entries import (
    LOADING,
    READY,
    InstanceUnavailableError,
    ModelEntry,
    quiet_future,
)
from mmelocal.emulator.eviction import EvictionMixin
from mmelocal.emulator.lru import estimate_footprint
from mmelocal.errors import ModelLoadError, OutOfMemoryError
from mmelocal.runtime.sagemaker import TARGET_MODEL_HEADER, load_body

if TYPE_CHECKING:
    from mmelocal.emulator.cache import Prepare
    from mmelocal.runtime.launcher import TritonLauncher


class LoadingMixin(EvictionMixin):
    """Loading for :class:`~mmelocal.emulator.instance.TritonInstance`."""

    launcher: TritonLauncher
    prepare: Prepare | None
    url_for: Callable[[Path], str]
    up: bool
    _load_lock: asyncio.Lock

    def loaded(self) -> list[str]:
        """Targets loaded here, least recently used first (the instance defines it)."""
        raise NotImplementedError

    def _new_entry(self, target: str) -> ModelEntry:
        entry = ModelEntry(
            target=target,
            key=target_key(target),
            state=LOADING,
            last_used_s=time.monotonic(),
            future=quiet_future(),
            footprint_bytes=self.footprints.get(target),
        )
        self.models[target] = entry
        return entry

    async def _load(self, entry: ModelEntry) -> None:
        """Run one load; its outcome goes to ``entry.future`` (what every caller awaits)."""
        try:
            await self._load_inner(entry)
        except BaseException as exc:
            if self.models.get(entry.target) is entry:
                del self.models[entry.target]
            if not entry.future.done():
                if isinstance(exc, asyncio.CancelledError):
                    exc = InstanceUnavailableError(f"instance {self.index}: load interrupted")
                entry.future.set_exception(exc)
            return
        if not entry.future.done():
            entry.future.set_result(None)

    async def _load_inner(self, entry: ModelEntry) -> None:
        loop = asyncio.get_running_loop()
        fetch = await loop.run_in_executor(
            None, lambda: self.cache.ensure(entry.target, prepare=self.prepare)
        )
        if fetch.downloaded:
            seconds = fetch.download_s + fetch.extract_s + fetch.prepare_s
            self.metrics.observe("ModelDownloadingTime", seconds * 1e6)
            self.events.add(
                "download",
                entry.target,
                instance=self.index,
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
        async with self._load_lock:
            if not self.up:
                raise InstanceUnavailableError(f"instance {self.index} is restarting; retry")
            self.cache.pin(entry.target)
            try:
                await self._load_locked(entry, self.url_for(fetch.artifact.serve_dir))
            except BaseException:
                self.cache.unpin(entry.target)
                raise
        entry.state = READY
        entry.loaded_at_s = time.monotonic()

    def _need_bytes(self, entry: ModelEntry) -> int:
        if entry.footprint_bytes:
            return entry.footprint_bytes
        if self.footprints:
            return int(sum(self.footprints.values()) / len(self.footprints))
        return estimate_footprint(e.usage() for e in self.models.values())

    async def _load_locked(self, entry: ModelEntry, url_dir: str) -> None:
        pending = self._deletes.get(entry.target)
        if pending is not None:
            await asyncio.wait([pending])  # Triton still holds this name until its DELETE ends
        need = self._need_bytes(entry)
        before = await self._make_room(need, exclude=entry.target, why=f"load {entry.target}")
        attempts = 0
        while True:
            t0 = time.perf_counter()
            status, text = await self._post_load(entry, url_dir)
            seconds = time.perf_counter() - t0
            if status == 200 or status == 409:
                break
            if status == 507 and attempts < self.options.oom_retries:
                attempts += 1
                victims = [e for e in self.loaded() if self.models[e].usage().evictable]
                victims = [v for v in victims if v != entry.target]
                if victims:
                    await self._unload(
                        self.models[victims[0]],
                        kind="evict",
                        reason=f"Triton answered 507 loading {entry.target}: {text[:200]}",
                    )
                    before = await self.read_memory()
                    continue
            self.events.add("error", entry.target, instance=self.index, reason=text[:300])
            if status == 507:
                raise OutOfMemoryError(
                    f"TargetModel {entry.target!r} does not fit in memory even with nothing "
                    f"else loaded: {text}"
                )
            raise ModelLoadError(
                f"Triton could not load {entry.target!r} (HTTP {status}): {text}"
                + self._step_collision(entry.target),
                model_name=entry.target,
                triton_message=text,
                status_code=status,
            )
        after = await self.read_memory()
        grown = after.used_bytes - before.used_bytes
        if grown > 0:
            entry.footprint_bytes = max(grown, entry.footprint_bytes or 0)
            self.footprints[entry.target] = entry.footprint_bytes
        self.metrics.observe("ModelLoadingTime", seconds * 1e6)
        self.metrics.inc("ModelLoads")
        self.events.add(
            "load",
            entry.target,
            instance=self.index,
            reason=f"cold call ({len(self.models)} model(s) here)",
            bytes=entry.footprint_bytes,
            duration_ms=seconds * 1e3,
            memory_used_bytes=after.used_bytes,
        )
        if after.used_bytes > self.limit_bytes:
            await self._make_room(
                0, exclude=entry.target, why=f"over the limit after {entry.target}", strict=False
            )

    def _step_collision(self, target: str) -> str:
        """Which loaded TargetModels already hold ``target``'s ensemble steps ('' if none)."""
        mine = self.cache.lookup(target)
        if mine is None or not mine.steps:
            return ""
        clashes = []
        for other in self.loaded():
            art = self.cache.lookup(other)
            shared = sorted(set(mine.steps) & set(art.steps)) if art is not None else []
            clashes += [f"step {name!r} is also loaded by {other!r}" for name in shared]
        if not clashes:
            return ""
        return (
            f"; {'; '.join(clashes)}: ensemble step names are global in one Triton (on "
            "SageMaker too), rename the steps so every tarball's are unique"
        )

    async def _post_load(self, entry: ModelEntry, url_dir: str) -> tuple[int, str]:
        assert self.session is not None
        try:
            async with self.session.post(
                f"{self._sm_url}/models",
                data=load_body(entry.key, url_dir),
                headers={TARGET_MODEL_HEADER: entry.target, "Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self.options.load_timeout_s),
            ) as resp:
                return resp.status, await resp.text()
        except asyncio.TimeoutError as exc:
            await self._delete(entry)
            raise ModelLoadError(
                f"Triton did not finish loading {entry.target!r} within "
                f"{self.options.load_timeout_s:g}s (a stub that cannot start hangs the load; "
                f"see {self.launcher.log_path})",
                model_name=entry.target,
            ) from exc
        except aiohttp.ClientError as exc:
            raise self.connection_error(exc) from exc


__all__ = ["LoadingMixin"]
