"""The Docker engine as both users of it need it: where it runs, and how to ask it for GPUs.

Two parts of mmelocal run containers, the TensorRT build (``trtexec`` in an image,
:mod:`mmelocal.builder.onnx2trt`) and the Docker launcher (Triton in an image,
:mod:`mmelocal.runtime.docker`); this module is below both, so that they ask the engine
the same way (the docker SDK is imported only where a request is made):

- where the engine runs: :func:`remote_engine` tells another machine's engine from this
  machine's, and :func:`refuse_remote_engine` is the one guard both run before they touch
  the engine, as both mount this machine's folders into their containers;
  :func:`processes_elsewhere` tells, from ``docker info`` (:func:`engine_info`), an engine
  of this machine whose containers' processes are not (Docker Desktop's VM), and
  :func:`stats_memory_bytes` reads a container's memory from the engine's stats instead;
- NVIDIA GPUs: :func:`engine_gpus` reads what ``docker info`` shows of the NVIDIA Container
  Toolkit (:class:`EngineGpus`), whose :meth:`EngineGpus.requests` are CDI's device names
  where the engine lists them, else ``--gpus``'s request (:func:`gpu_device_requests`);
  :func:`gpu_refusal_hint` says what to do when the engine refuses them.
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mmelocal.errors import RemoteDockerEngineError, UserInputError

logger = logging.getLogger(__name__)


def remote_engine(client: Any = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The address of the Docker engine when it runs on another machine, else None.

    The engine is ``client``'s (its ``api.base_url``) when given, else the one
    ``docker.from_env()`` connects to: ``DOCKER_HOST`` in ``environ`` (default: this
    process's environment, read now), the local socket when unset. A Unix socket or a
    named pipe is this machine's engine, and so is TCP to a loopback address (a tunnel to
    another machine looks the same: mmelocal cannot tell); ``ssh://`` and TCP to any other
    host are another machine's, whose containers' processes, folders, ports and GPUs are not
    this machine's.
    """
    env = os.environ if environ is None else environ
    if client is not None:
        address = str(getattr(getattr(client, "api", None), "base_url", "") or "")
        if address == "http+docker://ssh":  # the SDK keeps no host for an SSH engine
            return env.get("DOCKER_HOST") or "ssh"
    else:
        address = env.get("DOCKER_HOST", "")
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


def refuse_remote_engine(client: Any = None, *, needs: str, also: str = "") -> None:
    """Raise :class:`~mmelocal.errors.RemoteDockerEngineError` when the engine
    (:func:`remote_engine` of ``client``, else ``DOCKER_HOST``) runs on another machine.

    ``needs`` says what of this machine the caller's container needs ("the Docker launcher
    mounts this machine's model folder ..."), ``also`` any other way out. Call it before
    connecting: an ``ssh://`` engine is reached only to be refused otherwise.
    """
    address = remote_engine(client)
    if address is None:
        return
    named = "" if client is not None else " (DOCKER_HOST)"
    raise RemoteDockerEngineError(
        f"the Docker engine at {address}{named} runs on another machine, and {needs}: "
        "run mmelocal on that machine (the same command there), or unset DOCKER_HOST to use "
        f"this machine's engine{also}",
        address=address,
    )


#: ``docker info``'s ``OperatingSystem`` under Docker Desktop (macOS, Windows, Linux): the
#: daemon reports its own ``/etc/os-release`` ``PRETTY_NAME`` (moby
#: ``pkg/parsers/operatingsystem``), which in Docker Desktop's VM is this
DOCKER_DESKTOP_OS = "Docker Desktop"


def engine_info(client: Any) -> Mapping[str, Any]:
    """The engine's ``docker info`` (one request); empty when it cannot be read."""
    try:
        return dict(client.info() or {})
    except Exception:
        logger.debug("docker info failed", exc_info=True)
        return {}


def processes_elsewhere(
    info: Mapping[str, Any], *, kernel_release: str | None = None
) -> str | None:
    """Where the engine of ``info`` (its ``docker info``) runs its containers when their
    processes are not this machine's, so that a container's ``State.Pid`` names no process
    here (or another one); None when they are, or when ``info`` does not say.

    Two fields say so, and neither says it of an engine whose processes are this machine's:

    - ``OperatingSystem`` is ``"Docker Desktop"``: Docker Desktop runs the engine in a VM
      on macOS, Windows and Linux (bind mounts and published ports reach this machine
      through its file sharing and port forwarding; processes do not). Under WSL 2 that VM
      is the one kernel every WSL distribution runs, so the kernel below matches, but
      Docker Desktop keeps its engine in a pid namespace of its own (Docker's "Introducing
      the Docker Desktop WSL 2 Backend": "a separate network/pid/mount namespace"): this
      field is the one that tells it.
    - ``KernelVersion`` (the daemon's ``uname`` release) is not this machine's kernel
      release (``kernel_release``, default ``platform.release()`` read now): the engine
      runs under another kernel, a VM of any make (Colima, Rancher Desktop, Lima, a Podman
      machine) or another machine behind a loopback tunnel.

    Rootless Docker runs its containers in this machine's pid namespace (RootlessKit
    creates one only with ``--pidns``, which ``dockerd-rootless.sh`` does not pass), on
    this kernel: this machine's, rightly. An engine in a container of this kernel with a pid
    namespace of its own (Docker in Docker behind a shared socket) looks like this machine's.
    """
    system = str(info.get("OperatingSystem") or "")
    if system.startswith(DOCKER_DESKTOP_OS):
        return f"Docker Desktop's VM ({system})"
    kernel = str(info.get("KernelVersion") or "")
    here = platform.release() if kernel_release is None else kernel_release
    if kernel and kernel != here:
        return f"another kernel than this machine's (the engine's {kernel}, this machine's {here})"
    return None


def stats_memory_bytes(stats: Mapping[str, Any]) -> int | None:
    """A container's memory in its engine's stats answer (``GET /containers/ID/stats``), as
    ``docker stats`` shows it: ``memory_stats.usage`` less the inactive file pages, which
    the kernel reclaims first (``total_inactive_file`` under cgroup v1, ``inactive_file``
    under v2; docker/cli ``cli/command/container/stats_helpers.go``,
    ``calculateMemUsageUnixNoCache``). None without a usage (a container not running)."""
    memory = stats.get("memory_stats") or {}
    usage = memory.get("usage")
    if usage is None:
        return None
    pages = memory.get("stats") or {}
    for key in ("total_inactive_file", "inactive_file"):  # cgroup v1 first, as docker stats
        inactive = pages.get(key)
        if inactive is not None and inactive < usage:
            return int(usage - inactive)
    return int(usage)


#: the CDI kind of NVIDIA's GPUs: ``nvidia-ctk cdi generate`` names them
#: ``nvidia.com/gpu=0`` (NVML's index), ``nvidia.com/gpu=GPU-...`` (their UUID) and
#: ``nvidia.com/gpu=all``
NVIDIA_CDI_KIND = "nvidia.com/gpu"
#: the engine's answer to a GPU request no device driver of it serves (moby
#: ``daemon/errors.go``, ``incompatibleDeviceRequest``)
NO_DEVICE_DRIVER = "could not select device driver"
#: the engine's answer to a CDI request it could not inject (moby ``daemon/cdi.go``)
CDI_INJECTION_FAILED = "CDI device injection failed"
#: the CDI library's answer for a device name no spec of the engine's defines (the CDI
#: library's ``pkg/cdi/cache.go``, ``InjectDevices``)
CDI_UNRESOLVABLE = "unresolvable CDI devices"
#: how to write NVIDIA's CDI spec where the engine reads it
CDI_GENERATE = "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"

#: what to do when the engine cannot give a container the GPUs it was asked for
GPU_SETUP_HINT = (
    "install the NVIDIA Container Toolkit on the engine's machine and restart dockerd "
    "(`sudo apt-get install nvidia-container-toolkit`, then `sudo nvidia-ctk runtime "
    f"configure --runtime=docker && sudo systemctl restart docker`; for CDI: `{CDI_GENERATE}`)"
)


@dataclass(frozen=True, kw_only=True)
class EngineGpus:
    """What an engine's ``docker info`` says of NVIDIA GPUs.

    ``docker run --gpus`` (a device request with the ``gpu`` capability) is served by the
    engine's ``nvidia`` device driver, which dockerd registers when the NVIDIA Container
    Toolkit's ``nvidia-container-runtime-hook`` (or, since Docker 29.2, its
    ``nvidia-cdi-hook``) is on its PATH (moby ``daemon/nvidia_linux.go``,
    ``daemon/devices_nvidia_linux.go``: the runtime hook first, else the CDI hook, which
    turns the ids into ``nvidia.com/gpu=<id>`` CDI names); the ``nvidia`` *runtime* entry
    (``nvidia-ctk runtime configure``) is not used by it (the toolkit's page "Specialized
    Configurations with Docker": ``--runtime=nvidia`` is for the ``NVIDIA_VISIBLE_DEVICES``
    variable). No field of ``docker info`` lists the device drivers, so what the engine
    says is evidence, not proof: ``nvidia_runtime`` (the toolkit is installed and
    configured) and ``cdi_devices``, the ``nvidia.com/gpu`` CDI devices the engine
    discovered (``DiscoveredDevices``, API 1.50 / Docker 28.2, where CDI is on by
    default), which it injects for a ``cdi`` device request (``docker run --device
    nvidia.com/gpu=all``) whatever the hooks.
    """

    nvidia_runtime: bool = False
    cdi_devices: tuple[str, ...] = ()

    @property
    def set_up(self) -> bool:
        """True when the engine shows either sign of the NVIDIA Container Toolkit."""
        return self.nvidia_runtime or bool(self.cdi_devices)

    def requests(self, gpus: Sequence[tuple[str, int | None]] | None) -> list[Any]:
        """The device requests for ``gpus`` (``(uuid, NVML index or None)`` of each, in
        order; None: every GPU): CDI names when the engine discovered a name for each, else
        ``--gpus``'s request by UUID."""
        names = self._cdi_names(gpus)
        if names:
            from docker.types import DeviceRequest

            return [DeviceRequest(driver="cdi", device_ids=names)]
        return gpu_device_requests(True if gpus is None else [uuid for uuid, _ in gpus])

    def _cdi_names(self, gpus: Sequence[tuple[str, int | None]] | None) -> list[str]:
        listed = set(self.cdi_devices)
        if gpus is None:
            every = f"{NVIDIA_CDI_KIND}=all"
            return [every] if every in listed else []
        names = []
        for uuid, index in gpus:
            ids = (uuid,) if index is None else (uuid, str(index))
            found = [f"{NVIDIA_CDI_KIND}={i}" for i in ids if f"{NVIDIA_CDI_KIND}={i}" in listed]
            if not found:
                return []
            names.append(found[0])
        return names


def engine_gpus(client: Any, *, info: Mapping[str, Any] | None = None) -> EngineGpus:
    """What the engine's ``docker info`` (``info`` when the caller has read it, else asked
    now) says of NVIDIA GPUs (:class:`EngineGpus`); nothing when it cannot be read."""
    if info is None:
        info = engine_info(client)
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


def gpu_refusal_hint(exc: BaseException, requests: Sequence[Any], *, otherwise: str = "") -> str:
    """What to do, in parentheses after the engine's message, when ``exc`` is the engine's
    refusal of the GPU ``requests``; ``""`` for any other failure. ``otherwise`` is the
    caller's way on without a GPU ("; or run Triton on the CPU: ...").

    A CDI name the engine cannot resolve is a spec that no longer defines it: the engine
    reads the spec folders again when they change (the CDI library's cache watches them),
    so writing the spec again is enough, without a restart.
    """
    text = str(exc)
    if not requests:
        return ""
    if CDI_UNRESOLVABLE in text:
        return (
            " (the engine's CDI specs define no such device: list the names they define with "
            f"`nvidia-ctk cdi list` on the engine's machine, write the spec again with "
            f"`{CDI_GENERATE}` (the engine reads it again by itself, no restart) and retry)"
        )
    if NO_DEVICE_DRIVER in text or CDI_INJECTION_FAILED in text:
        return (
            f" (the engine cannot give a container the GPUs asked for: {GPU_SETUP_HINT}{otherwise})"
        )
    return ""


__all__ = [
    "CDI_GENERATE",
    "CDI_INJECTION_FAILED",
    "CDI_UNRESOLVABLE",
    "DOCKER_DESKTOP_OS",
    "GPU_SETUP_HINT",
    "NO_DEVICE_DRIVER",
    "NVIDIA_CDI_KIND",
    "EngineGpus",
    "engine_gpus",
    "engine_info",
    "gpu_device_requests",
    "gpu_refusal_hint",
    "processes_elsewhere",
    "refuse_remote_engine",
    "remote_engine",
    "stats_memory_bytes",
]
