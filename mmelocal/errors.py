"""Errors raised by mmelocal.

Every error derives from :class:`MmeLocalError`, carries a message that says
what to do next, and keeps its context as attributes so callers (and the CLI)
can show it without parsing text::

    MmeLocalError
    ├── UserInputError              bad arguments, names, options
    │   ├── SourceError             a model source cannot be found or loaded
    │   ├── ConfigError             a config.pbtxt or option that breaks Triton's schema
    │   ├── UnsafeArchiveError      a tarball that would write outside its folder
    │   │   └── BadArchiveError     not a readable gzip-compressed tar (corrupt, truncated)
    │   ├── InvalidTargetError      a TargetModel name that can never name an artifact
    │   └── ReplayAbortedError      a trace replay could not keep its schedule
    ├── MissingDependencyError      an optional extra is not installed (with the pip hint)
    ├── DownloadError               model files or weights could not be downloaded
    │   └── AccessDeniedError       the hub refused the files (gated or private: licence, login)
    ├── ExportError                 an exporter failed (TorchScript, ONNX, TensorRT)
    ├── VerificationError           exported outputs differ from the source beyond tolerance
    ├── ValidationError             a repository / model folder / tarball has problems
    ├── RuntimeLayerError           a Triton server could not be started or reached
    │   ├── ServerStartError        did not become ready (names URL, seconds, log tail)
    │   │   └── DockerImageError    the image is not here and could not be pulled
    │   ├── ServerDiedError         the process exited while in use
    │   ├── ModelLoadError          Triton refused a model (Triton's own message)
    │   │   └── UnsupportedModelError   this host cannot run it (names the backend, what would)
    │   ├── InferenceError          Triton refused a request
    │   └── DockerEngineError       the Docker engine cannot be reached
    │       └── RemoteDockerEngineError  the engine runs on another machine (DOCKER_HOST)
    ├── EmulatorError               the MME platform emulator
    │   ├── ModelNotFoundError      TargetModel not in the store
    │   ├── StoreAccessError        the store refused the artifact (a permission: 400)
    │   ├── StoreUnavailableError   the store throttled, failed or was unreachable (retry: 503)
    │   ├── OutOfMemoryError        nothing left to evict and the model still does not fit
    │   ├── ModelNotReadyError      a cold load outlasts the caller's wait (goes on)
    │   ├── InstanceUnavailableError  Triton is down or restarting (retry: 503)
    │   └── UpstreamError           the connection to Triton failed (also ConnectionError)
    │       └── UpstreamTimeoutError  Triton did not answer within the deadline
    ├── BenchError                  capacity, load test, sweep or report failed
    ├── DeployError                 deploy / undeploy / smoke against SageMaker failed
    │   └── ObjectConflictError     a store tarball would overwrite an object not the endpoint's
    └── LocalAwsError               the local AWS (``mmelocal local-aws``)
        ├── AwsServiceError         a request the service refuses (its code and status)
        └── EndpointFailedError     an endpoint cannot be served (its FailureReason)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class MmeLocalError(Exception):
    """Root of every error mmelocal raises on purpose."""


class UserInputError(MmeLocalError):
    """An argument, name or option given by the user is not acceptable."""


class SourceError(UserInputError):
    """A model source (hub name, folder, file, torchvision/timm name) cannot be used."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class ConfigError(UserInputError):
    """A config.pbtxt or a build option does not fit Triton's ModelConfig schema."""

    def __init__(
        self,
        message: str,
        *,
        path: Path | str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(where + message)
        self.path = Path(path) if path is not None else None
        self.line = line
        self.field = field


class UnsafeArchiveError(UserInputError):
    """An archive member would escape the target folder or break a limit."""

    def __init__(
        self, message: str, *, archive: Path | str | None = None, member: str | None = None
    ) -> None:
        super().__init__(message)
        self.archive = Path(archive) if archive is not None else None
        self.member = member


class BadArchiveError(UnsafeArchiveError):
    """The file is not a readable gzip-compressed tar archive (corrupt, truncated, wrong type)."""


class InvalidTargetError(UserInputError):
    """A TargetModel name that can never name an artifact (answered as a 400)."""

    def __init__(self, message: str, *, target_model: str) -> None:
        super().__init__(message)
        self.target_model = target_model


class ReplayAbortedError(UserInputError):
    """A trace replay could not keep its schedule (in-flight cap or sender lag): it stops
    rather than send late, and says which limit to raise."""


class MissingDependencyError(MmeLocalError):
    """An optional dependency is needed for this feature and is not installed."""

    def __init__(self, package: str, *, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs the Python package '{package}', which is not installed: "
            f"pip install 'mmelocal[{extra}]'"
        )
        self.package = package
        self.extra = extra


class DownloadError(MmeLocalError):
    """Model files or pretrained weights could not be fetched (network, mirror, cache, integrity).

    Nothing partly downloaded is ever used: ``source`` names what was asked for and ``url``
    the address tried, when there was one.
    """

    def __init__(self, message: str, *, source: str | None = None, url: str | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.url = url


class AccessDeniedError(DownloadError):
    """The hub refused the files (HTTP 401/403): a gated or private model needs a token."""


class ExportError(MmeLocalError):
    """An exporter could not produce its artifact."""


class VerificationError(MmeLocalError):
    """The exported artifact's outputs differ from the source model's beyond tolerance."""

    def __init__(
        self, message: str, *, max_abs_diff: float | None = None, max_rel_diff: float | None = None
    ) -> None:
        super().__init__(message)
        self.max_abs_diff = max_abs_diff
        self.max_rel_diff = max_rel_diff


class ValidationError(MmeLocalError):
    """A model repository, model folder or tarball has problems (listed in ``problems``)."""

    def __init__(self, message: str, *, problems: Sequence[object] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems)


class RuntimeLayerError(MmeLocalError):
    """A Triton server could not be started, reached or used."""


class ServerStartError(RuntimeLayerError):
    """The server did not become ready in time, or exited during start-up."""

    def __init__(
        self, message: str, *, url: str | None = None, log_path: Path | str | None = None
    ) -> None:
        super().__init__(message)
        self.url = url
        self.log_path = Path(log_path) if log_path is not None else None


class ServerDiedError(RuntimeLayerError):
    """The Triton process is gone; the call could not be served."""

    def __init__(self, message: str, *, log_path: Path | str | None = None) -> None:
        super().__init__(message)
        self.log_path = Path(log_path) if log_path is not None else None


class ModelLoadError(RuntimeLayerError):
    """Triton refused to load a model; ``triton_message`` is Triton's own text,
    ``status_code`` its HTTP status and ``log_path`` the server log that says more."""

    def __init__(
        self,
        message: str,
        *,
        model_name: str,
        triton_message: str = "",
        status_code: int | None = None,
        log_path: Path | str | None = None,
    ) -> None:
        super().__init__(message)
        self.model_name = model_name
        self.triton_message = triton_message
        self.status_code = status_code
        self.log_path = Path(log_path) if log_path is not None else None


class UnsupportedModelError(ModelLoadError):
    """The model needs what this host lacks (a GPU, a backend); the message says what runs it."""


class InferenceError(RuntimeLayerError):
    """Triton refused or failed an inference request."""

    def __init__(self, message: str, *, model_name: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.model_name = model_name
        self.status_code = status_code


class DockerEngineError(RuntimeLayerError):
    """The Docker engine cannot be reached (or refused a request)."""


class RemoteDockerEngineError(DockerEngineError):
    """The Docker engine (``DOCKER_HOST``) runs on another machine, and what was asked of it
    needs this machine's: ``address`` is the engine's."""

    def __init__(self, message: str, *, address: str) -> None:
        super().__init__(message)
        self.address = address


class DockerImageError(ServerStartError):
    """The image is not on this machine and could not be pulled."""

    def __init__(self, message: str, *, image: str) -> None:
        super().__init__(message)
        self.image = image


class EmulatorError(MmeLocalError):
    """The MME emulator could not serve a request."""


class ModelNotFoundError(EmulatorError):
    """The TargetModel is not in the model store."""

    def __init__(self, message: str, *, target_model: str) -> None:
        super().__init__(message)
        self.target_model = target_model


class StoreAccessError(EmulatorError):
    """The model store refused to give an artifact that may exist (S3's 403 AccessDenied
    and its other refusals but "not found"); the message names the permission to check."""

    def __init__(self, message: str, *, target_model: str) -> None:
        super().__init__(message)
        self.target_model = target_model


class StoreUnavailableError(EmulatorError):
    """The model store throttled, failed (5xx) or could not be reached after the client's
    retries: the same call may succeed shortly (answered as 503)."""


class OutOfMemoryError(EmulatorError):
    """The model does not fit even after every evictable model was unloaded."""


class ModelNotReadyError(EmulatorError):
    """The cold load takes longer than the caller may wait; it goes on in the background."""

    def __init__(self, message: str, *, target_model: str) -> None:
        super().__init__(message)
        self.target_model = target_model


class InstanceUnavailableError(EmulatorError):
    """The Triton process is down or restarting: retry shortly (answered as 503)."""


class UpstreamError(EmulatorError, ConnectionError):
    """The connection to Triton failed or closed before a full answer (also a ConnectionError)."""


class UpstreamTimeoutError(UpstreamError):
    """Triton did not answer within the request's deadline (the connection is closed)."""


class BenchError(MmeLocalError):
    """A capacity measurement, load test, sweep or report failed."""


class DeployError(MmeLocalError):
    """A deploy, undeploy or smoke test against SageMaker could not go on.

    ``operation`` is the AWS API operation that failed (None before any call) and ``code``
    the service's error code, so callers can react without parsing the message.
    """

    def __init__(
        self, message: str, *, operation: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.code = code


class ObjectConflictError(DeployError):
    """A store tarball would replace an object under the prefix that is not the endpoint's
    to replace (the user's own, another tool's or another endpoint's; or one S3 would not
    let mmelocal read). ``keys`` names those objects, sorted."""

    def __init__(self, message: str, *, keys: Sequence[str]) -> None:
        super().__init__(message)
        self.keys = tuple(sorted(keys))


class LocalAwsError(MmeLocalError):
    """The local AWS (``mmelocal local-aws``) could not start or serve a request."""


class AwsServiceError(LocalAwsError):
    """A request the emulated service refuses: ``code`` (e.g. ValidationException) and the
    HTTP ``status`` it answers with."""

    def __init__(self, message: str, *, code: str = "ValidationException", status: int = 400):
        super().__init__(message)
        self.code = code
        self.status = status


class EndpointFailedError(LocalAwsError):
    """An endpoint cannot be served; the message is the ``FailureReason`` it shows."""
