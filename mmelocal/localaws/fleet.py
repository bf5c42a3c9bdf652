"""One production variant made real: the MME emulator (Triton behind it) that serves it.

:func:`plan_variant` reads what ``CreateEndpoint`` / ``UpdateEndpoint`` named (one of the
config's variants and its model) and decides what runs, or raises
:class:`EndpointFailedError` with the ``FailureReason`` the endpoint shows (an endpoint's
variants together: :mod:`.variants`). :class:`Fleet` owns the running
:class:`~mmelocal.emulator.server.EmulatorServer` and counts the calls in flight so an
update or a delete can let them finish before it stops Triton.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.errors import EndpointFailedError
from mmelocal.facts.aws import LOCAL_REGION
from mmelocal.facts.runtime_api import DEFAULT_VARIANT_NAME, DEFAULT_VARIANT_WEIGHT
from mmelocal.facts.sagemaker import (
    DRAIN_TIMEOUT_S,
    FAILURE_REASON_MAX_CHARS,
    LOAD_AND_INVOKE_TIMEOUT_S,
)
from mmelocal.facts.triton_images import REPOSITORY
from mmelocal.localaws.checks import parse_s3_url

#: the repository of SageMaker's Triton images (``<account>.dkr.ecr.<region>.amazonaws.com/
#: sagemaker-tritonserver:<version>-py3``)
TRITON_REPOSITORY = REPOSITORY

logger = logging.getLogger(__name__)

#: why a fleet's start ended at a shutdown of the local AWS (no endpoint shows it: the
#: endpoint's state is the one saved before)
SHUT_DOWN_REASON = "the local AWS stopped while the endpoint was being created"


@dataclass(frozen=True, kw_only=True)
class FleetPlan:
    """What one production variant runs: an emulator on an S3 prefix (see the module doc)."""

    endpoint_name: str
    config_name: str
    bucket: str
    prefix: str
    instances: int
    instance_type: str
    environment: Mapping[str, str] = field(default_factory=dict)
    single_model_target: str | None = None
    gpu_memory_bytes: int | None = None
    variant_name: str = DEFAULT_VARIANT_NAME
    weight: float = DEFAULT_VARIANT_WEIGHT
    region: str = LOCAL_REGION

    @property
    def store_url(self) -> str:
        """``s3://bucket/prefix``: the emulator's store."""
        return f"s3://{self.bucket}/{self.prefix}"


def is_triton_image(image: str) -> bool:
    """True for an image of SageMaker's Triton repository (any account, region and tag)."""
    repository = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    return repository == TRITON_REPOSITORY or repository.endswith("tritonserver")


def card_memory_bytes(instance_type: str) -> int | None:
    """The memory of one GPU of ``instance_type`` in mmelocal's GPU table
    (``mmelocal/facts/gpus.yaml``); None for a type the table does not list."""
    from mmelocal.bench.capacity.projection import load_gpus

    for spec in load_gpus():
        if instance_type in spec.instances:
            return spec.memory_bytes
    return None


def plan_fleet(endpoint_name: str, config: dict[str, Any], model: dict[str, Any]) -> FleetPlan:
    """The emulator of an endpoint config's first variant (``DescribeEndpointConfig`` and
    ``DescribeModel`` answers); EndpointFailedError with the FailureReason when it cannot
    run. Every variant: :func:`mmelocal.localaws.variants.plan_endpoint`."""
    variants = config.get("ProductionVariants") or []
    if not variants:
        raise EndpointFailedError("the endpoint configuration has no production variant")
    return plan_variant(endpoint_name, str(config["EndpointConfigName"]), variants[0], model)


def plan_variant(
    endpoint_name: str, config_name: str, variant: dict[str, Any], model: dict[str, Any]
) -> FleetPlan:
    """The emulator one production variant asks for (the variant as ``DescribeEndpointConfig``
    gives it, its model as ``DescribeModel`` does); EndpointFailedError with the
    FailureReason when it cannot run."""
    if "ServerlessConfig" in variant or "InstanceType" not in variant:
        raise EndpointFailedError(
            "mmelocal serves instance-backed variants only (InstanceType and "
            "InitialInstanceCount); serverless variants are not emulated"
        )
    container: dict[str, Any] = model.get("PrimaryContainer") or next(
        iter(model.get("Containers") or []), {}
    )
    image = str(container.get("Image", ""))
    if not is_triton_image(image):
        raise EndpointFailedError(
            f"mmelocal runs SageMaker's Triton Inference Server images "
            f"(<account>.dkr.ecr.<region>.amazonaws.com/{TRITON_REPOSITORY}:<version>-py3) "
            f"only; the image {image!r} is not one of them"
        )
    url = str(container.get("ModelDataUrl", ""))
    located = parse_s3_url(url)
    if located is None:
        raise EndpointFailedError(f"Could not find model data at {url or '(no ModelDataUrl)'}.")
    bucket, key = located
    single: str | None = None
    if container.get("Mode") == "MultiModel":
        prefix = key
    else:
        prefix, _, single = key.rpartition("/")
        prefix = prefix + "/" if prefix else ""
    weight = variant.get("InitialVariantWeight")
    return FleetPlan(
        endpoint_name=endpoint_name,
        config_name=config_name,
        bucket=bucket,
        prefix=prefix,
        instances=int(variant.get("InitialInstanceCount", 1)),
        instance_type=str(variant["InstanceType"]),
        environment=dict(container.get("Environment") or {}),
        single_model_target=single,
        gpu_memory_bytes=card_memory_bytes(str(variant["InstanceType"])),
        variant_name=str(variant.get("VariantName") or DEFAULT_VARIANT_NAME),
        weight=DEFAULT_VARIANT_WEIGHT if weight is None else float(weight),
    )


@dataclass(kw_only=True)
class FleetOptions:
    """How a :class:`Fleet` starts Triton (the ``LocalAws`` options)."""

    work_dir: Path
    memory_budget_bytes: int | None = None
    launcher: str = "local"
    tritonserver: Path | None = None
    start_timeout_s: float = 300.0


class Fleet:
    """A running emulator for one :class:`FleetPlan` (start, count calls, drain, stop)."""

    def __init__(self, plan: FleetPlan, *, s3_client: Any, options: FleetOptions) -> None:
        from mmelocal.emulator.emulator import Emulator, EmulatorConfig
        from mmelocal.emulator.server import EmulatorServer
        from mmelocal.emulator.store import S3Store

        self.plan = plan
        #: an EC2-style id per instance, given on first sight (its log stream is
        #: ``{variant}/{id}``), by the instance's Triton log
        self._instance_ids: dict[str, str] = {}
        self.stopped = False
        #: called once, after the instances stopped (the logs' last lines are shipped so)
        self.on_stopped: list[Callable[[], None]] = []
        self._inflight = 0
        self._idle = threading.Condition()
        store = S3Store(plan.bucket, plan.prefix, client=s3_client)
        config = EmulatorConfig(
            store=plan.store_url,
            cache_dir=options.work_dir,
            instances=plan.instances,
            endpoint_name=plan.endpoint_name,
            variant_name=plan.variant_name,
            memory_budget_bytes=options.memory_budget_bytes,
            launcher=options.launcher,
            tritonserver=options.tritonserver,
            sagemaker_env=dict(plan.environment),
            gpu_memory_bytes=plan.gpu_memory_bytes,
        )
        self.server = EmulatorServer(
            Emulator(config, store=store), start_timeout_s=options.start_timeout_s
        )

    @property
    def url(self) -> str:
        """The emulator's ``http://host:port``."""
        return self.server.url

    def start(self) -> None:
        """Start Triton (and, for a single-model endpoint, load the model as the container
        does at start-up); raises EndpointFailedError with the reason."""
        try:
            self.server.start()
            target = self.plan.single_model_target
            if target is not None:
                emulator = self.server.emulator
                self.server.call(
                    emulator.ensure_loaded(target), timeout_s=LOAD_AND_INVOKE_TIMEOUT_S
                )
        except Exception as exc:
            self.server.stop()
            raise EndpointFailedError(_reason(exc)) from exc

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Count one call in flight (see :meth:`drain`)."""
        with self._idle:
            self._inflight += 1
        try:
            yield
        finally:
            with self._idle:
                self._inflight -= 1
                self._idle.notify_all()

    @property
    def inflight(self) -> int:
        """Calls being served now."""
        return self._inflight

    def drain(self, timeout_s: float) -> bool:
        """Wait until no call is in flight (at most ``timeout_s``); True when idle."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout=timeout_s)

    @property
    def instance_count(self) -> int:
        """Triton instances running: those serving and those draining (a scale-in counts an
        instance until it stopped, as DescribeEndpoint's CurrentInstanceCount does)."""
        emulator = self.server.emulator
        return len(emulator.instances) + len(emulator.draining)

    @property
    def serving_count(self) -> int:
        """Triton instances taking calls now."""
        return len(self.server.emulator.instances)

    def scale_to(
        self, count: int, *, timeout_s: float, drain_timeout_s: float = DRAIN_TIMEOUT_S
    ) -> int:
        """Add or drain instances, one at a time, until ``count`` serve; the count reached.
        A new instance joins routing once Triton is up; a drained one finishes its calls
        and loads first (no call fails)."""
        emulator = self.server.emulator
        while self.serving_count < count:
            if self.server.call(emulator.add_instance(), timeout_s=timeout_s) is None:
                break  # stopped meanwhile
        while self.serving_count > max(1, count):
            removing = emulator.remove_instance(drain_timeout_s=drain_timeout_s)
            if not self.server.call(removing, timeout_s=drain_timeout_s + timeout_s):
                break
        return self.serving_count

    def log_streams(self) -> list[tuple[str, Path | None]]:
        """``(instance id, Triton log)`` of each instance running now, draining ones
        included (the log is None where the launcher keeps none)."""
        emulator = self.server.emulator
        out = []
        for inst in [*emulator.instances, *emulator.draining]:
            path = inst.launcher.log_path
            key = str(path) if path is not None else f"#{inst.index}"
            iid = self._instance_ids.get(key)
            if iid is None:
                iid = self._instance_ids[key] = new_instance_id()
            out.append((iid, path))
        return out

    def stop(self) -> None:
        """Stop the emulator and its Triton instances (idempotent); then run
        :attr:`on_stopped`, so what watches the fleet is done when this returns (an
        endpoint's last log lines are in its log group once DeleteEndpoint is over)."""
        self.server.stop()
        if self.stopped:
            return
        self.stopped = True
        for callback in self.on_stopped:
            try:
                callback()
            except Exception:  # a watcher's failure never keeps a fleet running
                logger.exception("after stopping the fleet of %s", self.plan.endpoint_name)


class FleetLaunches:
    """The fleets whose start is under way, so that a shutdown stops them rather than
    waiting for their Triton to answer (:meth:`.endpoints.EndpointManager.close`): once
    :meth:`cancel` is called, a start under way ends with what it started stopped, and
    none begins."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starting: list[Fleet] = []
        self._cancelled = False

    def start(self, fleet: Fleet) -> None:
        """``fleet.start()``; EndpointFailedError (and ``fleet`` stopped) when
        :meth:`cancel` comes before or during it."""
        with self._lock:
            if self._cancelled:
                raise EndpointFailedError(SHUT_DOWN_REASON)
            self._starting.append(fleet)
        try:
            fleet.start()
        finally:
            with self._lock:
                self._starting.remove(fleet)
                cancelled = self._cancelled
        if cancelled:  # started just as the shutdown came: it would serve no one
            fleet.stop()
            raise EndpointFailedError(SHUT_DOWN_REASON)

    def cancel(self) -> list[Fleet]:
        """No start begins from now on; the fleets starting now, for the caller to stop
        (which ends their start: :meth:`Fleet.stop`)."""
        with self._lock:
            self._cancelled = True
            return list(self._starting)


def new_instance_id() -> str:
    """An id shaped like an EC2 instance's (``i-`` and 17 hex digits)."""
    return "i-" + secrets.token_hex(9)[:17]


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if len(text) > FAILURE_REASON_MAX_CHARS:
        text = text.splitlines()[0]
    return text[:FAILURE_REASON_MAX_CHARS]


__all__ = [
    "SHUT_DOWN_REASON",
    "TRITON_REPOSITORY",
    "Fleet",
    "FleetLaunches",
    "FleetOptions",
    "FleetPlan",
    "card_memory_bytes",
    "is_triton_image",
    "new_instance_id",
    "plan_fleet",
    "plan_variant",
]
