"""The whole published procedure in one call: deploy -> capacity -> load test -> sweep ->
report -> undeploy.

Each framework's tarball gets an endpoint of its own (``<name>-pt``, ``<name>-trt``, one
instance, prefix ``<s3-uri><framework>/``), one after the other: a capacity count needs a
GPU no other model has filled, and SageMaker offers no unload call. On it, capacity
(:mod:`~mmelocal.bench.endpoint.capacity`) loads copies up to the threshold, then the load
test sends the stepped shape over those copies, a random copy per request (the published
Locust test), and the copies are deleted. The last endpoint also runs the sweep
(:mod:`~mmelocal.bench.endpoint.sweep`) before it is taken down. An endpoint is deleted
(with the objects mmelocal put under its prefix) even when a step fails, unless
``keep_endpoints`` is set. With ``existing`` set, the one framework is measured on that
deployed endpoint instead, which is neither created nor deleted. The endpoints are created and
deleted by the plan's ``deployer`` (``mmelocal benchmark`` passes
:func:`mmelocal.deploy.temporary.temporary_endpoint`), so bench never imports deploy.

:meth:`BenchmarkPlan.steps_s` says beforehand what will be billed: instance-hours from the expected
duration of each step times the hourly price of the price table.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from mmelocal.aws.session import AwsClients
from mmelocal.bench.endpoint.capacity import RemoteCapacityOptions, measure_endpoint_capacity
from mmelocal.bench.endpoint.remote import RemoteEndpoint
from mmelocal.bench.endpoint.result import BenchmarkResult, framework_of
from mmelocal.bench.loadtest.result import LoadTestResult
from mmelocal.bench.loadtest.shape import LoadShape
from mmelocal.bench.loadtest.workers import LoadGenerators
from mmelocal.bench.sweep.runner import SweepOptions
from mmelocal.errors import MmeLocalError, UserInputError
from mmelocal.facts.sagemaker import MAX_ENDPOINT_NAME_LENGTH

logger = logging.getLogger(__name__)

#: assumptions of the duration estimate, in seconds (SageMaker's usual GPU endpoint
#: creation; a copy's copy + cold load + probe readings; a variant's upload and cold load)
DEPLOY_S = 600.0
PER_COPY_S = 15.0
EXPECTED_COPIES = 50
PER_VARIANT_S = 60.0


def benchmark_on_endpoint(
    endpoint: RemoteEndpoint,
    tarball: Path,
    *,
    payload: bytes,
    model: str,
    shape: LoadShape,
    options: RemoteCapacityOptions | None = None,
    content_type: str = "application/json",
    progress: Callable[[str], None] | None = None,
    gpus: Sequence[Any] | None = None,
    generators: LoadGenerators | None = None,
) -> BenchmarkResult:
    """Capacity, then the load test over the loaded copies; the copies are deleted after."""
    say = progress or (lambda message: None)
    opts = options or RemoteCapacityOptions()
    say(f"capacity of {tarball.name} on {endpoint.info.name}")
    run = measure_endpoint_capacity(
        endpoint,
        tarball,
        payload=payload,
        options=replace(opts, model_name=model),
        content_type=content_type,
        progress=lambda r: say(f"capacity: copy {r.copies} loaded ({r.used_bytes:,} bytes in use)"),
        gpus=gpus,
    )
    loadtest: LoadTestResult | None = None
    try:
        if run.loaded:
            say(f"load test over {len(run.loaded)} copies ({shape.duration_s:.0f} s)")
            loadtest = endpoint.loadtest(
                run.loaded,
                payload,
                shape=shape,
                label=f"{model} ({framework_of(run.result.model_format)}) over "
                f"{len(run.loaded)} copies",
                say=say,
                content_type=content_type,
                generators=generators,
            )
    finally:
        endpoint.delete(list(run.created))
    return BenchmarkResult(
        model=model,
        framework=framework_of(run.result.model_format),
        instance_type=endpoint.info.instance_type,
        endpoint=endpoint.info.name,
        capacity=run.result,
        loadtest=loadtest,
    )


@dataclass(frozen=True, kw_only=True)
class BenchmarkPlan:
    """What :func:`run_benchmark` will do (validated before anything is created)."""

    tarballs: tuple[Path, ...]
    model: str
    shape: LoadShape
    endpoint_name: str = ""
    s3_uri: str = ""
    role_arn: str = ""
    instance_type: str = ""
    existing: str | None = None
    capacity: RemoteCapacityOptions = field(default_factory=RemoteCapacityOptions)
    sweep: SweepOptions | None = None
    region: str | None = None
    image: str | None = None
    content_type: str = "application/json"
    payload: bytes | None = None
    keep_endpoints: bool = False
    poll_s: float = 30.0
    #: creates the endpoints when ``existing`` is None
    deployer: Deployer | None = None
    generators: LoadGenerators = field(default_factory=LoadGenerators)

    def __post_init__(self) -> None:
        if not self.tarballs:
            raise UserInputError("give at least one model.tar.gz to benchmark")
        if self.existing is not None:
            if len(self.tarballs) != 1:
                raise UserInputError(
                    f"endpoint {self.existing} holds one framework's count (a count needs a "
                    "GPU no other model filled): give one SOURCE, or let mmelocal deploy one "
                    "endpoint per framework (--endpoint-name, --s3-uri, --role)"
                )
            return
        missing = [
            option
            for option, value in (
                ("--endpoint-name", self.endpoint_name),
                ("--s3-uri", self.s3_uri),
                ("--role", self.role_arn),
                ("--instance-type", self.instance_type),
            )
            if not value
        ]
        if missing:
            raise UserInputError(
                f"to deploy, give {', '.join(missing)} (or --endpoint NAME to use a deployed one)"
            )
        if self.deployer is None:
            raise UserInputError(
                "BenchmarkPlan needs deployer= to create endpoints (e.g. "
                "mmelocal.deploy.temporary.temporary_endpoint), or existing= to use a deployed one"
            )
        if not self.s3_uri.endswith("/"):
            object.__setattr__(self, "s3_uri", self.s3_uri + "/")

    def endpoint_for(self, framework: str) -> str:
        """``<name>-<framework>`` (SageMaker names: letters, digits, '-', cut to the
        service's length, never ending with '-'); the existing endpoint's name when there
        is one."""
        if self.existing is not None:
            return self.existing
        name = f"{self.endpoint_name}-{framework}".replace("_", "-")
        return name[:MAX_ENDPOINT_NAME_LENGTH].rstrip("-")

    def steps_s(self, frameworks: Sequence[str]) -> list[tuple[str, float]]:
        """The billable steps and their expected seconds (see the module constants)."""
        steps: list[tuple[str, float]] = []
        for framework in frameworks:
            name = self.endpoint_for(framework)
            copies = min(self.capacity.max_copies, EXPECTED_COPIES)
            if self.existing is None:
                steps.append((f"{name}: create the endpoint", DEPLOY_S))
            steps += [
                (f"{name}: capacity (~{copies} copies)", copies * PER_COPY_S),
                (f"{name}: load test", self.shape.duration_s),
            ]
        if self.sweep is not None:
            variants = (
                len(self.sweep.dynamic_batching) * len(self.sweep.instances) * len(self.tarballs)
            )
            per_variant = PER_VARIANT_S + self.sweep.shape.duration_s
            steps.append((f"sweep: {variants} variant(s)", variants * per_variant))
        return steps


@dataclass(frozen=True, kw_only=True)
class BenchmarkOutcome:
    """What :func:`run_benchmark` measured (every result, in report order)."""

    benchmarks: tuple[BenchmarkResult, ...]
    sweeps: tuple[Any, ...]
    deleted: tuple[str, ...]
    problems: tuple[str, ...] = ()

    @property
    def results(self) -> list[Any]:
        """The results for ``mmelocal report`` (benchmarks first, then sweeps)."""
        return [*self.benchmarks, *self.sweeps]


def prepare(plan: BenchmarkPlan) -> list[tuple[Path, str, bytes]]:
    """``(tarball, framework, payload)`` for each source, checked before anything is created:
    one tarball per framework, and a request body for each."""
    from mmelocal.bench.endpoint.capacity import tarball_format
    from mmelocal.builder.payload import payload_from_model

    frameworks = [framework_of(tarball_format(t)) for t in plan.tarballs]
    if len(set(frameworks)) != len(frameworks):
        raise UserInputError(
            f"one tarball per framework, got {', '.join(frameworks)}: benchmark one model at a time"
        )
    return [
        (
            tarball,
            framework,
            plan.payload if plan.payload is not None else payload_from_model(tarball),
        )
        for tarball, framework in zip(plan.tarballs, frameworks, strict=True)
    ]


def run_benchmark(
    plan: BenchmarkPlan,
    *,
    progress: Callable[[str], None] | None = None,
    gpus: Sequence[Any] | None = None,
    runs: Sequence[tuple[Path, str, bytes]] | None = None,
) -> BenchmarkOutcome:
    """Deploy, measure and undeploy, framework after framework (see the module docstring).

    A framework whose run fails is recorded in ``problems`` (its endpoint is deleted all the
    same) and the next one runs: what was measured is never lost. ``runs`` is what
    :func:`prepare` returned for ``plan`` when the caller already has it (each tarball is
    read in full to find its format and request body)."""
    from mmelocal.bench.endpoint.sweep import run_endpoint_sweep

    say = progress or (lambda message: None)
    if runs is None:
        runs = prepare(plan)
    benchmarks: list[BenchmarkResult] = []
    sweeps: list[Any] = []
    deleted: list[str] = []
    problems: list[str] = []
    for index, (tarball, framework, payload) in enumerate(runs):
        try:
            with _endpoint(plan, framework, say, deleted) as endpoint:
                benchmarks.append(
                    benchmark_on_endpoint(
                        endpoint,
                        tarball,
                        payload=payload,
                        model=plan.model,
                        shape=plan.shape,
                        options=plan.capacity,
                        content_type=plan.content_type,
                        progress=say,
                        gpus=gpus,
                        generators=plan.generators,
                    )
                )
                if plan.sweep is not None and index == len(runs) - 1:
                    for source in plan.tarballs:
                        sweeps.append(
                            run_endpoint_sweep(endpoint, source, options=plan.sweep, progress=say)
                        )
        except MmeLocalError as exc:
            logger.warning("benchmark of %s (%s) failed: %s", tarball.name, framework, exc)
            problems.append(f"{plan.endpoint_for(framework)}: {exc}")
    return BenchmarkOutcome(
        benchmarks=tuple(benchmarks),
        sweeps=tuple(sweeps),
        deleted=tuple(deleted),
        problems=tuple(problems),
    )


def _endpoint(
    plan: BenchmarkPlan, framework: str, say: Callable[[str], None], deleted: list[str]
) -> contextlib.AbstractContextManager[RemoteEndpoint]:
    """The endpoint to measure on: the existing one as it is, else a fresh deployment."""
    if plan.existing is None:
        return _deployment(plan, framework, say, deleted)
    from mmelocal.bench.endpoint.remote import connect_endpoint

    return contextlib.nullcontext(connect_endpoint(plan.existing, region=plan.region))


class Deployer(Protocol):
    """Deploys a store as a one-instance endpoint for one ``with`` block and yields its AWS
    clients (:func:`mmelocal.deploy.temporary.temporary_endpoint` is one)."""

    def __call__(
        self,
        *,
        store: Path,
        endpoint_name: str,
        s3_uri: str,
        role_arn: str,
        instance_type: str,
        region: str | None,
        image: str | None,
        poll_s: float,
        keep: bool,
        say: Callable[[str], None],
        deleted: list[str],
    ) -> contextlib.AbstractContextManager[AwsClients]: ...


@contextlib.contextmanager
def _deployment(
    plan: BenchmarkPlan, framework: str, say: Callable[[str], None], deleted: list[str]
) -> Iterator[RemoteEndpoint]:
    """Deploy ``<name>-<framework>`` (the probe as its store) with ``plan.deployer``; it is
    undeployed on exit, also after an error, unless the plan keeps endpoints."""
    from mmelocal.aws.endpoint import describe_mme
    from mmelocal.bench.endpoint.remote import PROBE_TARGET, write_probe_tarball

    assert plan.deployer is not None  # checked by BenchmarkPlan
    name = plan.endpoint_for(framework)
    with tempfile.TemporaryDirectory(prefix="mmelocal-benchmark-") as tmp:
        store = Path(tmp) / "store"
        write_probe_tarball(store / PROBE_TARGET)
        with plan.deployer(
            store=store,
            endpoint_name=name,
            s3_uri=f"{plan.s3_uri}{framework}/",
            role_arn=plan.role_arn,
            instance_type=plan.instance_type,
            region=plan.region,
            image=plan.image,
            poll_s=plan.poll_s,
            keep=plan.keep_endpoints,
            say=say,
            deleted=deleted,
        ) as clients:
            endpoint = RemoteEndpoint(clients, describe_mme(clients, name))
            endpoint.check_ready()
            yield endpoint


__all__ = [
    "DEPLOY_S",
    "EXPECTED_COPIES",
    "PER_COPY_S",
    "PER_VARIANT_S",
    "BenchmarkOutcome",
    "BenchmarkPlan",
    "Deployer",
    "benchmark_on_endpoint",
    "prepare",
    "run_benchmark",
]
