"""ONNX -> TensorRT plan for Triton's ``tensorrt_plan``.

Three ways to run the TensorRT builder, tried in this order:

1. the TensorRT Python API, when ``tensorrt`` is importable;
2. ``trtexec`` found on ``PATH`` (or given as ``trtexec=``);
3. ``trtexec`` inside a Docker image the caller names (``docker_image=``, e.g.
   ``nvcr.io/nvidia/tensorrt:24.08-py3``), run through the docker SDK with the GPUs, asked
   for as the Docker launcher asks (:mod:`mmelocal.docker_host`), on an engine of this
   machine (an engine on another machine would mount its own folders: refused).

The first two build on the first GPU ``CUDA_VISIBLE_DEVICES`` leaves (CUDA reads it in this
process, or in trtexec, which inherits it). A container inherits no environment: it is given
``docker_gpus``, the UUIDs of the GPUs chosen (the caller reads ``CUDA_VISIBLE_DEVICES``
with :func:`mmelocal.runtime.visible_gpus.container_gpus`, as the Docker launcher does), in
its device request and its ``CUDA_VISIBLE_DEVICES``, so that trtexec builds on the same
card; without them it gets every GPU, and a ``CUDA_VISIBLE_DEVICES`` set here is refused
rather than built on another card.

One optimisation profile covers every dynamic axis: axis 0 takes
``min/opt/max_batch``; other dynamic axes (the sequence of a text model) take
``seq_lens=(min, opt, max)``. A plan is tied to the GPU model and TensorRT version it
was built with, so build it on (or for) the card the endpoint uses. ``int8`` without a
calibration cache gives an engine fit for speed and memory measurements only
(placeholder scales), not for accuracy. TensorRT 10 keeps ONNX's int64 token inputs;
with the Python API the plan's real I/O data types are read back
(:func:`plan_signature`), otherwise the ONNX signature is used. The pure parts
(:func:`optimization_profile`, :func:`trtexec_args`, :func:`choose_builder`) are
testable anywhere; the engine build itself needs an NVIDIA GPU.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.builder.runners import first_line
from mmelocal.builder.tensors import Signature, inspect_onnx
from mmelocal.docker_host import engine_gpus, gpu_refusal_hint, refuse_remote_engine
from mmelocal.errors import ExportError, MissingDependencyError, UserInputError

logger = logging.getLogger(__name__)

BUILDERS = ("python", "trtexec", "docker")
DEFAULT_WORKSPACE_BYTES = 4 << 30
DEFAULT_TIMEOUT_S = 3600.0

Shape = tuple[int, ...]
#: why a build in Docker needs the engine on this machine (:func:`refuse_remote_engine`)
_REMOTE_NEEDS = "a TensorRT build in Docker mounts this machine's ONNX and output folders"
_REMOTE_ALSO = "; or build without Docker where the GPU is (the tensorrt package, or trtexec)"


@dataclass(frozen=True, kw_only=True)
class ProfileShapes:
    """The (min, opt, max) shape of one input, batch dim included."""

    name: str
    min_shape: Shape
    opt_shape: Shape
    max_shape: Shape

    def __post_init__(self) -> None:
        shapes = (self.min_shape, self.opt_shape, self.max_shape)
        if len({len(s) for s in shapes}) != 1:
            raise UserInputError(f"profile shapes of {self.name!r} must have one rank")
        for lo, mid, hi in zip(*shapes, strict=True):
            if not 1 <= lo <= mid <= hi:
                raise UserInputError(
                    f"profile of {self.name!r} needs 1 <= min <= opt <= max on every axis, "
                    f"got {list(self.min_shape)} / {list(self.opt_shape)} / {list(self.max_shape)}"
                )


def optimization_profile(
    signature: Signature,
    *,
    min_batch: int = 1,
    opt_batch: int | None = None,
    max_batch: int = 8,
    seq_lens: tuple[int, int, int] | None = None,
) -> tuple[ProfileShapes, ...]:
    """One profile entry per input of a full (batch-included) ONNX signature.

    ``opt_batch`` defaults to ``max_batch``. A dynamic axis other than the batch axis
    needs ``seq_lens``.
    """
    opt = max_batch if opt_batch is None else opt_batch
    if not 1 <= min_batch <= opt <= max_batch:
        raise UserInputError(
            f"batch sizes need 1 <= min_batch <= opt_batch <= max_batch, got "
            f"{min_batch} / {opt} / {max_batch}"
        )
    entries = []
    for spec in signature.inputs:
        mins, opts, maxs = [], [], []
        for axis, dim in enumerate(spec.dims):
            if dim != -1:
                lo = mid = hi = dim
            elif axis == 0:
                lo, mid, hi = min_batch, opt, max_batch
            elif seq_lens is not None:
                lo, mid, hi = seq_lens
            else:
                raise UserInputError(
                    f"input {spec.name!r} has a dynamic axis {axis} besides the batch; "
                    "give seq_lens=(min, opt, max) for it"
                )
            mins.append(lo)
            opts.append(mid)
            maxs.append(hi)
        entries.append(
            ProfileShapes(
                name=spec.name, min_shape=tuple(mins), opt_shape=tuple(opts), max_shape=tuple(maxs)
            )
        )
    return tuple(entries)


def trtexec_args(
    onnx_path: str,
    plan_path: str,
    profile: Sequence[ProfileShapes],
    *,
    fp16: bool = False,
    int8: bool = False,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
    trtexec: str = "trtexec",
) -> list[str]:
    """The ``trtexec`` command line that builds ``plan_path`` from ``onnx_path``."""

    def shapes(attr: str) -> str:
        return ",".join(f"{p.name}:{'x'.join(str(d) for d in getattr(p, attr))}" for p in profile)

    args = [trtexec, f"--onnx={onnx_path}", f"--saveEngine={plan_path}"]
    if profile:
        args += [
            f"--minShapes={shapes('min_shape')}",
            f"--optShapes={shapes('opt_shape')}",
            f"--maxShapes={shapes('max_shape')}",
        ]
    args.append(f"--memPoolSize=workspace:{max(workspace_bytes >> 20, 1)}M")
    if fp16:
        args.append("--fp16")
    if int8:
        args.append("--int8")
    args.append("--skipInference")
    return args


def tensorrt_installed() -> bool:
    """True when the TensorRT Python package can be imported (it is not imported here)."""
    return importlib.util.find_spec("tensorrt") is not None


def find_trtexec(name: str = "trtexec") -> str | None:
    """Full path of ``trtexec`` (or the given name/path) on ``PATH``, or None."""
    return shutil.which(name)


def choose_builder(
    *, trtexec: str | None = None, docker_image: str | None = None
) -> tuple[str, str | None]:
    """``("python", None)``, ``("trtexec", path)`` or ``("docker", image)``; else ExportError."""
    if tensorrt_installed():
        return "python", None
    found = find_trtexec(trtexec or "trtexec")
    if found:
        return "trtexec", found
    if docker_image:
        return "docker", docker_image
    raise ExportError(
        "TensorRT is not available here: install the Python package (pip install "
        "'mmelocal[tensorrt]'), put trtexec on PATH, or name a Docker image that has it "
        "(e.g. nvcr.io/nvidia/tensorrt:24.08-py3); building a plan also needs an NVIDIA GPU"
    )


def build_engine(
    onnx_path: Path | str,
    out_path: Path | str,
    *,
    fp16: bool = False,
    int8: bool = False,
    min_batch: int = 1,
    opt_batch: int | None = None,
    max_batch: int = 8,
    seq_lens: tuple[int, int, int] | None = None,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
    trtexec: str | None = None,
    docker_image: str | None = None,
    docker_gpus: Sequence[str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Path:
    """Build a TensorRT plan from ``onnx_path`` into ``out_path``; return ``out_path``.
    ``docker_gpus``: the GPUs (UUIDs) a ``docker_image`` build is given (see the module)."""
    onnx_file = Path(onnx_path)
    out = Path(out_path)
    full, _ = inspect_onnx(onnx_file, strip_batch=False)
    profile = optimization_profile(
        full, min_batch=min_batch, opt_batch=opt_batch, max_batch=max_batch, seq_lens=seq_lens
    )
    how, where = choose_builder(trtexec=trtexec, docker_image=docker_image)
    out.parent.mkdir(parents=True, exist_ok=True)
    logger.info("building TensorRT plan %s with %s", out, how)
    if how == "python":
        _build_python(onnx_file, out, profile, fp16=fp16, int8=int8, workspace=workspace_bytes)
    elif how == "trtexec":
        assert where is not None
        cmd = trtexec_args(
            str(onnx_file),
            str(out),
            profile,
            fp16=fp16,
            int8=int8,
            workspace_bytes=workspace_bytes,
            trtexec=where,
        )
        _run_local(cmd, timeout_s)
    else:
        assert where is not None
        gpus = _docker_gpus(docker_gpus)
        spec = docker_run_spec(
            where,
            onnx_file,
            out,
            profile,
            fp16=fp16,
            int8=int8,
            workspace=workspace_bytes,
            gpus=gpus,
        )
        _run_docker(spec, gpus)
    if not out.is_file() or out.stat().st_size == 0:
        raise ExportError(f"the TensorRT build finished but wrote no plan at {out}")
    return out


def _build_python(
    onnx_file: Path,
    out: Path,
    profile: Sequence[ProfileShapes],
    *,
    fp16: bool,
    int8: bool,
    workspace: int,
) -> None:
    try:
        import tensorrt as trt
    except ImportError:
        raise MissingDependencyError(
            "tensorrt", extra="tensorrt", feature="TensorRT plans"
        ) from None
    trt_logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(trt_logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, trt_logger)
    if not parser.parse_from_file(str(onnx_file)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ExportError(f"TensorRT cannot parse {onnx_file}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if int8:
        config.set_flag(trt.BuilderFlag.INT8)
    trt_profile = builder.create_optimization_profile()
    for p in profile:
        trt_profile.set_shape(p.name, p.min_shape, p.opt_shape, p.max_shape)
    config.add_optimization_profile(trt_profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ExportError(f"TensorRT could not build an engine from {onnx_file} (see log)")
    out.write_bytes(bytes(serialized))


def _run_local(cmd: list[str], timeout_s: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ExportError(f"trtexec did not finish within {timeout_s:.0f} s") from None
    except OSError as exc:
        raise ExportError(f"cannot run {cmd[0]}: {exc}") from None
    if proc.returncode != 0:
        raise ExportError(
            f"trtexec failed (exit {proc.returncode}): {_tail(proc.stdout + proc.stderr)}"
        )


def docker_run_spec(
    image: str,
    onnx_file: Path,
    out: Path,
    profile: Sequence[ProfileShapes],
    *,
    fp16: bool,
    int8: bool,
    workspace: int,
    gpus: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``docker.containers.run`` (paths mounted under ``/mmelocal``),
    but the device requests (:func:`_run_docker` adds them); ``gpus`` (device ids: UUIDs, in
    CUDA's order) are the container's ``CUDA_VISIBLE_DEVICES`` too."""
    src_dir, out_dir = onnx_file.resolve().parent, out.resolve().parent
    volumes = {
        str(src_dir): {"bind": "/mmelocal/in", "mode": "ro"},
        str(out_dir): {"bind": "/mmelocal/out", "mode": "rw"},
    }
    command = trtexec_args(
        f"/mmelocal/in/{onnx_file.name}",
        f"/mmelocal/out/{out.name}",
        profile,
        fp16=fp16,
        int8=int8,
        workspace_bytes=workspace,
    )
    spec = {
        "image": image,
        "command": command,
        "volumes": volumes,
        "remove": True,
        "stdout": True,
        "stderr": True,
    }
    if gpus is not None:
        spec["environment"] = {"CUDA_VISIBLE_DEVICES": ",".join(gpus)}
    return spec


def _docker_gpus(gpus: Sequence[str] | None) -> tuple[str, ...] | None:
    """``gpus`` checked (None: every GPU, unless ``CUDA_VISIBLE_DEVICES`` chooses here)."""
    if gpus is None:
        value = os.environ.get("CUDA_VISIBLE_DEVICES")
        if value is not None:
            raise UserInputError(
                f"CUDA_VISIBLE_DEVICES={value} chooses the GPU a TensorRT plan is built on, "
                "and a container does not inherit it: pass those GPUs' UUIDs as docker_gpus "
                "(mmelocal.runtime.visible_gpus.container_gpus() reads the variable as the "
                "Docker launcher does; mmelocal build does it for you), or unset it"
            )
        return None
    ids = tuple(str(g) for g in gpus)
    if not ids or not all(ids):
        raise UserInputError(
            f"docker_gpus names no GPU ({list(gpus)!r}), and a TensorRT plan is built on one: "
            "choose a GPU (CUDA_VISIBLE_DEVICES, by number or UUID)"
        )
    return ids


def _run_docker(spec: dict[str, Any], gpus: Sequence[str] | None = None) -> None:
    """Run the container of ``spec`` (:func:`docker_run_spec`) with ``gpus`` (device ids:
    UUIDs; None: every GPU), asked for as the Docker launcher asks
    (:meth:`~mmelocal.docker_host.EngineGpus.requests`: CDI's names where the engine lists
    them, else ``--gpus``'s), on an engine of this machine (the folders are mounted)."""
    try:
        import docker
    except ImportError:
        raise MissingDependencyError(
            "docker", extra="docker", feature="trtexec in Docker"
        ) from None
    refuse_remote_engine(needs=_REMOTE_NEEDS, also=_REMOTE_ALSO)
    image = spec["image"]
    try:
        client = docker.from_env()
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise ExportError(f"Docker image {image} is not present: docker pull {image}") from None
    except Exception as exc:
        raise ExportError(f"cannot reach the Docker engine: {first_line(exc)}") from None
    requests = engine_gpus(client).requests(None if gpus is None else [(g, None) for g in gpus])
    try:
        client.containers.run(**spec, device_requests=requests)
    except docker.errors.ContainerError as exc:
        logs = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        raise ExportError(
            f"trtexec in {image} failed (exit {exc.exit_status}): {_tail(logs)}"
        ) from None
    except Exception as exc:
        raise ExportError(
            f"trtexec in {image} could not run: {first_line(exc)}{gpu_refusal_hint(exc, requests)}"
        ) from None


def _tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def plan_signature(plan_path: Path | str) -> Signature | None:
    """Names, data types and dims (batch included) of a plan's I/O, via the Python API.

    Returns None when TensorRT or a GPU is not available to deserialize the plan.
    """
    try:
        import tensorrt as trt
    except ImportError:
        return None
    from mmelocal.builder.tensors import TensorSpec, numpy_to_triton

    try:
        runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
        engine = runtime.deserialize_cuda_engine(Path(plan_path).read_bytes())
        inputs: list[TensorSpec] = []
        outputs: list[TensorSpec] = []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            spec = TensorSpec(
                name,
                numpy_to_triton(trt.nptype(engine.get_tensor_dtype(name))),
                tuple(int(d) for d in engine.get_tensor_shape(name)),
            )
            is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            (inputs if is_input else outputs).append(spec)
    except Exception as exc:  # no GPU, or an older TensorRT API
        logger.info("cannot read the plan's signature (%s); using the ONNX one", first_line(exc))
        return None
    return Signature(inputs=tuple(inputs), outputs=tuple(outputs))


def profile_as_dict(profile: Sequence[ProfileShapes]) -> Mapping[str, tuple[Shape, Shape, Shape]]:
    """``{input: (min, opt, max)}`` for reports."""
    return {p.name: (p.min_shape, p.opt_shape, p.max_shape) for p in profile}


__all__ = [
    "BUILDERS",
    "ProfileShapes",
    "build_engine",
    "choose_builder",
    "docker_run_spec",
    "find_trtexec",
    "optimization_profile",
    "plan_signature",
    "profile_as_dict",
    "tensorrt_installed",
    "trtexec_args",
]
