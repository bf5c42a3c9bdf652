"""Run Triton in a Docker container through the ``docker`` SDK (imported lazily).

The image is NVIDIA's ``nvcr.io/nvidia/tritonserver:<tag>-py3`` by default
(:data:`DEFAULT_IMAGE`), the SageMaker Triton image (:func:`sagemaker_triton_image`) or
any image the user names. The container runs ``tritonserver`` (``command_prefix``, for
images whose entry point differs) with the argv of :meth:`ServerConfig.to_args`, where
``model_repository`` is replaced by the read-only mount point :data:`CONTAINER_MODEL_REPOSITORY`
and the ports by Triton's defaults inside the container. The ports tritonserver opens
(in MME mode gRPC and metrics only when the entrypoint's environment turns them on) are
published on ``127.0.0.1`` only: the config's ports become the host ports, ``0`` meaning
"any free port" (Docker picks it, so there is no race). Other paths in the config
(``backend_directory``) are paths inside the container.

GPUs are requested as device requests: by default the GPUs a local server would see, by
UUID (:mod:`mmelocal.runtime.docker_gpus` chooses them; :mod:`mmelocal.docker_host` asks
the engine for them, as the TensorRT build does). The engine must run on this machine: the
container mounts this machine's model folder and publishes its ports on the engine's
``127.0.0.1``, which the launcher reaches on this machine's, so an engine on another
machine (``DOCKER_HOST``) is refused before anything is asked of it
(:func:`~mmelocal.docker_host.refuse_remote_engine`). Every container carries the labels
:data:`LABEL_OWNER`, :data:`LABEL_SESSION`, :data:`LABEL_HOST` and :data:`LABEL_PID`, so
that :func:`cleanup_containers` can remove what a crashed process left behind. The
container's output is streamed into ``log_path`` while it runs.

An engine of this machine may still run its containers' processes elsewhere: Docker
Desktop runs it in a VM (macOS, Windows, Linux), whose bind mounts and published ports
reach this machine and whose processes do not. The launcher asks the engine once
(``docker info``, :func:`~mmelocal.docker_host.processes_elsewhere`); there
:meth:`DockerLauncher.pid` is None (the container's ``State.Pid`` is a pid of the VM) and
:meth:`DockerLauncher.container_memory_bytes` gives the container's memory as the engine
counts it, which the emulator's host probe reads instead of the process tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mmelocal import docker_host
from mmelocal.errors import ServerStartError, UserInputError
from mmelocal.runtime import docker_engine
from mmelocal.runtime.docker_engine import *  # noqa: F403 (re-exported: see __all__)
from mmelocal.runtime.docker_engine import (
    DEFAULT_IMAGE,
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_PID,
    LABEL_SESSION,
    PULL_POLICIES,
    default_session_id,
    docker_client,
    ensure_image,
    reap_orphans_once,
    refuse_remote_engine,
)
from mmelocal.runtime.docker_gpus import container_gpu_selection, launcher_gpu_hint
from mmelocal.runtime.launcher import Endpoints, OwnedServerLauncher
from mmelocal.runtime.readiness import exited_during_start
from mmelocal.runtime.server_config import ServerConfig

logger = logging.getLogger(__name__)

CONTAINER_MODEL_REPOSITORY = "/models"
#: Triton's default ports inside the container (http, grpc, metrics, sagemaker).
CONTAINER_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002, "sagemaker": 8080}
DEFAULT_SHM_SIZE_BYTES = 256 * 1024 * 1024
#: why the launcher needs the engine on this machine, and the other way on from elsewhere
REMOTE_NEEDS = (
    "the Docker launcher mounts this machine's model folder into the container, and the "
    "engine publishes the container's ports on its own 127.0.0.1, which the launcher "
    "reaches on this machine's"
)
REMOTE_ALSO = (
    "; `mmelocal check` can test models on a Triton that runs there, started on an address "
    "this machine reaches: --launcher external --url http://HOST:PORT (the model files go "
    "with each load)"
)


def container_server_config(config: ServerConfig) -> ServerConfig:
    """``config`` as seen inside the container: mounted repository, default ports, all hosts."""
    return dataclasses.replace(
        config,
        model_repository=Path(CONTAINER_MODEL_REPOSITORY),
        host="0.0.0.0",
        http_port=CONTAINER_PORTS["http"],
        grpc_port=CONTAINER_PORTS["grpc"],
        metrics_port=CONTAINER_PORTS["metrics"],
        sagemaker_port=CONTAINER_PORTS["sagemaker"],
    )


class DockerLauncher(OwnedServerLauncher):
    """Start Triton in a container (see the module docstring).

    ``image`` defaults (``None``) to :data:`DEFAULT_IMAGE`; ``pull`` is ``"missing"`` (pull
    only when absent), ``"always"`` or ``"never"``. ``gpus``: ``None`` = the GPUs a local
    server would see (:meth:`gpu_selection`); given, exactly those (see
    :func:`gpu_device_requests`), the config's ``env`` as is.
    ``command_prefix`` is what runs before Triton's flags; ``entrypoint`` overrides the
    image's. ``run_options`` are passed to ``containers.run`` as is (e.g. ``mem_limit``).

    ``endpoints`` are on 127.0.0.1; ``log_path`` is the file the container's output is
    streamed to; ``model_repository`` is the host folder mounted read-only at
    :data:`CONTAINER_MODEL_REPOSITORY`; ``ready_after_s`` counts from container start and
    ``start_overhead_s`` is the part of ``start_total_s`` that was Docker's and the launcher's.
    """

    _not_started_message = "the container has not been started: call start() first"

    def __init__(
        self,
        config: ServerConfig,
        *,
        image: str | None = None,
        pull: str = "missing",
        gpus: bool | int | Sequence[str] | None = None,
        command_prefix: Sequence[str] = ("tritonserver",),
        entrypoint: Sequence[str] | None = None,
        shm_size_bytes: int = DEFAULT_SHM_SIZE_BYTES,
        start_timeout_s: float = 120.0,
        stop_timeout_s: float = 15.0,
        log_path: Path | str | None = None,
        session: str | None = None,
        name: str | None = None,
        run_options: Mapping[str, Any] | None = None,
        client: Any = None,
    ) -> None:
        if pull not in PULL_POLICIES:
            raise UserInputError(f"pull must be one of {', '.join(PULL_POLICIES)}, got {pull!r}")
        if start_timeout_s <= 0 or stop_timeout_s <= 0:
            raise UserInputError("start_timeout_s and stop_timeout_s must be > 0")
        if shm_size_bytes < 1024 * 1024:
            raise UserInputError(f"shm_size_bytes must be >= 1048576, got {shm_size_bytes}")
        image = DEFAULT_IMAGE if image is None else image.strip()
        if not image:
            raise UserInputError("image must be a non-empty image name (None = DEFAULT_IMAGE)")
        self.config = config
        self.image = image
        self.pull = pull
        self.gpus = gpus
        self.command_prefix = tuple(command_prefix)
        self.entrypoint = list(entrypoint) if entrypoint is not None else None
        self.shm_size_bytes = shm_size_bytes
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.session = session or default_session_id()
        self.name = name or f"mmelocal-triton-{uuid.uuid4().hex[:10]}"
        self.run_options = dict(run_options or {})
        self._client = client
        self._info: Mapping[str, Any] | None = None  # the engine's docker info, read once
        self._init_server_state(log_path)
        self._container: Any = None
        self._pump: threading.Thread | None = None
        self._log_offset = 0

    @property
    def container_id(self) -> str | None:
        """The running container's id (None when stopped)."""
        return self._container.id if self._container is not None else None

    def labels(self) -> dict[str, str]:
        """The labels put on the container."""
        try:
            owner = getpass.getuser()
        except Exception:
            owner = "unknown"
        return {
            LABEL_OWNER: owner,
            LABEL_SESSION: self.session,
            LABEL_HOST: socket.gethostname(),
            LABEL_PID: str(os.getpid()),
        }

    def command(self) -> list[str]:
        """The container command: ``command_prefix`` + Triton's flags."""
        return [*self.command_prefix, *container_server_config(self.config).to_args()]

    def opened_ports(self) -> list[str]:
        """The keys of :data:`CONTAINER_PORTS` tritonserver listens on, the ones published:
        in MME mode gRPC and metrics only when the entrypoint's environment turns them on."""
        keys = ["http"]
        if self.config.serves_grpc:
            keys.append("grpc")
        if self.config.serves_metrics:
            keys.append("metrics")
        if self.config.sagemaker:
            keys.append("sagemaker")
        return keys

    @property
    def runs_on_cpu(self) -> bool:
        """True when the container is given no GPU whatever the machine: ``gpus`` False or
        0, or (``gpus`` None) a config whose ``env`` hides every GPU."""
        if self.gpus is not None:
            return isinstance(self.gpus, bool | int) and not self.gpus
        return super().runs_on_cpu

    def gpu_selection(
        self, client: Any, *, info: Mapping[str, Any] | None = None
    ) -> tuple[list[Any], dict[str, str]]:
        """The device requests and the container's GPU environment on ``client``'s engine
        (:func:`~mmelocal.runtime.docker_gpus.container_gpu_selection`; ``info``, its
        ``docker info`` when read): ``gpus`` when given, else the GPUs a local server would
        see, by UUID."""
        return container_gpu_selection(
            self.config, client, gpus=self.gpus, name=self.name, info=info
        )

    def processes_elsewhere(self) -> str | None:
        """Where the engine runs the container's processes when they are not this
        machine's (Docker Desktop's VM, another kernel:
        :func:`~mmelocal.docker_host.processes_elsewhere`), else None. The engine is asked
        once per launcher (``docker info``, at the first start); None while the launcher
        has no engine yet (not started, no ``client`` given)."""
        if self._info is None:
            if self._client is None:
                return None
            self._info = docker_host.engine_info(self._client)
        return docker_host.processes_elsewhere(self._info)

    def run_kwargs(
        self, *, gpu_requests: list[Any], gpu_env: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The keyword arguments given to ``containers.run`` (without the image);
        ``gpu_env`` (:meth:`gpu_selection`'s) over the config's environment."""
        repo = Path(self.config.model_repository).resolve()
        if not repo.is_dir():
            raise UserInputError(f"model_repository {repo} is not a folder")
        ports: dict[str, tuple[str, int | None]] = {}
        for key in self.opened_ports():
            host_port = getattr(self.config, f"{key}_port")
            ports[f"{CONTAINER_PORTS[key]}/tcp"] = ("127.0.0.1", host_port or None)
        kwargs: dict[str, Any] = {
            "command": self.command(),
            "name": self.name,
            "detach": True,
            "init": True,
            "labels": self.labels(),
            "environment": container_server_config(self.config).to_env() | dict(gpu_env or {}),
            "ports": ports,
            "volumes": {str(repo): {"bind": CONTAINER_MODEL_REPOSITORY, "mode": "ro"}},
            "shm_size": self.shm_size_bytes,
            "device_requests": gpu_requests,
        }
        if self.entrypoint is not None:
            kwargs["entrypoint"] = self.entrypoint
        kwargs.update(self.run_options)
        return kwargs

    def start(self) -> None:
        """Make sure the image is here, run the container and wait until Triton is ready.

        A :meth:`stop` from another thread ends the start at once: during the wait it
        stops the container; before the container exists (the image being pulled, the
        container being created) the start removes the container as soon as it has it.
        The start raises ServerStartError saying it was stopped."""
        if self.is_alive():
            return
        with self._start_under_way():
            self._start()

    def _start(self) -> None:
        refuse_remote_engine(self._client, needs=REMOTE_NEEDS, also=REMOTE_ALSO)
        from docker.errors import DockerException

        self.stop()  # a container that died since the last start: remove it (and its name)
        t0 = time.monotonic()
        client = docker_client(self._client)
        self._client = client
        reap_orphans_once(client)
        ensure_image(client, self.image, pull=self.pull)
        self._raise_if_stop_asked()
        elsewhere = self.processes_elsewhere()  # reads docker info once, for the GPUs too
        if elsewhere is not None:
            logger.info(
                "container %s: its processes run in %s, not on this machine: no host pid; "
                "its memory is the engine's figure (docker stats)",
                self.name,
                elsewhere,
            )
        gpu_requests, gpu_env = self.gpu_selection(client, info=self._info)
        kwargs = self.run_kwargs(gpu_requests=gpu_requests, gpu_env=gpu_env)
        if self._log_path is None:
            self._log_path = Path(tempfile.mkdtemp(prefix="mmelocal-triton-")) / "tritonserver.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        # the stream is appended: this container's output starts here (errors quote it)
        self._log_offset = self._log_path.stat().st_size if self._log_path.exists() else 0
        logger.debug("docker run %s %s", self.image, " ".join(kwargs["command"]))
        try:
            self._container = client.containers.run(self.image, **kwargs)
        except DockerException as exc:
            # run = create + start: a start refused (a host port taken) leaves it created
            with contextlib.suppress(DockerException):
                client.containers.get(self.name).remove(force=True)
            raise ServerStartError(
                f"could not start a container from {self.image}: {exc}{_port_hint(exc)}"
                f"{launcher_gpu_hint(exc, gpu_requests)}",
                log_path=self._log_path,
            ) from exc
        try:
            self._raise_if_stop_asked()  # the stop came while the container was created
            self._pump = threading.Thread(
                target=_pump_logs, args=(self._container, self._log_path), daemon=True
            )
            self._pump.start()
            self._endpoints = self._published_endpoints(t0)
            self._await_ready(
                t0,
                is_alive=self._alive_during_start,
                exit_code=self._exit_code,
                interval_s=0.1,
                log_offset=self._log_offset,
            )
        except BaseException:
            self.stop()
            raise

    def _server_name(self) -> str:
        return f"container {self.name} ({self.image})"

    def _published_endpoints(self, started_at: float) -> Endpoints:
        """The host ports the engine chose, read back from the running container."""
        self._container.reload()
        published = self._container.attrs["NetworkSettings"]["Ports"] or {}

        def url(key: str, scheme: str = "http://") -> str:
            bindings = published.get(f"{CONTAINER_PORTS[key]}/tcp") or []
            if bindings:
                return f"{scheme}127.0.0.1:{bindings[0]['HostPort']}"
            if not self._alive_during_start():  # gone already: its ports went with it
                raise exited_during_start(
                    url=f"container {self.name}",
                    log_path=self._log_path,
                    waited_s=time.monotonic() - started_at,
                    exit_code=self._exit_code(),
                    log_offset=self._log_offset,
                )
            raise ServerStartError(f"Docker published no host port for Triton's {key} port")

        opened = self.opened_ports()
        return Endpoints(
            http_url=url("http"),
            grpc_url=url("grpc", scheme="") if "grpc" in opened else None,
            metrics_url=url("metrics") if "metrics" in opened else None,
            sagemaker_url=url("sagemaker") if "sagemaker" in opened else None,
        )

    def _alive_during_start(self) -> bool:
        alive = self.is_alive()
        if not alive and self._pump is not None:
            self._pump.join(timeout=2.0)  # let the last lines reach the log before the tail
        return alive

    def _exit_code(self) -> int | None:
        """The container's exit code, as of its last reload (None unless it exited)."""
        state = self._container.attrs.get("State", {}) if self._container is not None else {}
        code = state.get("ExitCode")
        return int(code) if state.get("Status") in ("exited", "dead") and code is not None else None

    def is_alive(self) -> bool:
        """True while the container runs."""
        if self._container is None:
            return False
        try:
            self._container.reload()
        except Exception:
            return False
        return bool(self._container.status == "running")

    def pid(self) -> int | None:
        """Host pid of the container's first process (None when stopped, and when the
        engine runs its processes elsewhere: :meth:`processes_elsewhere`).

        That process is Docker's init (``init=True``); tritonserver and its Python-backend
        stubs are its descendants, so sum the process tree for memory.
        """
        if not self.is_alive() or self.processes_elsewhere() is not None:
            return None
        pid = self._container.attrs.get("State", {}).get("Pid")
        return int(pid) if pid else None

    def container_memory_bytes(self) -> int | None:
        """The container's memory as its engine counts it, ``docker stats``' figure
        (:func:`~mmelocal.docker_host.stats_memory_bytes`): what there is to read where
        the processes are not this machine's (:meth:`pid` None). None when stopped or when
        the engine does not answer. One request (``one-shot``: no wait for a second CPU
        sample; engines of API 1.41 and later, the full request before)."""
        container = self._container
        if container is None:
            return None
        from docker.errors import InvalidVersion

        try:
            try:
                stats = container.stats(stream=False, one_shot=True)
            except InvalidVersion:
                stats = container.stats(stream=False)
        except Exception as exc:
            logger.debug("could not read the stats of %s: %s", self.name, exc)
            return None
        return docker_host.stats_memory_bytes(stats or {})

    def save_logs(self) -> Path | None:
        """Write the container's whole output to ``log_path`` now, in place of what the
        stream has appended of it so far; what the file held before this container started
        (earlier runs of a kept log) stays."""
        if self._container is None or self._log_path is None:
            return self._log_path
        try:
            data = self._container.logs(stdout=True, stderr=True)
        except Exception as exc:
            logger.debug("could not read logs of %s: %s", self.name, exc)
            return self._log_path
        with open(self._log_path, "ab") as fh:  # append mode: the stream's writes stay at the end
            fh.truncate(min(self._log_offset, os.fstat(fh.fileno()).st_size))
            fh.write(data)
        return self._log_path

    def stop(self) -> None:
        """Unload the ready models (:func:`~mmelocal.runtime.shutdown.unload_before_stop`, up
        to half of ``stop_timeout_s``), stop (SIGTERM, then SIGKILL once ``stop_timeout_s``
        has passed in all) and remove. Idempotent. Called during :meth:`start` (from another
        thread), it ends that start (see there)."""
        self._note_stop()
        container = self._container
        if container is None:
            return
        from docker.errors import DockerException

        t0 = time.monotonic()
        self._unload_before_stop(self.config)
        left_s = self.stop_timeout_s - (time.monotonic() - t0)
        with contextlib.suppress(DockerException):
            container.stop(timeout=int(max(1, left_s)))
        if self._pump is not None:
            self._pump.join(timeout=5.0)
            if self._pump.is_alive():
                self.save_logs()
        elif self._log_path is not None and not self._log_path.exists():
            self.save_logs()
        try:
            container.remove(force=True)
        except DockerException as exc:
            if getattr(getattr(exc, "response", None), "status_code", None) != 404:
                logger.warning("could not remove container %s: %s", self.name, exc)
        self._container = None
        self._pump = None
        logger.info("container %s stopped in %.1fs", self.name, time.monotonic() - t0)

    def __repr__(self) -> str:
        state = "alive" if self.is_alive() else "stopped"
        url = self._endpoints.http_url if self._endpoints else "-"
        return f"DockerLauncher({self.image}, {state}, {url})"


def _port_hint(exc: Exception) -> str:
    """What to do when the engine could not publish a host port the config fixed."""
    text = str(exc)
    if "port is already allocated" in text or "address already in use" in text:
        return (
            " (a host port the config fixed is taken: choose another, or 0 to let the "
            "engine pick a free one)"
        )
    return ""


def _pump_logs(container: Any, path: Path) -> None:
    """Append the container's output to ``path`` until it stops."""
    try:
        with open(path, "ab") as fh:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                fh.write(chunk)
                fh.flush()
    except Exception as exc:
        logger.debug("log stream of %s ended: %s", getattr(container, "name", "?"), exc)


# the engine's names (image, labels, clean-up, GPUs) stay importable from here too
__all__ = [
    "CONTAINER_MODEL_REPOSITORY",
    "CONTAINER_PORTS",
    "DEFAULT_SHM_SIZE_BYTES",
    "DockerLauncher",
    "container_server_config",
]
__all__ += docker_engine.__all__
