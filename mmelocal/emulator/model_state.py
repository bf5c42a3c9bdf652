"""The plain data of one instance's loaded set, its options and its errors."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from mmelocal.emulator.lru import ModelUsage
from mmelocal.errors import (  # noqa: F401 (re-exported)
    EmulatorError,
    InstanceUnavailableError,
    ModelNotReadyError,
    UserInputError,
)
from mmelocal.facts.sagemaker import (
    BUSY_WAIT_S,
    INVOKE_TIMEOUT_S,
    LOAD_LIMIT_S,
    MEMORY_THRESHOLD,
    UNLOAD_TIMEOUT_S,
)

LOADING, READY, UNLOADING = "loading", "ready", "unloading"


@dataclass(frozen=True, kw_only=True)
class InstanceOptions:
    """Tuning of one instance (times in seconds, memory threshold as a fraction).

    ``model_namespacing`` says whether its Triton runs with it (the entrypoint's default):
    without it, ensemble step names are global in the server.
    """

    memory_threshold: float = MEMORY_THRESHOLD
    load_timeout_s: float = LOAD_LIMIT_S
    unload_timeout_s: float = UNLOAD_TIMEOUT_S
    #: SageMaker's limit for the container's answer to one invocation
    invoke_timeout_s: float = INVOKE_TIMEOUT_S
    release_timeout_s: float = 5.0
    busy_wait_s: float = BUSY_WAIT_S
    oom_retries: int = 8
    model_namespacing: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.memory_threshold <= 1.0:
            raise UserInputError(f"memory_threshold must be in (0, 1], got {self.memory_threshold}")
        for name in (
            "load_timeout_s",
            "unload_timeout_s",
            "invoke_timeout_s",
            "release_timeout_s",
            "busy_wait_s",
        ):
            if getattr(self, name) <= 0:
                raise UserInputError(f"{name} must be > 0, got {getattr(self, name)}")


@dataclass
class ModelEntry:
    """One model in this instance's loaded set."""

    target: str
    key: str
    state: str
    last_used_s: float
    future: asyncio.Future[None]
    in_flight: int = 0
    waiters: int = 0
    footprint_bytes: int | None = None
    #: the processes its load started (its Python-backend stubs), from the per-process
    #: figures of the readings around it: empty when they had none or it started none
    pids: frozenset[int] = frozenset()
    #: whether a step of it runs in the server's own process (a backend other than Python)
    server_steps: bool = False
    #: its part of the server process's memory: the server's growth at its load (for a
    #: model with :attr:`pids`, only when a step of it runs there) and at its first call
    server_bytes: int = 0
    loaded_at_s: float = 0.0
    task: asyncio.Future[None] | None = None
    #: the shared runtime it needs (``torch``, ``onnxruntime``, ...; "" = unknown)
    framework: str = ""
    #: whether its load may evict others: not a model loaded again after a restart (every
    #: model loaded before it was used more recently), until a call asks for it
    evicts: bool = True
    #: when its load must have ended (event loop time): the platform's limit covers the
    #: download, the extraction and the load together, from the load's start
    load_deadline_s: float = math.inf
    #: the DELETE undoing its load, given up at the limit while Triton still loaded it
    #: (:meth:`~.sagemaker_control.SageMakerControl.post_load`); None when there is none
    #: (its result: Triton's status, 0 when the DELETE failed)
    undo: asyncio.Future[int] | None = None

    def usage(self, runtime_bytes: int = 0) -> ModelUsage:
        """The plain-data view the eviction policy works on (``runtime_bytes``: the shared
        runtime that leaves with it)."""
        return ModelUsage(
            name=self.target,
            last_used_s=self.last_used_s,
            footprint_bytes=self.footprint_bytes,
            in_flight=self.in_flight,
            pinned=self.waiters > 0 or self.state != READY,
            runtime_bytes=runtime_bytes,
        )


@dataclass(kw_only=True)
class LoadedSet:
    """One instance's models and the unloads still finishing, shared by the instance, its
    :class:`~mmelocal.emulator.loading.Loader` and its
    :class:`~mmelocal.emulator.eviction.Evictor`.

    ``load_lock`` makes loads (and the unloads they cause) run one at a time, so memory
    readings before and after a load measure that load alone; ``up`` is False while the
    server is down or restarting.
    """

    index: int
    options: InstanceOptions
    models: dict[str, ModelEntry] = field(default_factory=dict)
    #: measured footprint per target (its own memory), kept for its next load: the most
    #: it was measured at, which a load plans for (it only rises)
    footprints: dict[str, int] = field(default_factory=dict)
    #: what each target held the last time it was measured loaded (its load, a reading
    #: while idle, its unload): its part of the used memory beside the models loaded then.
    #: PSS divides shared pages among the processes that map them, so a stub measured
    #: alone holds more than beside others (the tiny model: 26.0 MiB alone, 23.3-24.4
    #: beside two more)
    held: dict[str, int] = field(default_factory=dict)
    #: a framework's shared runtime (libtorch, libpython, ...) as its first model's load
    #: measured it: reserved once, until the last model of that framework leaves
    runtimes: dict[str, int] = field(default_factory=dict)
    #: DELETEs still running in the background, per target
    deletes: dict[str, asyncio.Future[int]] = field(default_factory=dict)
    #: unload bookkeeping still running in the background
    finishing: set[asyncio.Future[None]] = field(default_factory=set)
    load_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    up: bool = False
    #: the loads and unloads sent to Triton (``POST`` and ``DELETE``): two readings with
    #: the same count saw the server change for calls alone
    changes: int = 0
    #: the last reading with nothing loading, unloading or serving, as the first-call
    #: accounting keeps it (:func:`~mmelocal.emulator.footprints.remeasure`)
    quiet: QuietMark | None = None

    def loaded(self) -> list[str]:
        """Targets loaded here, least recently used first."""
        ready = [e for e in self.models.values() if e.state == READY]
        return [e.target for e in sorted(ready, key=lambda e: e.last_used_s)]

    def framework_loaded(self, framework: str, *, besides: str = "") -> bool:
        """True when a model of ``framework`` other than ``besides`` holds its runtime."""
        return any(
            e.framework == framework and e.target != besides and e.state != LOADING
            for e in self.models.values()
        )

    def runtime_need_bytes(self, framework: str, *, besides: str = "") -> int:
        """The shared runtime a model of ``framework`` brings when none is loaded (0 else)."""
        if not framework or self.framework_loaded(framework, besides=besides):
            return 0
        return self.runtimes.get(framework, 0)

    def usages(self, *, exclude: str = "") -> list[ModelUsage]:
        """Every model but ``exclude`` as the policy sees it, each carrying the runtime
        that leaves with it when it is the last of its framework."""
        return [
            e.usage(self.runtime_need_bytes(e.framework, besides=e.target))
            for e in self.models.values()
            if e.target != exclude
        ]


@dataclass(frozen=True, kw_only=True, eq=False)
class QuietMark:
    """One reading at which nothing loaded, unloaded or served a call (but the model whose
    load it ends), with what the first-call accounting compares the next one with."""

    server_pid: int
    server_bytes: int
    processes: frozenset[int]
    changes: int
    #: the loaded set then (held, so the ids below stay theirs), and each one's last use
    entries: tuple[ModelEntry, ...]
    last_used_s: tuple[float, ...]
    #: ids of the entries known to have had no call since their load
    fresh: frozenset[int]
    #: ids of the entries known to have had one
    called: frozenset[int]


@dataclass(frozen=True, kw_only=True)
class Acquired:
    """What :meth:`TritonInstance.acquire` did: hit or cold load, and the time spent."""

    cache_hit: bool
    wait_s: float = 0.0


def quiet_future() -> asyncio.Future[None]:
    """A future whose exception counts as retrieved even when no caller is left waiting."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    return future


__all__ = [
    "LOADING",
    "READY",
    "UNLOADING",
    "Acquired",
    "InstanceOptions",
    "InstanceUnavailableError",
    "LoadedSet",
    "ModelEntry",
    "ModelNotReadyError",
    "QuietMark",
    "quiet_future",
]
