"""The Docker engine side of the Docker launcher: connection, images' names, labels.

Everything here talks to the engine through the ``docker`` SDK, imported lazily (a missing
SDK raises :class:`~mmelocal.errors.MissingDependencyError` with the ``docker`` extra).
Containers started by mmelocal carry the labels :data:`LABEL_OWNER`, :data:`LABEL_SESSION`,
:data:`LABEL_HOST` and :data:`LABEL_PID`; :func:`cleanup_containers` removes them by
session, or only those whose launching process is gone; :func:`reap_orphans_once` does the
latter once per process and engine, when the launcher first starts (as testcontainers'
reaper does), so that a crashed run's containers do not stay up. Where the engine runs and
how to ask it for GPUs are :mod:`mmelocal.docker_host`'s (the TensorRT build asks the same
way), re-exported here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

from mmelocal.docker_host import (
    GPU_SETUP_HINT,
    NO_DEVICE_DRIVER,
    NVIDIA_CDI_KIND,
    EngineGpus,
    engine_gpus,
    gpu_device_requests,
    refuse_remote_engine,
    remote_engine,
)
from mmelocal.errors import (
    DockerEngineError,
    DockerImageError,
    MissingDependencyError,
    RemoteDockerEngineError,
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
    "NO_DEVICE_DRIVER",
    "NVIDIA_CDI_KIND",
    "PULL_POLICIES",
    "DockerEngineError",
    "DockerImageError",
    "EngineGpus",
    "RemoteDockerEngineError",
    "cleanup_containers",
    "default_session_id",
    "docker_client",
    "engine_gpus",
    "ensure_image",
    "gpu_device_requests",
    "reap_orphans_once",
    "refuse_remote_engine",
    "remote_engine",
    "sagemaker_triton_image",
]
