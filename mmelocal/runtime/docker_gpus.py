"""Which GPUs the Docker launcher's container gets, as device requests and environment.

A container inherits no environment, so the GPUs a local server would see (the server
config's ``env``, else this process's ``CUDA_VISIBLE_DEVICES``) are read here through NVML
(:func:`~mmelocal.runtime.visible_gpus.container_gpus`) and given to the container by UUID,
in its device request and in its ``CUDA_VISIBLE_DEVICES``; unset, every GPU. The request
is asked the way :mod:`mmelocal.docker_host` asks (CDI's names where the engine lists them,
else ``--gpus``'s), and the engine's refusal comes with what to do
(:func:`launcher_gpu_hint`): not a container on the CPU beside a GPU whose memory is read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from mmelocal.docker_host import engine_gpus, gpu_device_requests, gpu_refusal_hint
from mmelocal.runtime.server_config import ServerConfig

logger = logging.getLogger(__name__)

#: the launcher's way on when the engine gives no GPU: Triton on the CPU, chosen on purpose
CPU_WAY_OUT = (
    "; or run Triton on the CPU on purpose: CUDA_VISIBLE_DEVICES= (empty) for mmelocal's "
    "commands, DockerLauncher(gpus=False) from Python"
)

GpuChoice = bool | int | Sequence[str] | None


def container_gpu_selection(
    config: ServerConfig,
    client: Any,
    *,
    gpus: GpuChoice = None,
    name: str = "container",
    info: Mapping[str, Any] | None = None,
) -> tuple[list[Any], dict[str, str]]:
    """The device requests and the container's GPU environment for a Triton of ``config``
    on ``client``'s engine (the container is called ``name`` in the log; ``info``, the
    engine's ``docker info`` when the caller has read it).

    ``gpus`` given (:func:`~mmelocal.docker_host.gpu_device_requests`): exactly those, and
    the config's ``env`` as is. Else the GPUs a local server would see, by UUID, in the
    request and in the container's ``CUDA_VISIBLE_DEVICES``; when the variable is unset,
    every GPU, if NVML sees one here or the engine shows the NVIDIA Container Toolkit
    (:class:`~mmelocal.docker_host.EngineGpus`), else none. The request is CDI's when the
    engine lists the cards as CDI devices, else ``--gpus``'s.
    """
    from mmelocal.runtime.memory import gpu_count
    from mmelocal.runtime.visible_gpus import container_gpus

    if gpus is not None:
        return gpu_device_requests(gpus), {}
    engine = engine_gpus(client, info=info)
    chosen = container_gpus(config.env)
    if chosen is None:
        if gpu_count() == 0 and not engine.set_up:
            return [], {}
        logger.info("container %s GPUs: every GPU", name)
        return engine.requests(None), {}
    logger.info("container %s GPUs: %s", name, chosen.describe())
    if not chosen.uuids:
        return [], dict(chosen.env)
    pairs = list(zip(chosen.uuids, chosen.indices, strict=True))
    return engine.requests(pairs), dict(chosen.env)


def launcher_gpu_hint(exc: BaseException, requests: Sequence[Any]) -> str:
    """What to do when the engine refused the container's GPU ``requests`` (``""`` for
    another failure): set the engine up, or run Triton on the CPU on purpose."""
    return gpu_refusal_hint(exc, requests, otherwise=CPU_WAY_OUT)


__all__ = ["CPU_WAY_OUT", "container_gpu_selection", "launcher_gpu_hint"]
