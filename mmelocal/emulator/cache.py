"""The artifact cache on disk: download, safe extraction, disk budget.

Layout under ``root``::

    <root>/<key>/model/        the extracted tarball (the folder given to Triton as "url")
    <root>/<key>/served/       a derived copy Triton can run (when ``prepare`` made one, or
                               the root layout re-homed under ``served/model/``)
    <root>/<key>/meta.json     the TargetModel, the store version, the size on disk
    <root>/.staging-*/         work in progress (removed at start)
    <root>/.trash-*/           artifacts being deleted (removed at start)
    <root>/.downloads/         tarballs being downloaded

An entry is built in a staging folder and renamed into place, so a half-written model is
never served. Extraction goes through :func:`mmelocal.builder.tarball.safe_extract` (no
escapes, size and member limits). An artifact's size is the disk blocks of its files,
each inode counted once (``served/`` is mostly hard links to ``model/``). When the disk
budget would be crossed, the least recently used artifacts that are not pinned (loaded in
Triton) are deleted first; artifacts that are all pinned may hold more than the budget
(a warning says so), and the moment one is unpinned (its model unloaded) the cache is
brought back under the budget. Every method here blocks (call it from an executor) but
:meth:`ArtifactCache.pin`, :meth:`ArtifactCache.unpin` and :meth:`ArtifactCache.release`,
which only hand deletions to a background thread.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mmelocal.builder.mme_layout import MmeLayout, read_layout
from mmelocal.emulator.lru import ArtifactUsage, plan_disk_eviction
from mmelocal.emulator.store import ModelStore, validate_target
from mmelocal.errors import (
    ConfigError,
    EmulatorError,
    UnsafeArchiveError,
    UserInputError,
    ValidationError,
)

logger = logging.getLogger(__name__)

#: seconds an artifact :meth:`ArtifactCache.ensure` returned is kept for its caller to
#: pin it (a load may wait behind others for minutes); then it is fair game again
CLAIM_S = 900.0

#: layout findings the platform does not judge before the load: the container refuses
#: such a model itself (an ensemble config.pbtxt that does not parse)
TRITON_JUDGES = frozenset({"config.invalid"})

Prepare = Callable[[MmeLayout, Path], "Path | None"]
"""``prepare(layout, out_dir)``: write the folders of ``layout`` Triton can run into
``out_dir`` (returning it), or return None to serve the extracted folder as it is."""


@dataclass
class CachedArtifact:
    """One artifact on disk; ``serve_dir`` is the folder to hand to Triton."""

    target: str
    key: str
    entry_dir: Path
    serve_dir: Path
    size_bytes: int
    version: str
    last_used_s: float
    pins: int = 0
    claimed_until_s: float = 0.0
    """:meth:`ArtifactCache.ensure` handed it out: kept until pinned, or until then."""
    claims: int = 0
    """Hand-outs not pinned yet (several instances may load one artifact): each pin takes
    one, the last one ends the claim."""
    steps: tuple[str, ...] = ()
    """Ensemble steps the load adds under their own names (global in one Triton only
    without model namespacing)."""


@dataclass(frozen=True, kw_only=True)
class FetchResult:
    """What :meth:`ArtifactCache.ensure` did: a cache hit, or download and extraction times."""

    artifact: CachedArtifact
    downloaded: bool
    download_s: float = 0.0
    extract_s: float = 0.0
    prepare_s: float = 0.0
    compressed_bytes: int = 0


class Claim:
    """One caller's hold on the artifact :meth:`ArtifactCache.ensure` hands it, from the
    hand-out until the caller pins it (:meth:`ArtifactCache.pin`) or gives up
    (:meth:`ArtifactCache.release`). The caller makes it before :meth:`~ArtifactCache.ensure`
    runs, so a load that gives up while its download goes on in another thread can release
    it: the download, when it ends, then claims nothing."""

    __slots__ = ("artifact", "given_up")

    def __init__(self) -> None:
        self.artifact: CachedArtifact | None = None
        """The artifact held (None before the hand-out, and once pinned or released)."""
        self.given_up = False
        """Released: a hand-out that comes later takes no claim."""


def target_key(target: str) -> str:
    """A file-system and URL safe key for a TargetModel (hex digest)."""
    return hashlib.sha256(target.encode("utf-8")).hexdigest()[:32]


def tree_size(path: Path) -> int:
    """Bytes of disk held by the files under ``path``: allocated blocks, each inode once
    (hard links share their blocks); symlinks not followed."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            inode = (st.st_dev, st.st_ino)
            if inode in seen:
                continue
            seen.add(inode)
            total += st.st_blocks * 512
    return total


class ArtifactCache:
    """Artifacts of one store on local disk, under a disk budget (see the module docstring)."""

    def __init__(
        self,
        root: Path | str,
        store: ModelStore,
        *,
        disk_budget_bytes: int,
        max_unpacked_bytes: int | None = None,
        max_members: int | None = None,
    ) -> None:
        if disk_budget_bytes <= 0:
            raise UserInputError(f"disk_budget_bytes must be > 0, got {disk_budget_bytes}")
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.store = store
        self.disk_budget_bytes = disk_budget_bytes
        self.max_unpacked_bytes = max_unpacked_bytes or disk_budget_bytes
        self.max_members = max_members
        self._entries: dict[str, CachedArtifact] = {}
        self._lock = threading.Lock()
        self._target_locks: dict[str, threading.Lock] = {}
        self._downloads = self.root / ".downloads"
        # deletes downloaded tarballs off the cold call's path (freeing an 80 MB file's
        # blocks takes ~19 ms on ext4); created on first use, joined by close()
        self._janitor: ThreadPoolExecutor | None = None
        self._scan()

    def close(self) -> None:
        """Finish pending deletions of downloaded tarballs (idempotent)."""
        with self._lock:
            janitor, self._janitor = self._janitor, None
        if janitor is not None:
            janitor.shutdown(wait=True)

    def _discard_later(self, path: Path) -> None:
        self._later(functools.partial(path.unlink, missing_ok=True))

    def _later(self, work: Callable[[], object]) -> None:
        with self._lock:
            if self._janitor is None:
                self._janitor = ThreadPoolExecutor(1, thread_name_prefix="mmelocal-janitor")
            janitor = self._janitor
        janitor.submit(work)

    # -- bookkeeping -------------------------------------------------------------------
    def _scan(self) -> None:
        for pattern in (".staging-*", ".trash-*"):
            for leftover in self.root.glob(pattern):
                shutil.rmtree(leftover, ignore_errors=True)
        shutil.rmtree(self._downloads, ignore_errors=True)
        self._downloads.mkdir(parents=True, exist_ok=True)
        for meta_path in self.root.glob("*/meta.json"):
            try:
                meta = json.loads(meta_path.read_text())
                entry = meta_path.parent
                serve = entry / ("served" if (entry / "served").is_dir() else "model")
                art = CachedArtifact(
                    target=str(meta["target"]),
                    key=entry.name,
                    entry_dir=entry,
                    serve_dir=serve,
                    size_bytes=int(meta["size_bytes"]),
                    version=str(meta.get("version", "")),
                    last_used_s=float(meta_path.stat().st_mtime),
                    steps=tuple(str(s) for s in meta.get("steps", ())),
                )
            except (OSError, ValueError, KeyError):
                shutil.rmtree(meta_path.parent, ignore_errors=True)
                continue
            self._entries[art.target] = art
        if self._entries:
            logger.info("artifact cache %s: %d artifacts kept from before", self.root, len(self))

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def used_bytes(self) -> int:
        """Bytes on disk held by cached artifacts."""
        with self._lock:
            return sum(a.size_bytes for a in self._entries.values())

    @property
    def utilization_percent(self) -> float:
        """``DiskUtilization``: used bytes as a percentage of the disk budget."""
        return 100.0 * self.used_bytes / self.disk_budget_bytes

    def lookup(self, target: str) -> CachedArtifact | None:
        """The cached artifact for ``target`` (no I/O), or None."""
        return self._entries.get(target)

    def targets(self) -> list[str]:
        """TargetModels on disk."""
        return list(self._entries)

    def pin(self, target: str, claim: Claim | None = None) -> None:
        """Mark ``target`` as loaded in a Triton instance (never deleted while pinned); the
        pin takes the hand-out's claim (``claim``'s, or one of the artifact's)."""
        with self._lock:
            art = self._entries.get(target)
            if claim is not None:
                held, claim.artifact = claim.artifact, None
                claim.given_up = True
                if held is not None:
                    self._unclaim(held)
            elif art is not None:
                self._unclaim(art)
            if art is not None:
                art.pins += 1
                art.last_used_s = time.time()

    def release(self, claim: Claim) -> None:
        """Give up ``claim`` (its load ended before the pin: past the load limit, failed,
        interrupted): the artifact it holds is fair game for the disk budget again, and a
        hand-out still to come (a download going on in its thread) takes no claim. A
        released or pinned claim is left as it is. When the cache is over its budget, the
        artifacts no longer held are deleted at once, as :meth:`unpin` does."""
        with self._lock:
            held, claim.artifact = claim.artifact, None
            claim.given_up = True
            if held is None:
                return
            self._unclaim(held)
            removed = self._plan_removal(0, exclude=None)
        if removed:
            self._later(functools.partial(self._delete, removed))

    def _claim(self, art: CachedArtifact, claim: Claim | None) -> None:
        """Hand ``art`` out (the lock held): kept until pinned, released, or CLAIM_S."""
        if claim is not None:
            if claim.given_up:
                return
            claim.artifact = art
        art.claims += 1
        art.claimed_until_s = time.monotonic() + CLAIM_S

    @staticmethod
    def _unclaim(art: CachedArtifact) -> None:
        """End one hand-out's claim on ``art`` (the lock held)."""
        art.claims = max(0, art.claims - 1)
        if not art.claims:
            art.claimed_until_s = 0.0

    def unpin(self, target: str) -> None:
        """Undo one :meth:`pin` (the last one counts as the artifact's last use). When the
        cache is over its budget (everything was pinned), unpinned artifacts are deleted at
        once, least recently used first, down to it (on a background thread: this never
        blocks)."""
        with self._lock:
            art = self._entries.get(target)
            if art is None or art.pins == 0:
                return
            art.pins -= 1
            if art.pins:
                return
            art.last_used_s = time.time()  # in use until its last model unloaded
            removed = self._plan_removal(0, exclude=None)
        if removed:
            self._later(functools.partial(self._delete, removed))

    def _plan_removal(self, need_bytes: int, *, exclude: str | None) -> list[CachedArtifact]:
        """Take the artifacts to delete out of the index (the lock held)."""
        now_s = time.monotonic()
        usage = [
            ArtifactUsage(
                target=a.target,
                size_bytes=a.size_bytes,
                last_used_s=a.last_used_s,
                in_use=a.pins > 0 or a.target == exclude or a.claimed_until_s > now_s,
            )
            for a in self._entries.values()
        ]
        used = sum(a.size_bytes for a in usage)
        victims = plan_disk_eviction(
            usage, used_bytes=used, budget_bytes=self.disk_budget_bytes, need_bytes=need_bytes
        )
        removed = [self._entries.pop(v) for v in victims]
        for art in removed:  # renamed now: a new download of the target may take its place
            trash = self.root / f".trash-{art.key}-{uuid.uuid4().hex[:8]}"
            with contextlib.suppress(OSError):
                os.rename(art.entry_dir, trash)
                art.entry_dir = trash
        return removed

    def _delete(self, removed: list[CachedArtifact]) -> None:
        for art in removed:
            shutil.rmtree(art.entry_dir, ignore_errors=True)
            logger.info(
                "deleted artifact %s (%d bytes, least recently used): disk budget %d bytes",
                art.target,
                art.size_bytes,
                self.disk_budget_bytes,
            )

    # -- the work ----------------------------------------------------------------------
    def ensure(
        self, target: str, *, prepare: Prepare | None = None, claim: Claim | None = None
    ) -> FetchResult:
        """The artifact for ``target`` on disk: a hit, or download + safe extraction.

        The extracted folder goes through :func:`~mmelocal.builder.mme_layout.read_layout`
        (SageMaker's layout rules); ``prepare`` (see :data:`Prepare`) may then write a
        derived copy. The artifact is claimed for the caller until it pins it: held in
        ``claim`` when one is given (released with :meth:`release`), else for CLAIM_S.
        """
        validate_target(target)
        with self._lock:
            lock = self._target_locks.setdefault(target, threading.Lock())
        with lock:
            art = self._entries.get(target)
            if art is not None and art.entry_dir.is_dir():
                with self._lock:
                    art.last_used_s = time.time()
                    self._claim(art, claim)
                return FetchResult(artifact=art, downloaded=False)
            return self._download(target, prepare, claim)

    def _download(self, target: str, prepare: Prepare | None, claim: Claim | None) -> FetchResult:
        from mmelocal.builder.tarball import safe_extract

        info = self.store.stat(target)
        self._make_room(info.size_bytes * 2, exclude=target)
        key = target_key(target)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.root))
        tarball = self._downloads / f"{key}-{os.getpid()}-{threading.get_ident()}.tar.gz"
        try:
            t0 = time.perf_counter()
            compressed = self.store.fetch(target, tarball)
            t1 = time.perf_counter()
            if self.max_members:
                safe_extract(
                    tarball,
                    staging / "model",
                    max_unpacked_bytes=self.max_unpacked_bytes,
                    max_members=self.max_members,
                )
            else:
                safe_extract(tarball, staging / "model", max_unpacked_bytes=self.max_unpacked_bytes)
            t2 = time.perf_counter()
            self._discard_later(tarball)
            serve_rel, steps = _serve_folder(staging, target, prepare)
            t3 = time.perf_counter()
            size = tree_size(staging)
            meta = {
                "target": target,
                "version": info.version,
                "size_bytes": size,
                "steps": list(steps),
            }
            (staging / "meta.json").write_text(json.dumps(meta))
            entry = self.root / key
            if entry.exists():
                shutil.rmtree(entry, ignore_errors=True)
            os.rename(staging, entry)
        except (UnsafeArchiveError, UserInputError, ValidationError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            tarball.unlink(missing_ok=True)
            text = str(exc).replace(str(tarball), "the tarball").replace(str(staging), "")
            message = f"TargetModel {target!r}: {text}" if target not in text else text
            if isinstance(exc, UnsafeArchiveError):
                raise UnsafeArchiveError(message, archive=target) from exc
            raise ValidationError(message) from exc
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            tarball.unlink(missing_ok=True)
            raise
        art = CachedArtifact(
            target=target,
            key=key,
            entry_dir=entry,
            serve_dir=entry / serve_rel,
            size_bytes=size,
            version=info.version,
            last_used_s=time.time(),
            steps=steps,
        )
        with self._lock:
            self._entries[target] = art
            self._claim(art, claim)
        logger.info(
            "downloaded %s (%d bytes) in %.3fs, extracted %d bytes in %.3fs",
            target,
            compressed,
            t1 - t0,
            size,
            t2 - t1,
        )
        self._make_room(0, exclude=target)
        return FetchResult(
            artifact=art,
            downloaded=True,
            download_s=t1 - t0,
            extract_s=t2 - t1,
            prepare_s=t3 - t2,
            compressed_bytes=compressed,
        )

    def _make_room(self, need_bytes: int, *, exclude: str) -> None:
        with self._lock:
            used = sum(a.size_bytes for a in self._entries.values())
            removed = self._plan_removal(need_bytes, exclude=exclude)
        self._delete(removed)
        left = used - sum(a.size_bytes for a in removed)
        if not need_bytes and left > self.disk_budget_bytes:
            logger.warning(
                "artifacts of loaded models hold %d bytes of disk, over the budget of %d: "
                "unused ones are deleted as soon as their models unload",
                left,
                self.disk_budget_bytes,
            )
        if need_bytes and left + need_bytes > self.disk_budget_bytes:
            if need_bytes > self.disk_budget_bytes:
                raise EmulatorError(
                    f"artifact needs about {need_bytes} bytes of disk, more than the whole "
                    f"disk budget ({self.disk_budget_bytes}); raise --disk-budget"
                )
            logger.warning(
                "disk budget %d bytes exceeded: artifacts in use", self.disk_budget_bytes
            )

    def remove(self, target: str) -> None:
        """Delete ``target``'s artifact from disk (unless pinned)."""
        with self._lock:
            art = self._entries.get(target)
            if art is None or art.pins > 0:
                return
            del self._entries[target]
        shutil.rmtree(art.entry_dir, ignore_errors=True)


def _serve_folder(
    staging: Path, target: str, prepare: Prepare | None
) -> tuple[str, tuple[str, ...]]:
    """Apply the layout rules to ``staging/model``; the folder (relative) to give Triton
    and the names of the ensemble steps the load adds.

    Triton's root rule only works under ``/opt/ml/models/<hash>/model``, so a root-layout
    model is re-homed as ``served/model/`` (the folder name SageMaker's Triton uses)."""
    layout = read_layout(staging / "model")
    layout.raise_for_errors(f"TargetModel {target!r}", except_codes=TRITON_JUDGES)
    if prepare is not None and layout.ok:
        try:
            if prepare(layout, staging / "served") is not None:
                return "served", layout.step_names
        except ConfigError as exc:
            # a config.pbtxt that does not parse (or names no backend) is the container's
            # to refuse: Triton answers the load 400, the caller a ModelError with its text
            logger.info("TargetModel %r: handing the original to Triton (%s)", target, exc)
            shutil.rmtree(staging / "served", ignore_errors=True)
    if layout.rule == "root":
        (staging / "served").mkdir()
        os.rename(staging / "model", staging / "served" / layout.served_folder_name())
        (staging / "model").mkdir()
        return "served", layout.step_names
    return "model", layout.step_names


__all__ = ["ArtifactCache", "CachedArtifact", "Claim", "FetchResult", "target_key", "tree_size"]
