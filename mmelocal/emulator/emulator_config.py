"""Options of the emulator (``mmelocal serve``) and size parsing."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mmelocal.emulator.instance import InstanceOptions
from mmelocal.errors import UserInputError
from mmelocal.facts.runtime_api import DEFAULT_VARIANT_NAME
from mmelocal.facts.sagemaker import (
    HOT_MODEL_RPS,
    INVOKE_TIMEOUT_S,
    LOAD_LIMIT_S,
    MAX_PAYLOAD_BYTES,
    MEMORY_THRESHOLD,
    MODEL_NOT_READY_AFTER_S,
)
from mmelocal.runtime.entrypoint import check_sagemaker_env
from mmelocal.runtime.launchers import LAUNCHERS, check_launcher_kind
from mmelocal.units import GiB

logger = logging.getLogger(__name__)

#: InvokeEndpoint's body limit (kept under this name for users' imports)
SERVICE_MAX_PAYLOAD_BYTES = MAX_PAYLOAD_BYTES


@dataclass(frozen=True, kw_only=True)
class EmulatorConfig:
    """Options of ``mmelocal serve`` (sizes in bytes, times in seconds).

    ``invoke_timeout_s`` is how long the model may take to answer one invocation (60 s on
    SageMaker); past it the caller gets a ModelError with ``OriginalStatusCode`` 504.
    ``max_payload_bytes`` caps an InvokeEndpoint body as the service does (6 MB, answered
    413, see :data:`~mmelocal.facts.sagemaker.MAX_PAYLOAD_BYTES`).

    ``memory_budget_bytes`` is per instance and used by the host probe (no GPU); ``None``
    means half of this machine's memory divided among the instances. ``disk_budget_bytes``
    is per instance too: each has its own disk (artifact cache), as each SageMaker
    instance has its own storage volume. ``instances=None``
    means one per GPU, or one without a GPU. The GPUs are ``gpus`` (NVML's numbers, as
    nvidia-smi prints them; ``()`` for none), else those ``CUDA_VISIBLE_DEVICES`` names, else
    every GPU: instance N runs on the N-th of them in turn, its Triton given that card's UUID
    alone, and its memory probe reads that card. ``external_urls`` are the SageMaker front
    ends of already running servers for ``launcher="external"``, each
    ``SAGEMAKER_URL[,HTTP_URL]`` (the KServe v2 URL serves metadata; the servers must see
    the cache folder at the same path).

    ``variant_name`` is the production variant this emulator serves: the answers'
    ``x-Amzn-Invoked-Production-Variant`` and the metrics' ``VariantName``.

    ``gpu_memory_bytes`` caps each GPU's memory for the budget (an instance type's card on
    a bigger GPU); it has no effect without a GPU.

    ``sagemaker_env`` is the model's ``Environment`` on SageMaker (the keys of ``deploy
    --env``): the ``SAGEMAKER_TRITON_*`` variables from which SageMaker's entrypoint builds
    tritonserver's flags (:mod:`mmelocal.runtime.entrypoint`), checked the same way: a value
    tritonserver would refuse fails here, an unknown ``SAGEMAKER_TRITON_*`` key is a
    warning. Every variable also reaches the server's environment, as on the platform.
    """

    store: str
    cache_dir: Path | None = None
    memory_threshold: float = MEMORY_THRESHOLD
    memory_budget_bytes: int | None = None
    disk_budget_bytes: int = 20 * GiB
    instances: int | None = None
    launcher: str = "local"
    image: str | None = None
    tritonserver: Path | None = None
    external_urls: tuple[str, ...] = ()
    endpoint_name: str | None = None
    variant_name: str = DEFAULT_VARIANT_NAME
    load_wait_timeout_s: float = MODEL_NOT_READY_AFTER_S
    load_timeout_s: float = LOAD_LIMIT_S
    invoke_timeout_s: float = INVOKE_TIMEOUT_S
    hot_rps_threshold: float = HOT_MODEL_RPS
    s3_endpoint_url: str | None = None
    watchdog_interval_s: float = 0.2
    gpus: tuple[int, ...] | None = None
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    sagemaker_env: Mapping[str, str] = field(default_factory=dict)
    gpu_memory_bytes: int | None = None

    def __post_init__(self) -> None:
        check_launcher_kind(self.launcher)
        object.__setattr__(self, "sagemaker_env", dict(self.sagemaker_env))
        for warning in check_sagemaker_env(self.sagemaker_env):
            logger.warning("%s", warning)
        if self.sagemaker_env and self.launcher == "external":
            logger.warning(
                "launcher 'external': the running servers keep the flags they were started "
                "with; sagemaker_env does not change them (start them with "
                "mmelocal.runtime.entrypoint.entrypoint_args for the same environment)"
            )
        if self.instances is not None and self.instances < 1:
            raise UserInputError(f"instances must be >= 1, got {self.instances}")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes <= 0:
            raise UserInputError(f"memory_budget_bytes must be > 0, got {self.memory_budget_bytes}")
        if self.disk_budget_bytes <= 0:
            raise UserInputError(f"disk_budget_bytes must be > 0, got {self.disk_budget_bytes}")
        if self.gpu_memory_bytes is not None and self.gpu_memory_bytes <= 0:
            raise UserInputError(f"gpu_memory_bytes must be > 0, got {self.gpu_memory_bytes}")
        if self.max_payload_bytes <= 0:
            raise UserInputError(f"max_payload_bytes must be > 0, got {self.max_payload_bytes}")
        if self.load_wait_timeout_s <= 0:
            raise UserInputError(f"load_wait_timeout_s must be > 0, got {self.load_wait_timeout_s}")
        if self.launcher == "external" and not self.external_urls:
            raise UserInputError(
                "launcher 'external' needs external_urls: the SageMaker front end of each "
                "running Triton (mmelocal serve --triton-url SAGEMAKER_URL[,V2_HTTP_URL])"
            )
        # InstanceOptions checks the threshold and the timeouts with the same message style
        if self.watchdog_interval_s <= 0 or self.hot_rps_threshold <= 0:
            raise UserInputError(
                "watchdog_interval_s and hot_rps_threshold must be > 0, got "
                f"{self.watchdog_interval_s} and {self.hot_rps_threshold}"
            )
        InstanceOptions(
            memory_threshold=self.memory_threshold,
            load_timeout_s=self.load_timeout_s,
            invoke_timeout_s=self.invoke_timeout_s,
        )


__all__ = ["LAUNCHERS", "EmulatorConfig"]
