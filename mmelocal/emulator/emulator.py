"""The MME platform: store + artifact caches + Triton instances + router + recovery + metrics.

:class:`Emulator` is what the HTTP server (and tests) drive: it makes sure a TargetModel is
loaded on an instance (downloading, extracting, evicting as SageMaker would), recovers
when Triton lost a model or ran out of memory, and records what the metrics need; the
forwarding itself is :mod:`.invocation`'s.

Each instance has its own disk, as each SageMaker instance has its own ML storage volume:
its own artifact cache under ``cache_dir`` (``artifacts/`` for the first instance,
``artifacts-N/`` for instance N) with its own ``disk_budget_bytes``; a model another
instance downloaded is downloaded again there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import CLI_FLAGS, LauncherFlags
from mmelocal.builder.mme_layout import MmeLayout
from mmelocal.emulator.cache import ArtifactCache, Prepare
from mmelocal.emulator.emulator_config import EmulatorConfig
from mmelocal.emulator.events import EventLog
from mmelocal.emulator.instance import InstanceOptions, TritonInstance
from mmelocal.emulator.metrics import Metrics
from mmelocal.emulator.own_thread import OwnThread
from mmelocal.emulator.probes import (
    CappedProbe,
    HostProbe,
    MemoryProbe,
    NvmlProbe,
)
from mmelocal.emulator.recovery import Watchdog
from mmelocal.emulator.router import Router
from mmelocal.emulator.shared_memory import SharedMemoryRegions
from mmelocal.emulator.store import ModelStore, open_store, validate_target
from mmelocal.facts.sagemaker import DRAIN_TIMEOUT_S
from mmelocal.runtime.entrypoint import model_namespacing
from mmelocal.runtime.launcher import TritonLauncher
from mmelocal.runtime.launchers import make_launcher
from mmelocal.runtime.visible_gpus import ServerGpus

logger = logging.getLogger(__name__)

LauncherFactory = Callable[[int, Path], TritonLauncher]

#: Triton's answers to an invoke that the platform recovers from rather than pass on:
#: 404 (Triton lost the model: load it again) and 507 (out of memory: evict, retry)
RECOVERABLE_STATUSES = frozenset({404, 507})


@dataclass(kw_only=True, slots=True)
class InvokeResult:
    """Triton's answer to one forwarded request and where the time went."""

    status: int
    body: bytes
    headers: dict[str, str]
    cache_hit: bool
    model_latency_s: float
    wait_s: float
    instance: int
    #: the answering instance's Triton log (its index is no list position once the fleet
    #: scaled, and a draining instance is in no list at all)
    log_path: Path | None = None


class Emulator:
    """The emulated multi-model endpoint (see the module docstring)."""

    def __init__(
        self,
        config: EmulatorConfig,
        *,
        store: ModelStore | None = None,
        launcher_factory: LauncherFactory | None = None,
        flags: LauncherFlags = CLI_FLAGS,
    ) -> None:
        self.config = config
        #: how the user chooses the Docker launcher where they are: the CLI's flags, or the
        #: ``mme_endpoint`` fixture's config (named in hints)
        self.flags = flags
        self.store = store or open_store(config.store, s3_endpoint_url=config.s3_endpoint_url)
        #: removes the temporary cache (no ``cache_dir`` given) at stop or exit, unless a
        #: failed start keeps it for the log its error names
        self._tmp: weakref.finalize[Any, Any] | None = None
        if config.cache_dir is None:
            self.cache_dir = Path(tempfile.mkdtemp(prefix="mmelocal-mme-"))
            self._tmp = weakref.finalize(self, shutil.rmtree, self.cache_dir, ignore_errors=True)
        else:
            self.cache_dir = Path(config.cache_dir)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = Metrics(
            endpoint_name=config.endpoint_name or "local", variant_name=config.variant_name
        )
        self.events = EventLog()
        #: the shared-memory regions registered through the v2 routes, for the instances
        #: whose server starts later (each registers them again as it comes up)
        self.shared_memory = SharedMemoryRegions()
        self._launcher_factory = launcher_factory or self._default_launcher
        self._gpus = self._choose_gpus()
        count = config.instances or max(1, len(self._gpus.indices))
        self._budget = config.memory_budget_bytes or _default_budget(count)
        self._options = InstanceOptions(
            memory_threshold=config.memory_threshold,
            load_timeout_s=config.load_timeout_s,
            invoke_timeout_s=config.invoke_timeout_s,
            model_namespacing=model_namespacing(config.sagemaker_env),
        )
        self.instances: list[TritonInstance] = [self._new_instance(i) for i in range(count)]
        self._next_index = count
        #: instances starting (scale-out) or draining (scale-in): stopped with the emulator
        self._changing: list[TritonInstance] = []
        #: instances out of routing, finishing their calls before they stop (scale-in)
        self.draining: list[TritonInstance] = []
        self._stopped = False
        self.router = Router(self.instances, hot_rps_threshold=config.hot_rps_threshold)
        self.watchdog = Watchdog(self.instances, interval_s=config.watchdog_interval_s)
        self._valid_targets: set[str] = set()
        #: the ``/metrics`` scrape's blocking readings: never behind the downloads on the
        #: default executor (a scrape must answer while a large artifact downloads); its
        #: idle thread ends with the emulator
        self._scrape = OwnThread("mmelocal-scrape")

    @property
    def cache(self) -> ArtifactCache:
        """The first instance's artifact cache (its disk): with one instance, the disk."""
        return self.instances[0].cache

    # -- construction helpers ----------------------------------------------------------
    def artifact_dir(self, index: int) -> Path:
        """Instance ``index``'s disk: ``artifacts/`` for the first, ``artifacts-N/`` after."""
        return self.cache_dir / ("artifacts" if index == 0 else f"artifacts-{index}")

    def _new_instance(self, index: int) -> TritonInstance:
        cache = ArtifactCache(
            self.artifact_dir(index), self.store, disk_budget_bytes=self.config.disk_budget_bytes
        )
        try:
            launcher = self._launcher_factory(index, self.cache_dir / f"triton-{index}")
        except BaseException:
            cache.close()
            raise
        inst = TritonInstance(
            index=index,
            launcher=launcher,
            probe=self._probe(index, launcher, self._budget),
            cache=cache,
            metrics=self.metrics,
            events=self.events,
            options=self._options,
            prepare=self._prepare_hook(launcher),
            url_for=self._url_for(cache.root),
        )
        inst.on_up = self.shared_memory.register_on
        return inst

    def _choose_gpus(self) -> ServerGpus:
        """The GPUs the instances run on, in turn: ``config.gpus`` (NVML's numbers), else
        those a Triton started from here would see (``CUDA_VISIBLE_DEVICES``, else all)."""
        from mmelocal.runtime.visible_gpus import server_gpus

        if self.config.gpus == ():
            return ServerGpus(origin="none chosen")
        gpus = server_gpus(chosen=self.config.gpus)
        if gpus.indices:
            logger.info("MME emulator GPUs: %s", gpus.describe())
        return gpus

    def _gpu_of(self, index: int) -> int:
        """Which of the GPUs (their position in ``self._gpus``) instance ``index`` runs on."""
        return index % len(self._gpus.indices)

    def _on_gpu(self, launcher: TritonLauncher) -> bool:
        """Whether the instance's Triton runs on a GPU: the emulator has one and the
        launcher (a ``launcher_factory``'s too) does not give its server none
        (``runs_on_cpu``). What the probe reads and how models are prepared follow it."""
        return bool(self._gpus.indices) and getattr(launcher, "runs_on_cpu", False) is not True

    def _probe(self, index: int, launcher: TritonLauncher, budget: int) -> MemoryProbe:
        """The card's memory for an instance on a GPU (:meth:`_on_gpu`), else the host's:
        also when the launcher gives its server no GPU."""
        if not self._on_gpu(launcher):
            if self._gpus.indices:
                logger.info("instance %d: its launcher gives Triton no GPU: host memory", index)
            return _host_probe(launcher, budget)
        gpu = self._gpus.indices[self._gpu_of(index)]
        try:
            probe: MemoryProbe = NvmlProbe(gpu, launcher.pid)
        except Exception as exc:
            logger.warning("NVML probe unavailable (%s); using host PSS", exc)
        else:
            cap = self.config.gpu_memory_bytes
            return CappedProbe(probe, cap) if cap is not None else probe
        return _host_probe(launcher, budget)

    def _default_launcher(self, index: int, workdir: Path) -> TritonLauncher:
        from mmelocal.runtime.server_config import ServerConfig

        repo = workdir / "repository"
        repo.mkdir(parents=True, exist_ok=True)
        env: dict[str, str] = {}
        if self._gpus.indices:
            # the card the probe reads, by UUID: CUDA's own numbers follow CUDA_DEVICE_ORDER
            # (fastest first by default), NVML's the PCI bus
            env = self._gpus.pin(self._gpu_of(index))
        server = ServerConfig(
            model_repository=repo,
            sagemaker=True,
            env=env,
            sagemaker_env=self.config.sagemaker_env,
            gpu_count=1 if self._gpus.indices else 0,  # one GPU per instance
        )
        kind = self.config.launcher
        sagemaker_url = http_url = None
        if kind == "external":
            spec = self.config.external_urls[index % len(self.config.external_urls)]
            sagemaker_url, _, http_url = spec.partition(",")
        if kind == "docker":
            # the container sees its instance's artifact cache as its (read-only) model
            # repository
            root = self.artifact_dir(index).resolve()
            server = dataclasses.replace(server, model_repository=root)
        log_name = "docker.log" if kind == "docker" else "tritonserver.log"
        return make_launcher(
            kind,
            server,
            tritonserver=self.config.tritonserver,
            image=self.config.image,
            url=http_url or sagemaker_url,
            sagemaker_url=sagemaker_url,
            log_path=None if kind == "external" else workdir / log_name,
            flags=self.flags,
        )

    def _prepare_hook(self, launcher: TritonLauncher) -> Prepare | None:
        """For the wheel's Python-only server: derive python-backend copies of native models,
        for the GPU or the CPU as the instance's server runs (:meth:`_on_gpu`)."""
        if self.config.launcher != "local":
            return None
        # imported now, not on a cold call
        from google.protobuf import descriptor_pb2, text_format  # noqa: F401
        from tritonclient.grpc import model_config_pb2  # noqa: F401

        from mmelocal.builder import presets  # noqa: F401  (the runner template's folder)
        from mmelocal.runtime import python_copies

        gpu = self._on_gpu(launcher)

        def prepare(layout: MmeLayout, out_dir: Path) -> Path | None:
            # the backend folder is assembled when the server starts: read it at the load
            backend_dir = getattr(getattr(launcher, "config", None), "backend_directory", None)
            backends = python_copies.available_backends(backend_dir)
            python_copies.prepare_layout(
                layout, out_dir, backends_available=backends, gpu=gpu, flags=self.flags
            )
            return out_dir

        return prepare

    def _url_for(self, root: Path) -> Callable[[Path], str]:
        """An artifact folder (under the instance's cache ``root``) as the server sees it (a
        container mounts the cache elsewhere)."""
        if self.config.launcher != "docker":
            return str
        from mmelocal.runtime.docker import CONTAINER_MODEL_REPOSITORY

        def in_container(path: Path) -> str:
            return f"{CONTAINER_MODEL_REPOSITORY}/{path.relative_to(root)}"

        return in_container

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Start every Triton instance (in parallel) and the watchdog."""
        try:
            # a store that cannot work fails now, before any Triton starts
            await asyncio.get_running_loop().run_in_executor(None, self.store.check)
            await asyncio.gather(*(inst.start() for inst in self.instances))
        except BaseException as exc:
            self._keep_log_of(exc)
            await self.stop()
            raise
        self.watchdog.start()
        logger.info(
            "MME emulator up: store %s, %d instance(s), probe %s, cache %s",
            self.store.description,
            len(self.instances),
            self.instances[0].probe.name,
            self.cache_dir,
        )

    async def stop(self) -> None:
        """Stop the watchdog and every instance (each closes its connections first: Triton
        waits for open connections before it exits), those starting or draining included."""
        self._stopped = True
        await self.watchdog.stop()
        await self.router.stop()
        every = [*self.instances, *self._changing]
        await asyncio.gather(*(inst.stop() for inst in every), return_exceptions=True)
        for inst in every:
            inst.close()
            inst.cache.close()
        if self._tmp is not None:
            self._tmp()
            self._tmp = None

    def _keep_log_of(self, exc: BaseException) -> None:
        """Keep the temporary cache when the start-up error ``exc`` names a log inside it
        (a Triton that died before it could listen): the error's path must stay readable."""
        log_path = getattr(exc, "log_path", None)
        if self._tmp is None or log_path is None:
            return
        if Path(log_path).resolve().is_relative_to(self.cache_dir.resolve()):
            self._tmp.detach()
            self._tmp = None
            logger.warning(
                "start failed: kept %s for the server log (delete it when done)", self.cache_dir
            )

    # -- scaling -----------------------------------------------------------------------
    async def add_instance(self) -> TritonInstance | None:
        """Start one more Triton instance; it joins routing once it is up. None when the
        emulator stopped meanwhile (the instance is stopped, nothing is left running)."""
        inst = self._new_instance(self._next_index)
        self._next_index += 1
        self._changing.append(inst)
        try:
            await inst.start()
        except BaseException:
            await inst.stop()
            self._discard(inst)
            raise
        finally:
            self._changing.remove(inst)
        if self._stopped:
            await inst.stop()
            self._discard(inst)
            return None
        for group in (self.instances, self.router.instances, self.watchdog.instances):
            group.append(inst)
        logger.info("instance %d joined (%d instance(s))", inst.index, len(self.instances))
        return inst

    async def remove_instance(self, *, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
        """Take the newest instance out of routing, let its calls in flight and its loads
        finish (callers waiting on a load are served there), then stop it. False when
        only one instance is left."""
        if len(self.instances) <= 1:
            return False
        inst = self.instances[-1]
        inst.retired = True
        for group in (self.instances, self.router.instances, self.watchdog.instances):
            if inst in group:
                group.remove(inst)
        self._changing.append(inst)
        self.draining.append(inst)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + drain_timeout_s
            while _busy(inst) and loop.time() < deadline and not self._stopped:
                await asyncio.sleep(0.02)
            await inst.stop()
            self._discard(inst)
        finally:
            self._changing.remove(inst)
            self.draining.remove(inst)
        logger.info("instance %d drained and stopped (%d left)", inst.index, len(self.instances))
        return True

    def _discard(self, inst: TritonInstance) -> None:
        """Close a stopped instance that leaves the fleet; its disk goes with it, as an
        instance's storage volume does (a new instance starts with an empty one)."""
        inst.close()
        inst.cache.close()
        shutil.rmtree(inst.cache.root, ignore_errors=True)

    # -- serving -----------------------------------------------------------------------
    def check_target(self, target: str) -> str:
        """Validate a TargetModel (cached; raises InvalidTargetError)."""
        if target not in self._valid_targets:
            validate_target(target)
            if len(self._valid_targets) > 100_000:
                self._valid_targets.clear()
            self._valid_targets.add(target)
        return target

    def known_target(self, target: str) -> bool:
        """True when ``target`` already passed :meth:`check_target` (no new validation)."""
        return target in self._valid_targets

    async def ensure_loaded(self, target: str) -> TritonInstance:
        """Load ``target`` on demand (no request forwarded); the instance holding it."""
        self.check_target(target)
        inst = self.router.pick(target)
        await inst.acquire(target, wait_timeout_s=self.config.load_wait_timeout_s)
        inst.release(target)
        return inst

    async def recover_from(self, inst: TritonInstance, target: str, status: int) -> None:
        """Triton answered ``status`` (404 or 507) invoking ``target`` on ``inst``: load the
        model again (404), or evict the least recently used idle one (507), waiting for one
        to go idle as a load's 507 does."""
        if status == 404:
            # Triton lost the model (restarted behind our back): load it again
            if inst.load_again(target):
                logger.warning(
                    "instance %d: Triton did not know %s; loading it again", inst.index, target
                )
        else:
            await inst.evict_idle(exclude=target, reason=f"Triton answered 507 invoking {target}")

    async def scrape_gauges(self) -> dict[str, float]:
        """Every gauge of a ``/metrics`` scrape: :meth:`gauges` on the loop, then
        :meth:`read_gauges` on the scrape's own thread."""
        gauges = self.gauges()
        gauges.update(await self._scrape.run(self.read_gauges))
        return gauges

    def gauges(self) -> dict[str, float]:
        """Instance gauges at scrape time: counts here (on the loop), then blocking probe
        and CPU readings (:meth:`read_gauges`, run it off the loop: :meth:`scrape_gauges`)."""
        disks = [i.cache.utilization_percent for i in self.instances]
        return {
            "LoadedModelCount": float(sum(len(i.loaded()) for i in self.instances)),
            # each instance's own disk; their mean, as CloudWatch's Average over instances
            "DiskUtilization": sum(disks) / len(disks),
        }

    def disk_utilization_per_instance(self) -> list[float]:
        """``DiskUtilization`` of each running instance's own disk (those draining
        included), as the service emits it: one sample per instance."""
        return [i.cache.utilization_percent for i in (*self.instances, *self.draining)]

    def read_gauges_per_instance(self) -> dict[str, list[float]]:
        """The blocking instance metrics, one sample per running instance (those draining
        included, as :meth:`disk_utilization_per_instance`): each instance's
        :meth:`~mmelocal.emulator.gauge.MemoryGauge.read_utilization`, as the service
        emits them (CloudWatch's Average is then the mean per instance). Their
        ``CPUUtilization`` covers the time since this method's previous call (the local
        CloudWatch's period), whatever :meth:`read_gauges` read meanwhile."""
        return _utilization((*self.instances, *self.draining), reader="cloudwatch")

    def read_gauges(self) -> dict[str, float]:
        """The blocking part of the gauges over the instances in service (the Prometheus
        exposition's one value each): the mean of the memory and GPU percentages, the CPU
        of every Triton process summed, since the previous scrape."""
        out = _utilization(self.instances, reader="scrape")
        gauges = {name: sum(values) / len(values) for name, values in out.items()}
        gauges["CPUUtilization"] = sum(out.get("CPUUtilization", ()))
        if "MemoryUtilization" not in gauges:
            import psutil

            gauges["MemoryUtilization"] = float(psutil.virtual_memory().percent)
        return gauges

    def state(self) -> dict[str, Any]:
        """The loaded set, instances and recent events as plain data, with the options a
        model of this endpoint needs (a simulation of a replay: its waits, limits and
        memory; per instance the idle server's memory and the runtimes its models
        brought)."""
        return {
            "store": self.store.description,
            "cache_dir": str(self.cache.root),
            "options": {
                "load_wait_timeout_s": self.config.load_wait_timeout_s,
                "load_timeout_s": self._options.load_timeout_s,
                "busy_wait_s": self._options.busy_wait_s,
                "invoke_timeout_s": self._options.invoke_timeout_s,
                "memory_threshold": self._options.memory_threshold,
                "memory_budget_bytes": self._budget,
                "disk_budget_bytes": self.config.disk_budget_bytes,
                "hot_rps_threshold": self.config.hot_rps_threshold,
            },
            "instances": [
                {
                    "index": inst.index,
                    "up": inst.up,
                    "probe": inst.probe.name,
                    "probe_kind": inst.probe.kind,
                    "pid": inst.launcher.pid(),
                    "http_url": inst.launcher.endpoints.http_url if inst.up else None,
                    "sagemaker_url": inst.launcher.endpoints.sagemaker_url if inst.up else None,
                    "memory_used_bytes": inst.gauge.last_reading.used_bytes
                    if inst.gauge.last_reading
                    else None,
                    "memory_total_bytes": (
                        inst.gauge.last_reading.total_bytes if inst.gauge.last_reading else None
                    ),
                    "memory_limit_bytes": inst.limit_bytes,
                    "memory_idle_bytes": inst.idle_memory_bytes,
                    "runtime_bytes": dict(inst.state.runtimes),
                    "cache_dir": str(inst.cache.root),
                    "disk_used_bytes": inst.cache.used_bytes,
                    "loaded": inst.usage_snapshot(),
                }
                for inst in self.instances
            ],
            "footprints_bytes": {
                t: b for inst in self.instances for t, b in inst.footprints.items()
            },
            "held_footprints_bytes": {
                t: b for inst in self.instances for t, b in inst.held_footprints.items()
            },
            "event_counts": dict(self.events.counts),
            "restarts": self.watchdog.restarts,
            "events": [e.to_dict() for e in self.events.recent(limit=200)],
        }


def _host_probe(launcher: TritonLauncher, budget: int) -> HostProbe:
    """The host probe of ``launcher``'s server: its process tree's PSS, or where the launcher
    gives no pid of a running server (a Docker engine in Docker Desktop's VM), the
    container's memory as the engine counts it (``container_memory_bytes``)."""
    return HostProbe(
        launcher.pid,
        budget_bytes=budget,
        engine_memory=getattr(launcher, "container_memory_bytes", None),
    )


def _default_budget(instances: int) -> int:
    import psutil

    return int(psutil.virtual_memory().total * 0.5 / max(1, instances))


def _utilization(instances: Sequence[TritonInstance], *, reader: str) -> dict[str, list[float]]:
    """Each instance's :meth:`~mmelocal.emulator.gauge.MemoryGauge.read_utilization` for
    ``reader``, by metric name, in the order of ``instances`` (blocking)."""
    out: dict[str, list[float]] = {}
    for inst in instances:
        for name, value in inst.gauge.read_utilization(inst.launcher.pid(), reader=reader).items():
            out.setdefault(name, []).append(value)
    return out


def _busy(inst: TritonInstance) -> bool:
    """Calls in flight, callers waiting on a load, or a load under way on ``inst``."""
    return any(
        e.in_flight or e.waiters or (e.task is not None and not e.task.done())
        for e in inst.models.values()
    )


def loaded_targets(instances: Sequence[TritonInstance]) -> list[str]:
    """Every target loaded on any instance."""
    return sorted({t for inst in instances for t in inst.loaded()})


__all__ = ["RECOVERABLE_STATUSES", "Emulator", "EmulatorConfig", "InvokeResult", "loaded_targets"]
