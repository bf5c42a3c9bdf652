"""mmelocal: build, run and measure Triton model repositories locally before
deploying them to an Amazon SageMaker multi-model endpoint (MME).

The names a user needs are importable from here::

    from mmelocal import BuildOptions, EmulatorConfig, EmulatorServer, build_model

They are loaded lazily, on first use: ``import mmelocal`` imports neither torch nor
boto3 nor the emulator (a test checks it), so a script that only reads sizes or catches
:class:`MmeLocalError` stays light. The errors are imported at once (they are cheap).

Layers (imports only go downwards):

- :mod:`mmelocal.builder`  model -> artifact -> config.pbtxt -> repository -> model.tar.gz
- :mod:`mmelocal.runtime`  a running Triton: launchers, readiness, client, check
- :mod:`mmelocal.emulator` the MME platform in front of Triton
- :mod:`mmelocal.bench`    capacity, load tests, sweeps, reports
- :mod:`mmelocal.deploy`   the same store on a real SageMaker MME
- :mod:`mmelocal.testing`  the pytest plugin
- :mod:`mmelocal.cli`      the ``mmelocal`` command
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mmelocal.errors import (
    AccessDeniedError,
    AwsServiceError,
    BadArchiveError,
    BenchError,
    ConfigError,
    DeployError,
    DockerEngineError,
    DockerImageError,
    DownloadError,
    EmulatorError,
    EndpointFailedError,
    ExportError,
    InferenceError,
    InstanceUnavailableError,
    InvalidTargetError,
    LocalAwsError,
    MissingDependencyError,
    MmeLocalError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    ObjectConflictError,
    OutOfMemoryError,
    RemoteDockerEngineError,
    ReplayAbortedError,
    RuntimeLayerError,
    ServerDiedError,
    ServerStartError,
    SourceError,
    StoreAccessError,
    StoreUnavailableError,
    UnsafeArchiveError,
    UnsupportedModelError,
    UpstreamError,
    UpstreamTimeoutError,
    UserInputError,
    ValidationError,
    VerificationError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from mmelocal.aws.session import connect as connect_aws
    from mmelocal.bench.capacity.loop import CapacityOptions, measure_capacity
    from mmelocal.bench.capacity.result import CapacityResult
    from mmelocal.bench.endpoint.capacity import RemoteCapacityOptions, measure_endpoint_capacity
    from mmelocal.bench.estimate.core import Estimate
    from mmelocal.bench.estimate.model import estimate_model
    from mmelocal.builder.build import BuildOptions, BuildResult, build_model
    from mmelocal.builder.package import package_copies, package_model
    from mmelocal.builder.validate import ValidationReport, validate_path
    from mmelocal.deploy.deployer import apply_plan, make_plan, undeploy
    from mmelocal.deploy.plan import DeployOptions, DeployPlan
    from mmelocal.emulator.emulator_config import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer
    from mmelocal.localaws.server import LocalAws
    from mmelocal.runtime.check import CheckOptions, CheckReport, check_path
    from mmelocal.runtime.client import TritonClient
    from mmelocal.runtime.docker import DockerLauncher
    from mmelocal.runtime.external import ExternalLauncher
    from mmelocal.runtime.launcher import Endpoints, TritonLauncher
    from mmelocal.runtime.launchers import LAUNCHERS, make_launcher
    from mmelocal.runtime.local import LocalLauncher
    from mmelocal.runtime.server_config import ServerConfig
    from mmelocal.units import mib, parse_size_bytes

#: public name -> (module, attribute): loaded on first access by :func:`__getattr__`
_LAZY: dict[str, tuple[str, str]] = {
    # build: a model -> a Triton model folder -> model.tar.gz
    "build_model": ("mmelocal.builder.build", "build_model"),
    "BuildOptions": ("mmelocal.builder.build", "BuildOptions"),
    "BuildResult": ("mmelocal.builder.build", "BuildResult"),
    "package_model": ("mmelocal.builder.package", "package_model"),
    "package_copies": ("mmelocal.builder.package", "package_copies"),
    "validate_path": ("mmelocal.builder.validate", "validate_path"),
    "ValidationReport": ("mmelocal.builder.validate", "ValidationReport"),
    # a real Triton: launchers, client, check
    "ServerConfig": ("mmelocal.runtime.server_config", "ServerConfig"),
    "TritonLauncher": ("mmelocal.runtime.launcher", "TritonLauncher"),
    "Endpoints": ("mmelocal.runtime.launcher", "Endpoints"),
    "LAUNCHERS": ("mmelocal.runtime.launchers", "LAUNCHERS"),
    "make_launcher": ("mmelocal.runtime.launchers", "make_launcher"),
    "LocalLauncher": ("mmelocal.runtime.local", "LocalLauncher"),
    "DockerLauncher": ("mmelocal.runtime.docker", "DockerLauncher"),
    "ExternalLauncher": ("mmelocal.runtime.external", "ExternalLauncher"),
    "TritonClient": ("mmelocal.runtime.client", "TritonClient"),
    "check_path": ("mmelocal.runtime.check", "check_path"),
    "CheckOptions": ("mmelocal.runtime.check", "CheckOptions"),
    "CheckReport": ("mmelocal.runtime.check", "CheckReport"),
    # serve: the MME emulator
    "EmulatorServer": ("mmelocal.emulator.server", "EmulatorServer"),
    "EmulatorConfig": ("mmelocal.emulator.emulator_config", "EmulatorConfig"),
    # measure
    "measure_capacity": ("mmelocal.bench.capacity.loop", "measure_capacity"),
    "CapacityOptions": ("mmelocal.bench.capacity.loop", "CapacityOptions"),
    "CapacityResult": ("mmelocal.bench.capacity.result", "CapacityResult"),
    "estimate_model": ("mmelocal.bench.estimate.model", "estimate_model"),
    "Estimate": ("mmelocal.bench.estimate.core", "Estimate"),
    "measure_endpoint_capacity": ("mmelocal.bench.endpoint.capacity", "measure_endpoint_capacity"),
    "RemoteCapacityOptions": ("mmelocal.bench.endpoint.capacity", "RemoteCapacityOptions"),
    # deploy
    "DeployOptions": ("mmelocal.deploy.plan", "DeployOptions"),
    "DeployPlan": ("mmelocal.deploy.plan", "DeployPlan"),
    "connect_aws": ("mmelocal.aws.session", "connect"),
    "make_plan": ("mmelocal.deploy.deployer", "make_plan"),
    "apply_plan": ("mmelocal.deploy.deployer", "apply_plan"),
    "undeploy": ("mmelocal.deploy.deployer", "undeploy"),
    # the local AWS: the user's SageMaker script against real endpoints on loopback
    "LocalAws": ("mmelocal.localaws.server", "LocalAws"),
    # sizes
    "parse_size_bytes": ("mmelocal.units", "parse_size_bytes"),
    "mib": ("mmelocal.units", "mib"),
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access (PEP 562)."""
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'mmelocal' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # the next access does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "LAUNCHERS",
    "AccessDeniedError",
    "AwsServiceError",
    "BadArchiveError",
    "BenchError",
    "BuildOptions",
    "BuildResult",
    "CapacityOptions",
    "CapacityResult",
    "CheckOptions",
    "CheckReport",
    "ConfigError",
    "DeployError",
    "DeployOptions",
    "DeployPlan",
    "DockerEngineError",
    "DockerImageError",
    "DockerLauncher",
    "DownloadError",
    "EmulatorConfig",
    "EmulatorError",
    "EmulatorServer",
    "EndpointFailedError",
    "Endpoints",
    "Estimate",
    "ExportError",
    "ExternalLauncher",
    "InferenceError",
    "InstanceUnavailableError",
    "InvalidTargetError",
    "LocalAws",
    "LocalAwsError",
    "LocalLauncher",
    "MissingDependencyError",
    "MmeLocalError",
    "ModelLoadError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "ObjectConflictError",
    "OutOfMemoryError",
    "RemoteCapacityOptions",
    "RemoteDockerEngineError",
    "ReplayAbortedError",
    "RuntimeLayerError",
    "ServerConfig",
    "ServerDiedError",
    "ServerStartError",
    "SourceError",
    "StoreAccessError",
    "StoreUnavailableError",
    "TritonClient",
    "TritonLauncher",
    "UnsafeArchiveError",
    "UnsupportedModelError",
    "UpstreamError",
    "UpstreamTimeoutError",
    "UserInputError",
    "ValidationError",
    "ValidationReport",
    "VerificationError",
    "__version__",
    "apply_plan",
    "build_model",
    "check_path",
    "connect_aws",
    "estimate_model",
    "make_launcher",
    "make_plan",
    "measure_capacity",
    "measure_endpoint_capacity",
    "mib",
    "package_copies",
    "package_model",
    "parse_size_bytes",
    "undeploy",
    "validate_path",
]
