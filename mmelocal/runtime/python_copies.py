"""Serve native-platform models on a server that only has the Python backend.

The pip ``tritonserver`` (nvidia-pytriton) ships the Python backend alone. For a model
whose platform the server lacks (``pytorch_libtorch``, ``onnxruntime_onnx``,
``tensorrt_plan``) :func:`prepare_model_for_server` writes a derived copy of the model
folder: same name, inputs, outputs, ``max_batch_size``, ``dynamic_batching``,
``instance_group`` count and ``model_warmup``, with ``backend: "python"`` and mmelocal's
generic runner (``model_repo_templates/python_runner/model.py``) copied beside the
artifact in every version folder. Triton's scheduling (dynamic batching, instances,
warmup, explicit load/unload) stays real; only the framework call runs in the stub.

``KIND_GPU`` becomes ``KIND_CPU`` only when there is no GPU, and the result's ``notes``
say so. The user's folder is never modified: files are hard-linked (or copied) into
``out_dir``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import (
    BUILTIN_BACKENDS,
    CLI_FLAGS,
    NATIVE_FORMATS,
    LauncherFlags,
    backend_of,
    default_instance_count,
    execution_env_problem,
    host_limit,
)
from mmelocal.builder.mme_layout import MmeLayout
from mmelocal.builder.model_config import config_to_text, read_config
from mmelocal.errors import ConfigError, ModelLoadError, UnsupportedModelError, UserInputError

logger = logging.getLogger(__name__)

RUNNER_FILE = "model.py"
#: the Python the local launcher's Python-backend stub runs (the one running mmelocal)
STUB_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True, kw_only=True)
class PreparedModel:
    """A model folder ready for the server: where it came from, where it is, what changed."""

    name: str
    source_dir: Path
    served_dir: Path
    backend: str
    derived: bool
    notes: tuple[str, ...] = field(default_factory=tuple)


def required_backend(config: Any) -> str:
    """The backend a ModelConfig needs (``platform`` mapped to its backend name)."""
    return backend_of(config)


def available_backends(backend_directory: Path | None) -> frozenset[str]:
    """Backends a server started with ``--backend-directory`` has (folder names + ensemble)."""
    names = set(BUILTIN_BACKENDS)
    if backend_directory is not None and Path(backend_directory).is_dir():
        names.update(p.name for p in Path(backend_directory).iterdir() if p.is_dir())
    return frozenset(names)


def gpu_available() -> bool:
    """True when a Triton started from here would see an NVIDIA GPU: NVML finds one and
    ``CUDA_VISIBLE_DEVICES``, read as CUDA reads it, leaves one visible
    (:func:`~mmelocal.runtime.visible_gpus.server_gpus`); False without pynvml, a driver
    or a GPU, and with ``CUDA_VISIBLE_DEVICES=`` (empty). A ``CUDA_VISIBLE_DEVICES`` that
    cannot be read exactly is refused (:class:`~mmelocal.errors.UserInputError`)."""
    from mmelocal.runtime.visible_gpus import server_gpus

    return bool(server_gpus().indices)


def runner_template() -> Path:
    """The generic runner file (installed wheel or source tree)."""
    from mmelocal.builder.presets import templates_dir

    candidate = templates_dir() / "python_runner" / RUNNER_FILE
    if not candidate.is_file():
        raise FileNotFoundError(
            f"{candidate} is missing: reinstall mmelocal (pip install --force-reinstall mmelocal)"
        )
    return candidate


def prepare_model_for_server(
    model_dir: Path | str,
    out_dir: Path | str,
    *,
    backends_available: Iterable[str],
    gpu: bool,
    folder_name: str | None = None,
    flags: LauncherFlags = CLI_FLAGS,
) -> PreparedModel:
    """Write a copy of ``model_dir`` into ``out_dir/<folder_name or name>`` that this
    server can load.

    Models whose backend the server has are copied as they are (hard links), except that
    ``KIND_GPU`` groups become ``KIND_CPU`` when ``gpu`` is False. Native models the
    server lacks are derived (module docstring). An existing folder is replaced
    atomically. A model this host cannot run at all (a TensorRT plan without a GPU, a
    TensorFlow model) raises :class:`~mmelocal.errors.UnsupportedModelError` at once.
    Hints name ``flags``: the CLI's by default, the pytest plugin's under pytest.
    """
    source = Path(model_dir)
    config_path = source / "config.pbtxt"
    if not config_path.is_file():
        raise ConfigError(
            "no config.pbtxt: not a Triton model folder", path=config_path, field="config"
        )
    config = read_config(config_path)
    if folder_name is not None:
        config.name = folder_name  # what Triton reads the folder as (MME: the TargetModel)
    elif not config.name:
        config.name = source.name
    name = str(config.name)
    needed = required_backend(config)
    available = frozenset(backends_available)
    notes: list[str] = []
    limit = host_limit(config, gpu=gpu, backends=available, flags=flags)
    if limit is not None:
        raise UnsupportedModelError(limit, model_name=name)
    env_problem = execution_env_problem(config, source, stub_python=STUB_PYTHON)
    if env_problem is not None:
        raise ModelLoadError(env_problem, model_name=name)
    derived = needed not in available
    if derived:
        if not needed:
            raise ConfigError(
                f"model {name!r} sets neither platform nor backend; set one (e.g. platform: "
                '"pytorch_libtorch" or backend: "python")',
                path=config_path,
            )
        if str(config.platform or config.backend) not in NATIVE_FORMATS:
            raise ConfigError(
                f"model {name!r} needs the {needed!r} backend, which this server lacks "
                f"(available: {', '.join(sorted(available))}); start one that has it, e.g. "
                f"{flags.docker}",
                path=config_path,
            )
        _derive_config(config, source, notes, gpu=gpu)
    if not gpu:
        _force_cpu(config, name, notes)
    out_root = Path(out_dir)
    out_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_root))
    try:
        _link_tree(source, staging, skip_config=True)
        if derived:
            runner = runner_template()
            for version in _version_dirs(staging):
                (version / RUNNER_FILE).unlink(missing_ok=True)
                shutil.copy2(runner, version / RUNNER_FILE)
        (staging / "config.pbtxt").write_text(config_to_text(config), encoding="utf-8")
        target = out_root / (folder_name or name)
        _swap_in(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for note in notes:
        logger.info("%s", note)
    return PreparedModel(
        name=name,
        source_dir=source,
        served_dir=target,
        backend="python" if derived else needed,
        derived=derived,
        notes=tuple(notes),
    )


def prepare_repository(
    repo: Path | str,
    out_dir: Path | str,
    *,
    backends_available: Iterable[str],
    gpu: bool,
) -> list[PreparedModel]:
    """:func:`prepare_model_for_server` for every model folder in ``repo``."""
    root = Path(repo)
    if not root.is_dir():
        raise UserInputError(f"model repository {root} is not a folder")
    available = frozenset(backends_available)
    return [
        prepare_model_for_server(child, out_dir, backends_available=available, gpu=gpu)
        for child in sorted(root.iterdir())
        if child.is_dir() and (child / "config.pbtxt").is_file()
    ]


def prepare_layout(
    layout: MmeLayout,
    out_dir: Path | str,
    *,
    backends_available: Iterable[str],
    gpu: bool,
    flags: LauncherFlags = CLI_FLAGS,
) -> list[PreparedModel]:
    """:func:`prepare_model_for_server` for every folder one MME load touches (the served
    model and its ensemble steps), each under the folder name Triton will read; hints name
    ``flags``."""
    available = frozenset(backends_available)
    return [
        prepare_model_for_server(
            folder, out_dir, backends_available=available, gpu=gpu, folder_name=name, flags=flags
        )
        for folder, name in layout.named_folders
    ]


def _derive_config(config: Any, source: Path, notes: list[str], *, gpu: bool) -> None:
    key = str(config.platform or config.backend)
    native, fmt, default_file = NATIVE_FORMATS[key]
    _keep_default_counts(config, native, gpu=gpu)
    artifact = config.default_model_filename or default_file
    config.platform = ""
    config.backend = "python"
    config.default_model_filename = ""
    config.ClearField("optimization")
    config.ClearField("cc_model_filenames")
    config.parameters["mmelocal_artifact_format"].string_value = fmt
    config.parameters["mmelocal_artifact"].string_value = artifact
    config.parameters["mmelocal_source_platform"].string_value = key
    notes.append(
        f"{config.name}: the server has no {key} backend; serving {artifact} through the "
        f"Python backend with mmelocal's {fmt} runner (Triton's batching, instances and "
        "warmup stay real)"
    )
    for version in _version_dirs(source):
        if not (version / artifact).exists():
            notes.append(f"{config.name}: version {version.name} has no {artifact}")


def _keep_default_counts(config: Any, native: str, *, gpu: bool) -> None:
    """State the instance count Triton would give the groups of ``config`` under its own
    ``native`` backend where the Python backend's default (1) differs.

    Triton core (``src/model_config_utils.cc``, r24.10, ``NormalizeInstanceGroup``): a
    config with no group gets one ``KIND_AUTO`` group named after the model; ``KIND_AUTO``
    is ``KIND_CPU`` on a host with no GPU; a group whose count is < 1 then gets
    ``SetDefaultInstanceCount``'s, 2 for a ``KIND_CPU`` group of onnxruntime and
    tensorflow. On a GPU host ``KIND_AUTO`` is ``KIND_GPU`` (1 per GPU, as the Python
    backend's) unless it lists a GPU the host lacks; that case is left to Triton.
    """
    cpu_count = default_instance_count(kind="KIND_CPU", backend=native)
    if cpu_count == 1:  # the Python backend's default too
        return
    from tritonclient.grpc import model_config_pb2 as pb

    kinds = pb.ModelInstanceGroup
    if not config.instance_group and not gpu:
        config.instance_group.add(name=str(config.name), count=cpu_count)
        return
    cpu_kinds = (kinds.KIND_CPU,) if gpu else (kinds.KIND_CPU, kinds.KIND_AUTO)
    for group in config.instance_group:
        if group.count < 1 and group.kind in cpu_kinds:
            group.count = cpu_count


def _force_cpu(config: Any, name: str, notes: list[str]) -> None:
    from tritonclient.grpc import model_config_pb2 as pb

    changed = False
    for group in config.instance_group:
        if group.kind == pb.ModelInstanceGroup.KIND_GPU:
            group.kind = pb.ModelInstanceGroup.KIND_CPU
            del group.gpus[:]
            changed = True
    if changed:
        notes.append(f"{name}: no GPU on this machine: KIND_GPU instance groups run as KIND_CPU")


def _version_dirs(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def _link_tree(source: Path, dest: Path, *, skip_config: bool) -> None:
    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    for entry in source.iterdir():
        if skip_config and entry.name == "config.pbtxt":
            continue
        if entry.is_dir():
            shutil.copytree(entry, dest / entry.name, copy_function=link_or_copy)
        else:
            link_or_copy(str(entry), str(dest / entry.name))


def _swap_in(staging: Path, target: Path) -> None:
    if target.exists():
        old = target.with_name(f".{target.name}-old-{os.getpid()}")
        os.rename(target, old)
        os.rename(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staging, target)


__all__ = [
    "NATIVE_FORMATS",
    "PreparedModel",
    "available_backends",
    "gpu_available",
    "prepare_layout",
    "prepare_model_for_server",
    "prepare_repository",
    "required_backend",
    "runner_template",
]
