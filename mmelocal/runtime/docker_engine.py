"""The Docker engine side of the Docker launcher: connection, images' names, GPUs, labels.

Everything here talks to the engine through the ``docker`` SDK, imported lazily (a missing
SDK raises :class:`~mmelocal.errors.MissingDependencyError` with the ``docker`` extra).
Containers started by mmelocal carry the labels :data:`LABEL_OWNER`, :data:`LABEL_SESSION`,
:data:`LABEL_HOST` and :data:`LABEL_PID`; :func:`cleanup_containers` removes them by
session, or only those whose launching process is gone; :func:`reap_orphans_once` does the
latter once per process and engine, when the launcher first starts (as testcontainers'
reaper does), so that a crashed run's containers do not stay up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mmelocal.errors import (
    DockerEngineError,
    DockerImageError,
    MissingDependencyError,
    UserInputError,
)
from mmelocal.facts.triton_images import (
    DEFAULT_SAGEMAKER_RELEASE,
    WHEEL_NGC_RELEASE,
    WHEEL_TRITON_VERSION,
    ngc_image,
    regions,
    sagemaker_image_uri,
)

logger = logging.getLogger(__name__)

#: NGC release of the default image: it ships Triton 2.51, the nvidia-pytriton server
DEFAULT_TRITON_IMAGE_TAG = WHEEL_NGC_RELEASE
DEFAULT_TRITON_VERSION = WHEEL_TRITON_VERSION
DEFAULT_IMAGE = ngc_image(DEFAULT_TRITON_IMAGE_TAG)
LABEL_OWNER = "mmelocal.owner"
LABEL_SESSION = "mmelocal.session"
LABEL_HOST = "mmelocal.host"
LABEL_PID = "mmelocal.pid"
SESSION_ENV = "MMELOCAL_SESSION"
#: when to pull the image: only when absent, always, or never
PULL_POLICIES = ("missing", "always", "never")

_INSTALL_HINT = (
    "start dockerd (e.g. `sudo dockerd > /tmp/dockerd.log 2>&1 &` or `sudo systemctl start "
    "docker`) or install Docker (Debian/Ubuntu: `sudo apt-get install docker.io`); "
    "DOCKER_HOST selects another engine"
)


def sagemaker_triton_image(region: str, tag: str = DEFAULT_SAGEMAKER_RELEASE) -> str:
    """SageMaker's Triton image URI for ``region`` (e.g. ``us-east-1``) and release ``tag``
    (default 24.09), from the one image table (:mod:`mmelocal.facts.triton_images`: the
    account depends on the release). A region or release not in the table is refused with
    what the table has there."""
    try:
        return sagemaker_image_uri(region, tag)
    except UserInputError as exc:
        other = "pick one of those, or " if region in regions() else ""
        raise UserInputError(
            f"{exc}: {other}name the image yourself (image=URI, --image URI)"
        ) from None


def default_session_id() -> str:
    """The session label: ``$MMELOCAL_SESSION``, else ``<hostname>-<pid>``."""
    return os.environ.get(SESSION_ENV) or f"{socket.gethostname()}-{os.getpid()}"


def docker_client(client: Any = None) -> Any:
    """A connected ``docker.DockerClient`` (``client`` if given), or a clear error."""
    if client is not None:
        return client
    try:
        import docker
    except ImportError:
        raise MissingDependencyError(
            "docker", extra="docker", feature="The Docker launcher"
        ) from None
    try:
        found = docker.from_env()
        found.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerEngineError(
            f"Docker engine not reachable at {where} ({exc}): {_INSTALL_HINT}"
        ) from exc
    return found


def remote_engine(client: Any = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The address of the Docker engine when it runs on another machine, else None.

    The engine is ``client``'s (its ``api.base_url``) when given, else the one
    ``docker.from_env()`` connects to: ``DOCKER_HOST`` in ``environ`` (default: this
    process's environment, read now), the local socket when unset. A Unix socket or a
    named pipe is this machine's engine, and so is TCP to a loopback address (a tunnel to
    another machine looks the same: mmelocal cannot tell); ``ssh://`` and TCP to any other
    host are another machine's, whose containers' processes and GPUs are not this
    machine's (their pids are not in this machine's ``/proc``, NVML here sees other cards).
    """
    from urllib.parse import urlsplit

    if client is not None:
        address = str(getattr(getattr(client, "api", None), "base_url", "") or "")
        if address == "http+docker://ssh":  # the SDK keeps no host for an SSH engine
            address = (os.environ if environ is None else environ).get("DOCKER_HOST") or "ssh"
            return address
    else:
        address = (os.environ if environ is None else environ).get("DOCKER_HOST", "")
    if not address:
        return None
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme in ("unix", "npipe", "fd", "http+unix"):
        return None
    if parts.scheme == "http+docker":  # the SDK's own name for its socket / pipe
        return None
    if parts.scheme == "ssh":
        return address
    if (parts.hostname or "localhost") in ("localhost", "127.0.0.1", "::1"):
        return None
    return address


def refuse_remote_engine(launcher: object, reading: str) -> None:
    """Refuse ``reading`` (what reads memory here) when ``launcher`` runs its server on a
    Docker engine on another machine (its ``remote_engine``; other launchers have none)."""
    address = getattr(launcher, "remote_engine", None)
    if address is not None:
        raise remote_engine_error(address, reading)


def remote_engine_error(address: str, reading: str) -> UserInputError:
    """The refusal of ``reading`` (what reads memory here) for an engine on another machine."""
    return UserInputError(
        f"the Docker engine at {address} (DOCKER_HOST) runs on another machine: {reading} "
        "reads this machine's GPUs (NVML) and processes, not the container's, so its "
        "figures would be another card's or none; run mmelocal on the engine's machine, "
        "or unset DOCKER_HOST to use this machine's engine"
    )


def ensure_image(client: Any, image: str, *, pull: str = "missing") -> None:
    """Make sure ``image`` is on the engine: pull it per ``pull`` (see :data:`PULL_POLICIES`).

    Raises :class:`DockerImageError` with what to do when it is absent and cannot be pulled.
    """
    from docker.errors import DockerException, ImageNotFound

    if pull not in PULL_POLICIES:
        raise UserInputError(f"pull must be one of {', '.join(PULL_POLICIES)}, got {pull!r}")
    if pull != "always":
        try:
            client.images.get(image)
            return
        except ImageNotFound:
            if pull == "never":
                raise DockerImageError(
                    f"image {image} is not on this machine and pull='never': {_image_hint(image)}",
                    image=image,
                ) from None
    logger.info("pulling %s", image)
    try:
        client.images.pull(image)
    except DockerException as exc:
        raise DockerImageError(
            f"image {image} is not on this machine and could not be pulled ({exc}): "
            f"{_image_hint(image)}",
            image=image,
        ) from exc


#: the CDI kind of NVIDIA's GPUs: ``nvidia-ctk cdi generate`` names them
#: ``nvidia.com/gpu=0`` (NVML's index), ``nvidia.com/gpu=GPU-...`` (their UUID, with
#: ``--device-name-strategy=uuid``) and ``nvidia.com/gpu=all``
NVIDIA_CDI_KIND = "nvidia.com/gpu"
#: the engine's answer to a GPU request no device driver of it serves (moby
#: ``daemon/errors.go``, ``incompatibleDeviceRequest``)
NO_DEVICE_DRIVER = "could not select device driver"

#: what to do when the engine cannot give a container the GPUs it was asked for
GPU_SETUP_HINT = (
    "install the NVIDIA Container Toolkit on the engine's machine and restart dockerd "
    "(`sudo apt-get install nvidia-container-toolkit`, then `sudo nvidia-ctk runtime "
    "configure --runtime=docker && sudo systemctl restart docker`; for CDI: `sudo nvidia-ctk "
    "cdi generate --output=/etc/cdi/nvidia.yaml`), or run Triton on the CPU: "
    "CUDA_VISIBLE_DEVICES= (empty) for mmelocal's commands, DockerLauncher(gpus=False) "
    "from Python"
)


@dataclass(frozen=True, kw_only=True)
class EngineGpus:
    """What an engine's ``docker info`` says of NVIDIA GPUs.

    ``docker run --gpus`` (a device request with the ``gpu`` capability) is served by the
    engine's ``nvidia`` device driver, which dockerd registers when the NVIDIA Container
    Toolkit's ``nvidia-container-runtime-hook`` (or, since Docker 29.2, its
    ``nvidia-cdi-hook``) is on its PATH (moby ``daemon/nvidia_linux.go``,
    ``daemon/devices_nvidia_linux.go``); the ``nvidia`` *runtime* entry
    (``nvidia-ctk runtime configure``) is not used by it (the toolkit's page
    "Specialized Configurations with Docker": ``--runtime=nvidia`` is for the
    ``NVIDIA_VISIBLE_DEVICES`` variable). No field of ``docker info`` lists the device
    drivers, so what the engine says is evidence, not proof: ``nvidia_runtime`` (the
    toolkit is installed and configured) and ``cdi_devices``, the ``nvidia.com/gpu`` CDI
    devices the engine discovered (``DiscoveredDevices``, API 1.50 / Docker 28.2, where
    CDI is on by default), which it injects for a ``cdi`` device request
    (``docker run --device nvidia.com/gpu=all``) whatever the hooks.
    """

    nvidia_runtime: bool = False
    cdi_devices: tuple[str, ...] = ()

    @property
    def set_up(self) -> bool:
        """True when the engine shows either sign of the NVIDIA Container Toolkit."""
        return self.nvidia_runtime or bool(self.cdi_devices)

    def requests(self, gpus: Sequence[tuple[str, int]] | None) -> list[Any]:
        """The device requests for ``gpus`` (``(uuid, NVML index)`` of each, in order; None:
        every GPU): CDI names when the engine discovered them all (Docker 29.2 serves
        ``--gpus`` itself through CDI first), else ``--gpus``'s request by UUID."""
        names = self._cdi_names(gpus)
        if names:
            from docker.types import DeviceRequest

            return [DeviceRequest(driver="cdi", device_ids=names)]
        return gpu_device_requests(True if gpus is None else [uuid for uuid, _ in gpus])

    def _cdi_names(self, gpus: Sequence[tuple[str, int]] | None) -> list[str]:
        listed = set(self.cdi_devices)
        if gpus is None:
            every = f"{NVIDIA_CDI_KIND}=all"
            return [every] if every in listed else []
        names = []
        for uuid, index in gpus:
            found = [
                n
                for n in (f"{NVIDIA_CDI_KIND}={uuid}", f"{NVIDIA_CDI_KIND}={index}")
                if n in listed
            ]
            if not found:
                return []
            names.append(found[0])
        return names


def engine_gpus(client: Any) -> EngineGpus:
    """What the engine's ``docker info`` says of NVIDIA GPUs (:class:`EngineGpus`); nothing
    when it cannot be read."""
    try:
        info = client.info() or {}
    except Exception:
        logger.debug("docker info failed", exc_info=True)
        return EngineGpus()
    devices = info.get("DiscoveredDevices") or []
    return EngineGpus(
        nvidia_runtime="nvidia" in (info.get("Runtimes") or {}),
        cdi_devices=tuple(
            str(d.get("ID"))
            for d in devices
            if str(d.get("ID", "")).startswith(f"{NVIDIA_CDI_KIND}=")
        ),
    )


def gpu_device_requests(gpus: bool | int | Sequence[str] | None) -> list[Any]:
    """Device requests for ``gpus``: True = all, n = that many, ["0", ...] = those ids.

    ``None``, ``False`` and ``0`` give no request (CPU only).
    """
    if gpus is None or gpus is False or gpus == 0:
        return []
    from docker.types import DeviceRequest

    if gpus is True:
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, int):
        if gpus < 0:
            raise UserInputError(f"gpus must be True, a count >= 1 or device ids, got {gpus}")
        return [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    ids = [str(g) for g in gpus]
    if not ids or any(not g for g in ids):
        raise UserInputError(f"gpus device ids must be non-empty strings, got {list(gpus)!r}")
    return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


def cleanup_containers(
    *, session: str | None = None, orphans_only: bool = False, client: Any = None
) -> list[str]:
    """Remove mmelocal's containers; return their names.

    ``session`` limits it to one session label. ``orphans_only`` keeps containers whose
    launching process (labels ``mmelocal.host`` + ``mmelocal.pid``) still runs here.
    """
    from docker.errors import DockerException, NotFound

    docker = docker_client(client)
    label = f"{LABEL_SESSION}={session}" if session is not None else LABEL_OWNER
    removed: list[str] = []
    for container in docker.containers.list(all=True, filters={"label": label}):
        if orphans_only and _owner_alive(container.labels):
            continue
        with contextlib.suppress(NotFound):
            try:
                container.remove(force=True)
            except DockerException as exc:
                logger.warning("could not remove container %s: %s", container.name, exc)
                continue
            removed.append(container.name)
            logger.info("removed leftover container %s", container.name)
    return removed


_reaped: set[str] = set()
_reap_lock = threading.Lock()


def reap_orphans_once(client: Any) -> list[str]:
    """Remove the containers of dead mmelocal runs on this host, once per process and
    engine; the names removed (none after the first call). Failures are logged, not raised:
    a leftover container must not stop a start."""
    from docker.errors import DockerException

    key = str(getattr(getattr(client, "api", None), "base_url", id(client)))
    with _reap_lock:
        if key in _reaped:
            return []
        _reaped.add(key)
    try:
        return cleanup_containers(orphans_only=True, client=client)
    except DockerException as exc:
        logger.warning("could not list leftover containers: %s", exc)
        return []


def _owner_alive(labels: Mapping[str, str]) -> bool:
    if labels.get(LABEL_HOST) != socket.gethostname():
        return True  # another machine's process: not ours to judge
    try:
        os.kill(int(labels.get(LABEL_PID, "")), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _image_hint(image: str) -> str:
    if image.startswith("mmelocal-test/"):
        return "build it with tests/runtime/docker_image/build_image.sh"
    return (
        f"pull it where there is network (`docker pull {image}`, then `docker save` / "
        "`docker load`), log in first for a private registry (`docker login`), or name a local "
        "image (the test image: tests/runtime/docker_image/build_image.sh)"
    )


__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_TRITON_IMAGE_TAG",
    "DEFAULT_TRITON_VERSION",
    "GPU_SETUP_HINT",
    "LABEL_HOST",
    "LABEL_OWNER",
    "LABEL_PID",
    "LABEL_SESSION",
    "PULL_POLICIES",
    "DockerEngineError",
    "DockerImageError",
    "EngineGpus",
    "cleanup_containers",
    "default_session_id",
    "docker_client",
    "engine_gpus",
    "ensure_image",
    "gpu_device_requests",
    "reap_orphans_once",
    "refuse_remote_engine",
    "remote_engine",
    "remote_engine_error",
    "sagemaker_triton_image",
]
