"""Typed tritonserver options: one frozen dataclass turned into argv and environment.

Nothing here is assembled by string concatenation from user text: every option is a
field with a type and a check, and :meth:`ServerConfig.to_args` renders the flags
Triton 2.x understands. Ports set to ``0`` are chosen free by :meth:`ServerConfig.resolved`
just before start (so two servers on one machine never collide). tritonserver binds them
later: the local launcher starts again on new ports when another process took one in
between (:meth:`mmelocal.runtime.local.LocalLauncher.start`).

With ``sagemaker=True`` (MME mode) the flags are SageMaker's: those its image's entrypoint
builds from ``sagemaker_env`` (:func:`mmelocal.runtime.entrypoint.entrypoint_args`), the
dummy repository replaced by ``model_repository``, then what mmelocal adds for itself,
each listed with its reason in :data:`MMELOCAL_FLAGS`.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mmelocal.errors import UserInputError
from mmelocal.runtime import entrypoint

MODEL_CONTROL_MODES = ("explicit", "poll", "none")
#: ``--log-verbose`` of a plain server when ``log_verbose`` is None (tritonserver's own
#: default); in MME mode the entrypoint's ``SAGEMAKER_TRITON_LOG_VERBOSE`` default applies
PLAIN_LOG_VERBOSE = 0
#: ``--metrics-interval-ms`` of a server whose metrics are on (a plain server; in MME mode
#: with ``SAGEMAKER_TRITON_ALLOW_METRICS``, unless ``SAGEMAKER_TRITON_ADDITIONAL_ARGS`` gives
#: one): Triton's CPU/GPU metrics poller sleeps half the interval between polls and
#: tritonserver's exit joins it (triton-inference-server/core ``src/metrics.cc``; the
#: poller starts only with metrics on, ``src/tritonserver.cc``), so Triton's 2000 ms
#: default held every stop up to 1 s after the server had stopped. mmelocal reads none of
#: those gauges; a later ``extra_args`` value wins.
METRICS_INTERVAL_MS = 200

#: Python-backend shared memory per model: the SageMaker launcher lowers Triton's 64 MB
#: default to 16 MB so that small ``/dev/shm`` mounts (Docker's default is 64 MB) still work;
#: its growth step is 1 MB (the entrypoint's defaults, :data:`~.entrypoint.KNOBS`)
DEFAULT_PYTHON_SHM_BYTES = entrypoint.knob_default_number("SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE")
DEFAULT_PYTHON_SHM_GROWTH_BYTES = entrypoint.knob_default_number(
    "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE"
)

#: What mmelocal adds after the entrypoint's argv in MME mode, and why (later flags win in
#: tritonserver's parser). Every other flag is the entrypoint's for the same environment.
MMELOCAL_FLAGS: dict[str, str] = {
    "--model-repository": "replaced, not added: an empty folder of this server instead of the "
    "entrypoint's dummy /tmp/sagemaker (each tarball is registered as its own repository)",
    "--sagemaker-port": "a free port per server (SageMaker sets 8080 through "
    "SAGEMAKER_BIND_TO_PORT); several emulated instances share one machine",
    "--allow-http=true, --http-address, --http-port": "KServe v2 HTTP on loopback: readiness "
    "is read at /v2/health/ready and the emulator's /v2 routes read model metadata there; "
    "SageMaker turns HTTP off and exposes only its own front end",
    "--grpc-address, --grpc-port, --metrics-address, --metrics-port": "only when the "
    "environment turns gRPC or metrics on: loopback and a free port, so servers never collide",
    "--metrics-interval-ms": f"{METRICS_INTERVAL_MS}, only when the environment turns metrics "
    "on and gives no interval: tritonserver's exit waits for its metrics poller, which sleeps "
    "half the interval (Triton's 2000 ms default held every stop up to 1 s)",
    "--exit-timeout-secs": "a bounded stop (the launcher escalates to SIGKILL after it)",
    "--backend-directory": "local binary only: the wheel's Python backend with the stub for "
    "this Python (the image has its own backends)",
    "--backend-config=python,shm-region-prefix-name": "local binary only: a prefix of this "
    "server's own for its /dev/shm regions, so servers never share one and leftovers are "
    "removed at stop",
    "--strict-readiness, --load-model, extra_args": "only when the caller sets them",
}


def pick_free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free right now on ``host`` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """Options for one tritonserver process.

    ``model_repository`` is where models live (in explicit mode nothing is loaded at
    start unless listed in ``load_models``). ``sagemaker=True`` turns on Triton's
    SageMaker front end (``--allow-sagemaker=true``, ``SAGEMAKER_MULTI_MODEL=true``)
    listening on ``sagemaker_port``, with the flags SageMaker's entrypoint builds from
    ``sagemaker_env`` (``SAGEMAKER_TRITON_*`` variables, checked as the entrypoint and
    tritonserver would; they also reach the server's environment, as on the platform) for
    ``gpu_count`` GPUs. ``extra_args`` are appended verbatim as separate argv items (each
    must start with ``--``); ``env`` adds environment variables.

    ``log_verbose`` ``None`` means the launch recipe's default: :data:`PLAIN_LOG_VERBOSE` for
    a plain server, the entrypoint's ``SAGEMAKER_TRITON_LOG_VERBOSE`` default in MME mode.
    In MME mode ``log_verbose`` and the Python-backend shared memory sizes are the
    entrypoint's knobs: a value given here is written into
    ``sagemaker_env`` (and a value there is mirrored here); both at once must agree.
    """

    model_repository: Path
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    host: str = "127.0.0.1"
    model_control_mode: str = "explicit"
    load_models: tuple[str, ...] = ()
    strict_readiness: bool = True
    sagemaker: bool = False
    sagemaker_port: int = 0
    log_verbose: int | None = None
    python_shm_default_bytes: int = DEFAULT_PYTHON_SHM_BYTES
    python_shm_growth_bytes: int = DEFAULT_PYTHON_SHM_GROWTH_BYTES
    exit_timeout_s: int = 10
    backend_directory: Path | None = None
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    sagemaker_env: Mapping[str, str] = field(default_factory=dict)
    gpu_count: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_repository", Path(self.model_repository))
        if self.backend_directory is not None:
            object.__setattr__(self, "backend_directory", Path(self.backend_directory))
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        object.__setattr__(self, "load_models", tuple(self.load_models))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "sagemaker_env", dict(self.sagemaker_env))
        if self.sagemaker:
            self._reconcile_with_entrypoint()
        elif self.sagemaker_env:
            raise UserInputError("sagemaker_env needs sagemaker=True (it drives MME mode)")
        for name in ("http_port", "grpc_port", "metrics_port", "sagemaker_port"):
            port = getattr(self, name)
            if not isinstance(port, int) or not 0 <= port <= 65535:
                raise UserInputError(f"{name} must be an int in 0..65535 (0 = free), got {port!r}")
        if self.model_control_mode not in MODEL_CONTROL_MODES:
            raise UserInputError(
                f"model_control_mode must be one of {', '.join(MODEL_CONTROL_MODES)}, "
                f"got {self.model_control_mode!r}"
            )
        if self.load_models and self.model_control_mode != "explicit":
            raise UserInputError("load_models needs model_control_mode='explicit'")
        if self.gpu_count < 0:
            raise UserInputError(f"gpu_count must be >= 0, got {self.gpu_count}")
        if self.log_verbose is not None and self.log_verbose < 0:
            raise UserInputError(f"log_verbose must be >= 0, got {self.log_verbose}")
        if self.python_shm_default_bytes < entrypoint.MIN_PYTHON_SHM_BYTES:
            raise UserInputError(
                f"python_shm_default_bytes must be >= {entrypoint.MIN_PYTHON_SHM_BYTES} (1 MB), "
                f"got {self.python_shm_default_bytes}"
            )
        if self.python_shm_growth_bytes < 1:
            raise UserInputError(
                f"python_shm_growth_bytes must be >= 1, got {self.python_shm_growth_bytes}"
            )
        if self.exit_timeout_s < 0:
            raise UserInputError(f"exit_timeout_s must be >= 0, got {self.exit_timeout_s}")
        for arg in self.extra_args:
            if not isinstance(arg, str) or not arg.startswith("--"):
                raise UserInputError(
                    f"extra_args items must be flags starting with '--', got {arg!r}"
                )

    def _reconcile_with_entrypoint(self) -> None:
        """MME mode: one source for the knobs the entrypoint owns (see the class doc)."""
        if self.model_control_mode != "explicit":
            raise UserInputError("sagemaker=True runs model_control_mode='explicit' (SageMaker's)")
        env = dict(self.sagemaker_env)
        entrypoint.check_sagemaker_env(env)
        pairs = (
            ("log_verbose", "SAGEMAKER_TRITON_LOG_VERBOSE", None),
            (
                "python_shm_default_bytes",
                "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE",
                DEFAULT_PYTHON_SHM_BYTES,
            ),
            (
                "python_shm_growth_bytes",
                "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE",
                DEFAULT_PYTHON_SHM_GROWTH_BYTES,
            ),
        )
        for name, key, default in pairs:
            mine, theirs = getattr(self, name), env.get(key) or None
            if theirs is None:
                if mine is not None and mine != default:
                    env[key] = str(mine)
                continue
            value = entrypoint.knob_value(key, theirs)
            if mine is not None and mine != default and mine != value:
                raise UserInputError(f"{name}={mine} and {key}={theirs} disagree: set one of them")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "sagemaker_env", env)

    def resolved(self) -> ServerConfig:
        """A copy with every port 0 replaced by a free port (SageMaker port only if enabled)."""
        taken: set[int] = set()

        def choose(port: int) -> int:
            if port:
                return port
            while True:
                candidate = pick_free_port(self.host)
                if candidate not in taken:
                    taken.add(candidate)
                    return candidate

        return dataclasses.replace(
            self,
            http_port=choose(self.http_port),
            grpc_port=choose(self.grpc_port),
            metrics_port=choose(self.metrics_port),
            sagemaker_port=choose(self.sagemaker_port) if self.sagemaker else self.sagemaker_port,
        )

    def to_args(self) -> list[str]:
        """The tritonserver argv after the binary (ports must be resolved first)."""
        ports = [self.http_port, self.grpc_port, self.metrics_port]
        if self.sagemaker:
            ports.append(self.sagemaker_port)
        if 0 in ports:
            raise UserInputError("ports are still 0: call ServerConfig.resolved() before to_args()")
        if self.sagemaker:
            return self.entrypoint_args() + self.mmelocal_args()
        args = [
            f"--model-repository={self.model_repository}",
            f"--model-control-mode={self.model_control_mode}",
            f"--strict-readiness={_flag(self.strict_readiness)}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            f"--log-verbose={self.log_verbose or PLAIN_LOG_VERBOSE}",
            f"--exit-timeout-secs={self.exit_timeout_s}",
            f"--metrics-interval-ms={METRICS_INTERVAL_MS}",
            f"--backend-config=python,shm-default-byte-size={self.python_shm_default_bytes}",
            f"--backend-config=python,shm-growth-byte-size={self.python_shm_growth_bytes}",
        ]
        if self.backend_directory is not None:
            args.append(f"--backend-directory={self.backend_directory}")
        args += [f"--load-model={name}" for name in self.load_models]
        args += list(self.extra_args)
        return args

    @property
    def serves_grpc(self) -> bool:
        """Whether tritonserver opens its gRPC port: always outside MME mode; in MME mode
        only when the entrypoint's ``SAGEMAKER_TRITON_ALLOW_GRPC`` turns it on (off by
        SageMaker's default)."""
        return not self.sagemaker or entrypoint.flag_enabled(self.entrypoint_args(), "--allow-grpc")

    @property
    def serves_metrics(self) -> bool:
        """Whether tritonserver opens its metrics port (as :attr:`serves_grpc`, for
        ``SAGEMAKER_TRITON_ALLOW_METRICS``)."""
        return not self.sagemaker or entrypoint.flag_enabled(
            self.entrypoint_args(), "--allow-metrics"
        )

    def entrypoint_args(self) -> list[str]:
        """MME mode: the entrypoint's argv for ``sagemaker_env``, its dummy repository
        replaced by ``model_repository``. The platform's own keys (``SAGEMAKER_BIND_TO_PORT``,
        ``SAGEMAKER_SAFE_PORT_RANGE``) are left out: mmelocal chooses its ports, and a safe
        range would make tritonserver refuse every other port on the front end's address."""
        env = {k: v for k, v in self.sagemaker_env.items() if k not in entrypoint.PLATFORM_KEYS}
        args = entrypoint.entrypoint_args(env, gpu_count=self.gpu_count)
        dummy = f"--model-repository={entrypoint.MME_MODEL_REPOSITORY}"
        return [f"--model-repository={self.model_repository}" if a == dummy else a for a in args]

    def mmelocal_args(self) -> list[str]:
        """MME mode: what mmelocal adds after the entrypoint's argv (:data:`MMELOCAL_FLAGS`)."""
        args = [
            "--allow-http=true",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--sagemaker-port={self.sagemaker_port}",
        ]
        if self.serves_grpc:
            args += [f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}"]
        if self.serves_metrics:
            args += [f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}"]
            given = [*self.entrypoint_args(), *self.extra_args]
            if not any(a.split("=")[0] == "--metrics-interval-ms" for a in given):
                args.append(f"--metrics-interval-ms={METRICS_INTERVAL_MS}")
        args.append(f"--exit-timeout-secs={self.exit_timeout_s}")
        if self.backend_directory is not None:
            args.append(f"--backend-directory={self.backend_directory}")
        if not self.strict_readiness:
            args.append("--strict-readiness=false")
        args += [f"--load-model={name}" for name in self.load_models]
        args += list(self.extra_args)
        return args

    def to_env(self) -> dict[str, str]:
        """Environment variables this config adds (on top of the launcher's own)."""
        env: dict[str, str] = {}
        if self.sagemaker:
            env.update(entrypoint.entrypoint_environment(self.sagemaker_env))
        env.update(self.env)
        return env


def _flag(value: bool) -> str:
    return "true" if value else "false"


__all__ = [
    "DEFAULT_PYTHON_SHM_BYTES",
    "DEFAULT_PYTHON_SHM_GROWTH_BYTES",
    "METRICS_INTERVAL_MS",
    "MMELOCAL_FLAGS",
    "MODEL_CONTROL_MODES",
    "PLAIN_LOG_VERBOSE",
    "ServerConfig",
    "pick_free_port",
]
