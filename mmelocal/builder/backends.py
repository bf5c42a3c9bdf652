"""Which artifacts a host without the real backends can run, and what would run the rest.

The pip ``tritonserver`` has the Python backend only; mmelocal serves TorchScript and ONNX
models through it (:mod:`mmelocal.runtime.python_copies`). A TensorRT plan needs an NVIDIA GPU
(of the architecture it was built for); TensorFlow, OpenVINO, DALI, FIL ... need their
own backend, which only a Triton container image has. :func:`host_limit` says so in one
sentence, used by the emulator and ``check`` (an error, before any load) and by
``validate`` (a warning: the cloud runs them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.facts.triton_images import NGC_IMAGE


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One Triton backend as mmelocal sees it: the one table every layer derives from."""

    #: the backend's name (``backend:`` in config.pbtxt; the folder under backends/)
    name: str
    #: the ``platform:`` values that need this backend -> the file Triton looks for in a
    #: version folder (None: no file, as for an ensemble)
    platforms: Mapping[str, str | None] = field(default_factory=dict)
    #: the file Triton looks for when a config names the backend (``backend: "python"``)
    artifact: str | None = None
    #: mmelocal's format name for it: what ``build`` exports and the Python runner loads
    #: (None: models of this backend are neither exported nor served through the runner)
    format: str | None = None
    #: the pip ``tritonserver`` has it (the Python backend) or every Triton has it built in
    in_pip_server: bool = False
    #: built into every Triton, no backend folder (ensemble)
    builtin: bool = False
    #: runs only on an NVIDIA GPU (a TensorRT plan)
    needs_gpu: bool = False
    #: the short name of its models in configuration names and reports (``pt-db``, ``trt``)
    short: str | None = None
    #: what runs its models, as reports name the shared runtime (``torch``)
    runtime: str | None = None


def _exported(
    name: str,
    platform: str,
    artifact: str,
    fmt: str,
    short: str,
    runtime: str,
    *,
    needs_gpu: bool = False,
) -> Backend:
    """A backend whose models ``build`` exports."""
    return Backend(
        name=name,
        platforms={platform: artifact},
        artifact=artifact,
        format=fmt,
        short=short,
        runtime=runtime,
        needs_gpu=needs_gpu,
    )


#: backend name -> what mmelocal knows about it: every backend of the Triton image SageMaker's
#: Triton is built from (``nvcr.io/nvidia/tritonserver:<yy.mm>-py3``, whose
#: ``/opt/tritonserver/backends`` holds those of ``build.py --enable-all``: ``enable_all()``
#: in triton-inference-server/server, r24.10)
BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        # (backend, platform, artifact, format, short name, runtime): exported by ``build``
        _exported("pytorch", "pytorch_libtorch", "model.pt", "torchscript", "pt", "torch"),
        _exported("onnxruntime", "onnxruntime_onnx", "model.onnx", "onnx", "onnx", "onnxruntime"),
        _exported(
            "tensorrt", "tensorrt_plan", "model.plan", "tensorrt", "trt", "TensorRT", needs_gpu=True
        ),
        Backend(
            name="tensorflow",
            platforms={
                "tensorflow_savedmodel": "model.savedmodel",
                "tensorflow_graphdef": "model.graphdef",
            },
        ),
        Backend(name="openvino", artifact="model.xml"),
        Backend(
            name="python",
            artifact="model.py",
            in_pip_server=True,
            short="python",
            runtime="Python",
        ),
        Backend(name="ensemble", platforms={"ensemble": None}, in_pip_server=True, builtin=True),
        Backend(name="dali"),
        Backend(name="fil"),
        # Triton's example backends, shipped in the image too
        Backend(name="identity"),
        Backend(name="repeat"),
        Backend(name="square"),
    )
}
#: every ``platform:`` value Triton knows, in the table's order
PLATFORMS = tuple(p for b in BACKENDS.values() for p in b.platforms)
#: platform -> the file Triton looks for in a version folder
PLATFORM_FILES = {p: f for b in BACKENDS.values() for p, f in b.platforms.items() if f}
#: backend -> the file Triton looks for when a config names the backend
BACKEND_FILES = {n: b.artifact for n, b in BACKENDS.items() if b.artifact}
#: mmelocal's export formats -> (platform, artifact file)
FORMATS: dict[str, tuple[str, str]] = {
    b.format: (p, f)
    for b in BACKENDS.values()
    if b.format
    for p, f in list(b.platforms.items())[:1]
    if f
}
#: mmelocal's export formats, in the table's order (what ``build`` and ``estimate`` take)
EXPORT_FORMATS = tuple(FORMATS)
#: export format -> its short name in configuration names (``pt``, ``onnx``, ``trt``)
FORMAT_SHORT_NAMES = {b.format: b.short for b in BACKENDS.values() if b.format and b.short}
#: a model's kind as reports name it (an export format, or ``python``) -> its short name
KIND_SHORT_NAMES = {b.format or b.name: b.short for b in BACKENDS.values() if b.short}
#: a model's kind -> what runs it, as reports name the shared runtime
KIND_RUNTIMES = {b.format or b.name: b.runtime for b in BACKENDS.values() if b.runtime}
#: ``platform:`` value -> mmelocal's export format
PLATFORM_FORMATS = {p: b.format for b in BACKENDS.values() if b.format for p in b.platforms}
#: ``platform:`` or backend name -> the model's kind (an export format, or ``python``)
MODEL_KINDS = {
    key: b.format or b.name for b in BACKENDS.values() if b.short for key in (*b.platforms, b.name)
}
#: platform -> the backend Triton needs for it
PLATFORM_BACKENDS = {p: b.name for b in BACKENDS.values() for p in b.platforms if p != b.name}
#: backends the pip tritonserver has (Python only, plus the built-in ensemble)
PIP_SERVER_BACKENDS = frozenset(n for n, b in BACKENDS.items() if b.in_pip_server)
#: backends every Triton has without a backend folder
BUILTIN_BACKENDS = frozenset(n for n, b in BACKENDS.items() if b.builtin)
#: backends mmelocal runs through the Python runner
RUNNER_BACKENDS = frozenset(n for n, b in BACKENDS.items() if b.format)
#: backends mmelocal emulates on any host (served as they are, or through the runner)
EMULATED_BACKENDS = frozenset(
    n for n, b in BACKENDS.items() if (b.in_pip_server or b.format) and not b.needs_gpu
)
#: backends mmelocal emulates only where an NVIDIA GPU is present
GPU_BACKENDS = frozenset(n for n, b in BACKENDS.items() if b.needs_gpu)
#: what a Triton container image has: every backend of the table
CONTAINER_BACKENDS = frozenset(BACKENDS)
#: platform or backend name -> (backend, format, artifact file), for the Python runner
NATIVE_FORMATS: dict[str, tuple[str, str, str]] = {
    key: (b.name, b.format, b.artifact)
    for b in BACKENDS.values()
    if b.format and b.artifact
    for key in (*b.platforms, b.name)
}


#: the image a Docker launcher hint names (SageMaker's Triton is built from it)
TRITON_IMAGE_HINT = NGC_IMAGE.format(release="<yy.mm>")


@dataclass(frozen=True)
class LauncherFlags:
    """How a user chooses the Docker launcher and its image where they are: the CLI's
    ``--launcher``/``--image`` (the default), the pytest plugin's ``--mmelocal-launcher``/
    ``--mmelocal-docker-image``, the ``mme_endpoint`` fixture's ``mme_endpoint_config``
    entries; hints name these."""

    #: what chooses the launcher
    launcher: str = "--launcher"
    #: what chooses the image
    image: str = "--image"
    #: one choice as it is written there (``{name}``: the flag or key, ``{value}``: its value)
    setting: str = "{name} {value}"
    #: the choices together (``{}``: them, joined by ``separator``)
    settings: str = "{}"
    separator: str = " "

    def choose(self, **values: str) -> str:
        """``launcher="docker", image=...`` written as the user writes them there."""
        chosen = (self.setting.format(name=getattr(self, k), value=v) for k, v in values.items())
        return self.settings.format(self.separator.join(chosen))

    @property
    def docker(self) -> str:
        """``--launcher docker`` (or the plugin's flag, or the fixture's entry)."""
        return self.choose(launcher="docker")

    @property
    def docker_hint(self) -> str:
        """Where a model the pip tritonserver cannot run does run: the Triton image, which
        runs its backends on a CPU too (Triton's quickstart, "Run on CPU-Only System")."""
        return f"run it with the Docker launcher ({self._image_hint})"

    @property
    def gpu_docker_hint(self) -> str:
        """Where a model of a backend that needs a GPU (:data:`GPU_BACKENDS`) does run."""
        return (
            "run it where it can: a machine with an NVIDIA GPU and the Docker launcher "
            f"({self._image_hint})"
        )

    @property
    def _image_hint(self) -> str:
        image = self.choose(launcher="docker", image=TRITON_IMAGE_HINT)
        return f"`{image}`, the image SageMaker's Triton is built from"


#: the CLI's flags (``mmelocal serve``, ``check``, ``triton``...)
CLI_FLAGS = LauncherFlags()
#: the pytest plugin's flags (:mod:`mmelocal.testing.plugin`)
PYTEST_FLAGS = LauncherFlags(launcher="--mmelocal-launcher", image="--mmelocal-docker-image")
#: the ``mme_endpoint`` fixture's: EmulatorConfig fields returned by its
#: ``mme_endpoint_config`` fixture (:mod:`mmelocal.testing.emulator_fixtures`)
FIXTURE_FLAGS = LauncherFlags(
    launcher="launcher",
    image="image",
    setting='"{name}": "{value}"',
    settings="mme_endpoint_config = {{{}}}",
    separator=", ",
)
DOCKER_HINT = CLI_FLAGS.docker_hint


#: backends whose KIND_CPU groups Triton gives 2 instances when ``count`` is unset (core
#: ``SetDefaultInstanceCount``, ``src/model_config_utils.cc``, r24.10)
TWO_CPU_INSTANCE_BACKENDS = frozenset({"onnxruntime", "tensorflow"})


def default_instance_count(*, kind: str, backend: str) -> int:
    """The ``count`` Triton gives an instance group that sets none, once its kind is resolved
    (``KIND_AUTO`` is ``KIND_GPU`` or ``KIND_CPU`` by then): 2 for a ``KIND_CPU`` group of
    the backends in :data:`TWO_CPU_INSTANCE_BACKENDS`, else 1 (per listed GPU for
    ``KIND_GPU``)."""
    return 2 if kind == "KIND_CPU" and backend in TWO_CPU_INSTANCE_BACKENDS else 1


def backend_of(config: Any) -> str:
    """The backend a ModelConfig needs (``platform`` mapped to its backend name)."""
    if config.backend:
        return str(config.backend)
    platform = str(config.platform)
    if platform.startswith("tensorflow"):
        return "tensorflow"
    return PLATFORM_BACKENDS.get(platform, platform)


def host_limit(
    config: Any,
    *,
    gpu: bool,
    backends: frozenset[str] = frozenset(),
    flags: LauncherFlags = CLI_FLAGS,
) -> str | None:
    """Why a server with ``backends`` (plus mmelocal's emulation) cannot run ``config`` on a
    host with or without a GPU, naming the backend and what would run it (with ``flags``,
    those of where the user is); None if it can."""
    needed = backend_of(config)
    if not needed or needed in backends or needed in EMULATED_BACKENDS:
        return None
    name = config.name or "this model"
    if needed in GPU_BACKENDS:
        if gpu:
            return None
        return (
            f"{name!r} is a TensorRT plan (backend {needed!r}): it runs only on an NVIDIA GPU "
            f"and this host has none; {flags.gpu_docker_hint}"
        )
    return (
        f"{name!r} needs the {needed!r} backend, which the pip tritonserver lacks and "
        f"mmelocal does not emulate (it runs pytorch_libtorch, onnxruntime_onnx and python "
        f"models, and tensorrt_plan on a GPU); {flags.docker_hint}"
    )


def execution_env_path(config: Any, model_dir: Path) -> Path | None:
    """The file ``parameters { key: "EXECUTION_ENV_PATH" }`` names (``$$TRITON_MODEL_DIRECTORY``
    replaced by ``model_dir``), or None when the config sets none."""
    if "EXECUTION_ENV_PATH" not in config.parameters:
        return None
    raw = str(config.parameters["EXECUTION_ENV_PATH"].string_value)
    return Path(raw.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir)))


def execution_env_problem(config: Any, model_dir: Path, *, stub_python: str | None) -> str | None:
    """What keeps a Python model's ``EXECUTION_ENV_PATH`` (a conda-pack tarball) from running
    beside a stub for Python ``stub_python`` ("3.11"; None: do not compare), or None.

    The Python backend runs its stub inside the unpacked environment: the file must exist,
    and the environment's Python must be the one the stub was built for (else the stub
    cannot start, which on Triton 2.51 hangs the load)."""
    env = execution_env_path(config, model_dir)
    if env is None:
        return None
    name = config.name or model_dir.name
    if (model_dir / "triton_python_backend_stub").is_file():
        stub_python = None  # the model brings its own stub
    if not env.is_file():
        return (
            f"model {name!r}: EXECUTION_ENV_PATH names {env.name!r}, which is not in the model "
            f"folder; add the conda-pack tarball (conda pack -o {env.name}) beside config.pbtxt"
        )
    found, activate = _env_contents(env)
    if not activate or found is None:
        lacking = " and ".join(
            what for what, ok in (("bin/activate", activate), ("lib/pythonX.Y/", found)) if not ok
        )
        return (
            f"model {name!r}: {env.name} holds no {lacking}, which the Python backend needs; "
            "make it with `conda pack` from an environment with python and numpy"
        )
    if stub_python is not None and found != stub_python:
        return (
            f"model {name!r}: {env.name} holds Python {found} but this server's Python-backend "
            f"stub runs Python {stub_python}; pack the environment with python={stub_python}, or "
            f"put a triton_python_backend_stub built for {found} in the model folder"
        )
    return None


def _env_contents(env: Path) -> tuple[str | None, bool]:
    """(the Python version under ``lib/pythonX.Y/``, whether ``bin/activate`` is there),
    read as a stream that stops as soon as both are known (packed environments are large)."""
    import re
    import tarfile

    python = re.compile(r"^(?:\./)?lib/python(3\.\d+)/")
    version, activate = None, False
    try:
        with tarfile.open(env, "r|*") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                activate = activate or name == "bin/activate"
                match = python.match(name)
                version = version or (match.group(1) if match else None)
                if version and activate:
                    break
    except (OSError, tarfile.TarError):
        return None, False
    return version, activate


__all__ = [
    "BACKENDS",
    "BACKEND_FILES",
    "BUILTIN_BACKENDS",
    "CLI_FLAGS",
    "CONTAINER_BACKENDS",
    "DOCKER_HINT",
    "EMULATED_BACKENDS",
    "EXPORT_FORMATS",
    "FIXTURE_FLAGS",
    "FORMATS",
    "FORMAT_SHORT_NAMES",
    "GPU_BACKENDS",
    "KIND_RUNTIMES",
    "KIND_SHORT_NAMES",
    "MODEL_KINDS",
    "NATIVE_FORMATS",
    "PIP_SERVER_BACKENDS",
    "PLATFORMS",
    "PLATFORM_BACKENDS",
    "PLATFORM_FILES",
    "PLATFORM_FORMATS",
    "PYTEST_FLAGS",
    "RUNNER_BACKENDS",
    "TRITON_IMAGE_HINT",
    "Backend",
    "LauncherFlags",
    "backend_of",
    "execution_env_path",
    "execution_env_problem",
    "host_limit",
]
