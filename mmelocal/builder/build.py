"""One call from a model source to a verified model in a Triton repository.

:func:`build_model` runs the stages in order, reporting each to an optional
``progress(stage, message)`` callback (the library never prints):

``source``      load the model (:func:`~mmelocal.builder.sources.load_source`)
``export``      TorchScript, ONNX, or ONNX then a TensorRT plan
``verify``      artifact vs source on random inputs (:func:`~mmelocal.builder.verify.verify`)
``config``      config.pbtxt from the family preset + the caller's overrides, with the
                signature read from the artifact
``reference``   ``mmelocal_reference.npz``: inputs and the *source* model's outputs,
                keyed ``input:<name>`` / ``output:<name>`` with the artifact's names
``repository``  :func:`~mmelocal.builder.repository.add_model` (atomic swap)

Options are checked before the model is loaded, so a bad value fails at once.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.builder.artifact import FORMATS, ExportedArtifact
from mmelocal.builder.model_config import ConfigOptions
from mmelocal.builder.sources.base import ModelSource
from mmelocal.builder.verify import TOLERANCES, VerifyReport, default_tolerances
from mmelocal.errors import UserInputError

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[str, str], None]
STAGES = ("source", "export", "verify", "config", "reference", "repository")


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """What a build produced: where, with which signature, config and verification."""

    name: str
    model_dir: Path
    config_path: Path
    artifact_path: Path
    artifact: ExportedArtifact
    config: Any
    options: ConfigOptions
    family: str
    source_spec: str
    kind: str
    verify_report: VerifyReport | None
    reference_path: Path | None
    timings_s: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """How :func:`build_model` builds (``mmelocal build``'s flags); checked when created.

    ``config`` is used as given; otherwise the family preset (detected from the model) with
    ``overrides`` (ConfigOptions field names; ``None`` values ignored) applied.
    ``fp16``/``int8``/``trtexec``/``trt_docker_image``/``trt_docker_gpus`` apply to
    ``format="tensorrt"``; ``trt_docker_gpus`` are the GPUs (UUIDs) the image's container
    is given (:func:`~mmelocal.builder.onnx2trt.build_engine`'s ``docker_gpus``).
    ``reference_npz`` (``input:<name>``/``output:<name>`` arrays, artifact names) makes the
    verification compare against those outputs instead of the source model, which is how
    an existing ``.pt``/``.onnx`` file used as it is can still be checked.
    ``weights`` (torchvision/timm: None for random, ``"DEFAULT"`` or a name) and
    ``revision`` (hub names) go to :func:`~mmelocal.builder.sources.load_source`.
    ``atol``/``rtol``: the verification's tolerances (default: fp32's, from
    :data:`~mmelocal.builder.verify.TOLERANCES`; None means the same).
    """

    name: str | None = None
    format: str = "torchscript"
    task: str | None = None
    seq_len: int = 128
    weights: str | None = None
    revision: str | None = None
    config: ConfigOptions | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    verify: bool = True
    atol: float | None = TOLERANCES["fp32"][0]
    rtol: float | None = TOLERANCES["fp32"][1]
    version: int = 1
    fp16: bool = False
    int8: bool = False
    trtexec: str | None = None
    trt_docker_image: str | None = None
    trt_docker_gpus: tuple[str, ...] | None = None
    opset: int | None = None
    reference_npz: Path | str | None = None

    def __post_init__(self) -> None:
        _check_args(
            self.format, self.atol, self.rtol, self.version, self.seq_len, self.fp16, self.int8
        )
        _check_name(self.name)

    @property
    def given_overrides(self) -> dict[str, Any]:
        """The overrides that are set (``None`` values dropped)."""
        return {k: v for k, v in self.overrides.items() if v is not None}


def build_model(
    spec: str | ModelSource,
    *,
    repo: Path | str,
    options: BuildOptions | None = None,
    progress: ProgressCallback | None = None,
) -> BuildResult:
    """Build ``spec`` into ``repo/<name>/`` as ``options`` say; return what was built."""
    from mmelocal.builder import presets

    report = progress or (lambda stage, message: None)
    opt = options or BuildOptions()
    _check_repo(repo)
    overrides = opt.given_overrides
    if opt.config is None:
        _precheck_overrides(spec if isinstance(spec, str) else spec.family, overrides)
    if opt.format == "tensorrt":
        from mmelocal.builder.onnx2trt import choose_builder

        choose_builder(trtexec=opt.trtexec, docker_image=opt.trt_docker_image)
    timings: dict[str, float] = {}
    clock = _Clock(timings, report)

    with clock("source", f"loading {spec if isinstance(spec, str) else spec.spec}"):
        source = spec if isinstance(spec, ModelSource) else _load(spec, opt)
    family = presets.detect_family(source.family or source.name)
    opts = opt.config or presets.preset_options(family, **overrides)
    model_name = opt.name or source.name
    repo_path = Path(repo)
    notes = list(source.notes)

    with tempfile.TemporaryDirectory(prefix="mmelocal-build-") as tmp:
        work = Path(tmp)
        with clock("export", f"exporting {source.name} to {opt.format}"):
            artifact, onnx_artifact = _export(source, work, opts, opt)
        notes.extend(artifact.notes)
        verify_report = None
        if opt.verify:
            with clock("verify", "comparing the artifact with the source"):
                verify_report = _verify(source, artifact, onnx_artifact, opts, opt)
            notes.extend(verify_report.notes)
        with clock("config", f"writing config.pbtxt ({family} preset)"):
            cfg = _config(model_name, artifact, source, opts)
        with clock("reference", "recording reference outputs of the source"):
            reference = _reference_npz(source, artifact, opts)
        with clock("repository", f"adding {model_name} to {repo_path}"):
            from mmelocal.builder.repository import REFERENCE_FILE, add_model

            try:
                model_dir = add_model(
                    repo_path,
                    name=model_name,
                    config=cfg,
                    artifact=artifact.path,
                    version=opt.version,
                    extra_files={REFERENCE_FILE: reference},
                )
            except OSError as exc:
                raise UserInputError(f"cannot write the model into {repo_path}: {exc}") from None
    version_dir = model_dir / str(opt.version)
    return BuildResult(
        name=model_name,
        model_dir=model_dir,
        config_path=model_dir / "config.pbtxt",
        artifact_path=version_dir / artifact.file_name,
        artifact=_moved(artifact, version_dir),
        config=cfg,
        options=opts,
        family=family,
        source_spec=source.spec,
        kind=source.kind,
        verify_report=verify_report,
        reference_path=model_dir / REFERENCE_FILE,
        timings_s=dict(timings),
        notes=tuple(dict.fromkeys(notes)),
    )


def _moved(artifact: ExportedArtifact, version_dir: Path) -> ExportedArtifact:
    """``artifact`` with its paths in the repository's version folder."""
    return dataclasses.replace(
        artifact,
        path=version_dir / artifact.file_name,
        extra_files=tuple(version_dir / p.name for p in artifact.extra_files),
    )


def _check_name(name: str | None) -> None:
    bad = name is not None and (
        not name or "/" in name or "\\" in name or name.startswith(".") or not name.isprintable()
    )
    if bad:
        raise UserInputError(
            f"name must be a folder name (printable, no '/', not starting with '.'), got {name!r}"
        )


def _check_repo(repo: Path | str) -> None:
    if Path(repo).exists() and not Path(repo).is_dir():
        raise UserInputError(f"repo {repo} exists and is not a folder")


def _check_args(
    format: str,
    atol: float | None,
    rtol: float | None,
    version: int,
    seq_len: int,
    fp16: bool,
    int8: bool,
) -> None:
    if format not in FORMATS:
        raise UserInputError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    for label, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and not value >= 0:
            raise UserInputError(f"{label} must be >= 0, got {value}")
    if not isinstance(version, int) or version < 1:
        raise UserInputError(f"version must be an integer >= 1, got {version!r}")
    if seq_len < 1:
        raise UserInputError(f"seq_len must be >= 1, got {seq_len}")
    if (fp16 or int8) and format != "tensorrt":
        raise UserInputError(f"fp16/int8 apply to format tensorrt only, got format {format!r}")


def _precheck_overrides(hint: str | None, overrides: Mapping[str, Any]) -> None:
    """Fail before loading when the overrides cannot fit the family the spec suggests.

    When the spec says nothing about the family (a bare folder), an error is raised only
    if the overrides fit no preset at all; the real family is checked after loading.
    """
    from mmelocal.builder import presets
    from mmelocal.errors import ConfigError

    guess = presets.detect_family(hint)
    if guess != presets.GENERIC:
        presets.preset_options(guess, **overrides)
        return
    first: ConfigError | None = None
    for family in presets.list_presets():
        try:
            presets.preset_options(family, **overrides)
        except ConfigError as exc:
            first = first or exc
        else:
            return
    if first is not None:
        raise first


def _load(spec: str, opt: BuildOptions) -> ModelSource:
    from mmelocal.builder.sources import load_source

    return load_source(
        spec, task=opt.task, seq_len=opt.seq_len, weights=opt.weights, revision=opt.revision
    )


def _export(
    source: ModelSource, work: Path, opts: ConfigOptions, opt: BuildOptions
) -> tuple[ExportedArtifact, ExportedArtifact | None]:
    if opt.format == "torchscript":
        from mmelocal.builder.torch2torchscript import export_torchscript

        return export_torchscript(source, work / "model.pt"), None
    from mmelocal.builder.torch2onnx import export_onnx

    onnx_artifact = export_onnx(source, work / "onnx" / "model.onnx", opset=opt.opset)
    if opt.format == "onnx":
        return onnx_artifact, None
    from mmelocal.builder.onnx2trt import build_engine, plan_signature

    max_batch = max(opts.max_batch_size, 1)
    opt_batch = max((b for b in opts.preferred_batch_sizes if b <= max_batch), default=max_batch)
    seq = source.seq_len
    plan = build_engine(
        onnx_artifact.path,
        work / "model.plan",
        fp16=opt.fp16,
        int8=opt.int8,
        min_batch=1,
        opt_batch=opt_batch,
        max_batch=max_batch,
        seq_lens=(1, seq, seq) if seq is not None else None,
        trtexec=opt.trtexec,
        docker_image=opt.trt_docker_image,
        docker_gpus=opt.trt_docker_gpus,
    )
    precision = "int8" if opt.int8 else "fp16" if opt.fp16 else "fp32"
    signature = onnx_artifact.signature
    read = plan_signature(plan)
    if read is not None:
        signature = read.without_batch() if onnx_artifact.batch_dynamic else read
    trt = ExportedArtifact(
        path=plan,
        format="tensorrt",
        signature=signature,
        batch_dynamic=onnx_artifact.batch_dynamic,
        notes=(
            f"TensorRT plan ({precision}) for batch 1..{max_batch}"
            + (f", sequence 1..{seq}" if seq is not None else ""),
        ),
    )
    return trt, onnx_artifact


def _verify(
    source: ModelSource,
    artifact: ExportedArtifact,
    onnx_artifact: ExportedArtifact | None,
    opts: ConfigOptions,
    opt: BuildOptions,
) -> VerifyReport:
    from mmelocal.builder.verify import verify

    target = onnx_artifact if artifact.format == "tensorrt" and onnx_artifact else artifact
    a_def, r_def = default_tolerances("fp32")
    result = verify(
        source,
        target,
        atol=a_def if opt.atol is None else opt.atol,
        rtol=r_def if opt.rtol is None else opt.rtol,
        max_batch_size=opts.max_batch_size,
        reference_npz=opt.reference_npz,
    )
    if artifact.format == "tensorrt":
        a16, r16 = default_tolerances("fp16" if opt.fp16 else "fp32")
        note = (
            f"the TensorRT plan itself runs only on a GPU (expect diffs within "
            f"atol {a16:g}, rtol {r16:g}); its ONNX was verified"
        )
        result = dataclasses.replace(result, notes=(*result.notes, note))
    return result


def _config(name: str, artifact: ExportedArtifact, source: ModelSource, opts: ConfigOptions) -> Any:
    from mmelocal.builder.model_config import build_model_config

    signature = artifact.signature_for(opts.max_batch_size)
    warmup: dict[str, list[int]] = {}
    for readable, tensor in source.example_inputs.items():
        shape = [int(d) for d in tensor.shape]
        dims = shape[1:] if opts.max_batch_size > 0 else [1, *shape[1:]]
        warmup[artifact.artifact_name(readable)] = dims
    return build_model_config(
        name=name,
        platform=artifact.platform,
        signature=signature,
        options=opts,
        warmup_dims=warmup,
    )


def _reference_npz(source: ModelSource, artifact: ExportedArtifact, opts: ConfigOptions) -> bytes:
    batch = min(2, opts.max_batch_size) if opts.max_batch_size > 0 else 1
    inputs = source.make_inputs(batch, source.seq_len, seed=7)
    outputs = source.run(inputs)
    arrays: dict[str, np.ndarray] = {}
    for readable, tensor in inputs.items():
        value = tensor if isinstance(tensor, np.ndarray) else tensor.detach().cpu().numpy()
        arrays[f"input:{artifact.artifact_name(readable)}"] = value
    for readable, value in outputs.items():
        arrays[f"output:{artifact.artifact_name(readable)}"] = value
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


class _Clock:
    """Times each stage and reports its start to the progress callback."""

    def __init__(self, timings: dict[str, float], report: ProgressCallback) -> None:
        self.timings = timings
        self.report = report

    def __call__(self, stage: str, message: str) -> _Stage:
        return _Stage(self, stage, message)


class _Stage:
    def __init__(self, clock: _Clock, stage: str, message: str) -> None:
        self.clock, self.stage, self.message = clock, stage, message
        self.start = 0.0

    def __enter__(self) -> None:
        self.clock.report(self.stage, self.message)
        logger.info("%s: %s", self.stage, self.message)
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.clock.timings[self.stage] = time.perf_counter() - self.start


__all__ = ["STAGES", "BuildOptions", "BuildResult", "ProgressCallback", "build_model"]
