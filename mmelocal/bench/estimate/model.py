"""``mmelocal capacity estimate``: trace what the user named and estimate its GPU footprint.

What can be named: a builder source (``torchvision:resnet50``, ``minilm``, a Hugging Face
folder or hub name, a ``.pt``/``.onnx`` file), a built model folder (``config.pbtxt`` +
``1/model.pt`` or ``1/model.onnx``), a repository of such folders, or an MME tarball. A
source's batches come from its family preset (with the user's overrides), a built model's
from its ``config.pbtxt``.
Nothing runs on a device: the module moves to the ``meta`` device and is traced on fake
tensors; an ONNX file is read by shape inference. See :mod:`mmelocal.bench.estimate`.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mmelocal.bench.capacity.projection import GpuSpec, load_gpus
from mmelocal.bench.estimate.activations import (
    ActivationTrace,
    Weights,
    onnx_weights,
    torch_weights,
    trace_onnx,
    trace_torch,
)
from mmelocal.bench.estimate.core import (
    PRECISION_BYTES,
    Batches,
    Estimate,
    Measured,
    ModelFacts,
    check_precision,
    estimate_from_facts,
)
from mmelocal.bench.estimate.instances import gpu_instances
from mmelocal.builder.backends import PLATFORM_FORMATS
from mmelocal.errors import UserInputError
from mmelocal.facts.sagemaker import MEMORY_THRESHOLD

logger = logging.getLogger(__name__)

_PLATFORM_FORMAT = PLATFORM_FORMATS
_TRITON_DTYPES = {
    "TYPE_FP32": "float32",
    "TYPE_FP16": "float16",
    "TYPE_BF16": "bfloat16",
    "TYPE_FP64": "float64",
    "TYPE_INT64": "int64",
    "TYPE_INT32": "int32",
    "TYPE_INT8": "int8",
    "TYPE_UINT8": "uint8",
    "TYPE_BOOL": "bool",
}


def estimate_model(
    source: str | Path,
    *,
    model_format: str = "torchscript",
    precision: str | None = None,
    seq_len: int = 128,
    overrides: Mapping[str, Any] | None = None,
    profile_max_batch: int | None = None,
    threshold: float = MEMORY_THRESHOLD,
    gpus: Sequence[GpuSpec] | None = None,
    instance_types: Sequence[str] = (),
    request_batch: int = 1,
) -> Estimate:
    """Estimate the footprint of ``source`` and the copies per card (module docstring).

    ``request_batch`` is the batch the served requests carry (the activation term is sized
    for the largest of it, the warm-up and the batch-1 load)."""
    from dataclasses import replace

    from mmelocal.bench.sources import is_prebuilt

    started = time.monotonic()
    if is_prebuilt(source):
        with tempfile.TemporaryDirectory(prefix="mmelocal-estimate-") as tmp:
            facts, fmt, prec, batches = _prebuilt_facts(
                Path(source), Path(tmp), precision, seq_len, profile_max_batch, request_batch
            )
    else:
        prec = precision or "fp32"
        check_precision(model_format, prec)
        fmt = model_format
        facts, batches = _source_facts(
            str(source), fmt, prec, seq_len, dict(overrides or {}), profile_max_batch, request_batch
        )
    estimate = estimate_from_facts(
        facts,
        source=str(source),
        model_format=fmt,
        precision=prec,
        batches=batches,
        threshold=threshold,
    )
    estimate = estimate.with_cards(gpus if gpus is not None else load_gpus(), instance_types)
    return replace(estimate, elapsed_s=time.monotonic() - started)


def repository_models(path: Path | str) -> list[Path]:
    """The model folders (with ``config.pbtxt``) directly inside a repository root; empty
    for anything else (a model folder, a tarball, a source spec)."""
    root = Path(path)
    if not root.is_dir() or (root / "config.pbtxt").is_file():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "config.pbtxt").is_file())


def estimate_many(source: str | Path, **options: Any) -> list[Estimate]:
    """:func:`estimate_model` for ``source``, or for every model of a repository root."""
    models = repository_models(source)
    return [estimate_model(m, **options) for m in models] or [estimate_model(source, **options)]


def trace_module(
    module: Any,
    example_inputs: Mapping[str, Any],
    batches: Batches,
    *,
    precision: str = "fp32",
    notes: tuple[str, ...] = (),
    device: str = "meta",
) -> ModelFacts:
    """Weights and activation peaks of ``module`` at every batch in ``batches``.

    ``example_inputs`` (any batch, any device; passed positionally, in order, as the
    builder calls a source) give each input's shape past the batch axis and its dtype. The
    module is moved to ``device``: ``meta`` (its memory is freed), or ``cpu`` for a
    TorchScript module that cannot move to meta (its tensors are then made fake as the
    trace meets them: nothing is computed either way).
    """
    import torch

    float_bytes = PRECISION_BYTES[precision]
    module = module.to(device).eval()

    def trace(batch: int) -> ActivationTrace:
        inputs = {
            name: torch.empty((batch, *tuple(t.shape)[1:]), dtype=t.dtype, device=device)
            for name, t in example_inputs.items()
        }
        return trace_torch(module, tuple(inputs.values()), float_bytes=float_bytes)

    return _facts(
        batches, trace, lambda size: torch_weights(module, float_bytes=size), float_bytes, notes
    )


def trace_onnx_file(
    path: Path, batches: Batches, *, precision: str = "fp32", dynamic_dim: int = 128
) -> ModelFacts:
    """Weights and activation peaks of the ONNX file at ``path`` (shape inference)."""
    float_bytes = PRECISION_BYTES[precision]
    return _facts(
        batches,
        lambda batch: trace_onnx(
            path, batch_size=batch, dynamic_dim=dynamic_dim, float_bytes=float_bytes
        ),
        lambda size: onnx_weights(path, float_bytes=size),
        float_bytes,
    )


def _facts(
    batches: Batches,
    trace: Callable[[int], ActivationTrace],
    weights: Callable[[int], Weights],
    float_bytes: int,
    notes: tuple[str, ...] = (),
) -> ModelFacts:
    """The facts from ``trace`` at every batch and ``weights`` at ``float_bytes`` (and fp32)."""
    activations: dict[int, int] = {}
    blocks: dict[int, tuple[int, ...]] = {}
    unknown: list[str] = []
    convs = overlapping = 0
    for batch in batches.distinct():
        found = trace(batch)
        activations[batch] = found.peak_bytes
        blocks[batch] = found.peak_blocks
        convs, overlapping = found.convolutions, found.overlapping_convolutions
        if found.unknown_tensors:
            unknown.append(
                f"batch {batch}: {found.unknown_tensors} tensor(s) without an inferred shape "
                "are not counted (the activation estimate is low)"
            )
    counted = weights(float_bytes)
    return ModelFacts(
        params=counted.params,
        weight_bytes=counted.total_bytes,
        weight_bytes_fp32=weights(4).total_bytes,
        activation_bytes=activations,
        convolutions=convs,
        overlapping_convolutions=overlapping,
        notes=(*notes, *dict.fromkeys(unknown)),
        weight_blocks=counted.blocks,
        activation_blocks=blocks,
    )


def measured_from_capacity(result: Any) -> Measured:
    """A :class:`Measured` from a capacity result (``CapacityResult``)."""
    per_copy = result.per_model_mean_bytes
    if per_copy is None:
        raise UserInputError(
            f"the capacity result for {result.source} loaded no copy; nothing to compare"
        )
    return Measured(
        per_copy_bytes=int(per_copy),
        baseline_bytes=int(result.baseline_bytes),
        count=int(result.count),
        total_bytes=int(result.total_bytes),
        probe=str(result.probe),
        origin=str(result.label or result.source),
        model_format=str(getattr(result, "model_format", "") or ""),
        precision=str(getattr(result, "precision", "") or ""),
    )


def _source_facts(
    spec: str,
    fmt: str,
    precision: str,
    seq_len: int,
    overrides: dict[str, Any],
    profile_max: int | None,
    request: int = 1,
) -> tuple[ModelFacts, Batches]:
    from mmelocal.builder.presets import detect_family
    from mmelocal.builder.sources import load_source
    from mmelocal.builder.sources.base import suggest_name

    config_json = _hf_config(spec)
    source = None
    if config_json is not None:
        module, example, family = _config_model(spec, config_json, seq_len)
        built = (
            "the base model built from its config.json on the meta device (no weights read; "
            "a task head is not counted); "
        )
    else:
        source = load_source(spec, seq_len=seq_len)
        module, example, built = source.module, source.example_inputs, ""
        family = detect_family(source.family or source.name)
    name = source.name if source is not None else suggest_name(Path(spec).name)
    batches = _preset_batches(
        family, overrides, profile_max, request, fmt=fmt, name=name, source=spec
    )
    if source is not None and source.module is None and source.file is not None:
        return trace_onnx_file(source.file, batches, precision=precision, dynamic_dim=seq_len), (
            batches
        )
    notes = (f"{spec}: {built}batches from the {family} preset",)
    return trace_module(module, example, batches, precision=precision, notes=notes), batches


def _hf_config(spec: str) -> Path | None:
    """The ``config.json`` of a Hugging Face folder or hub name (only that file is fetched:
    the estimate needs shapes, not weights); None for any other source."""
    from mmelocal.builder.sources.huggingface import MINILM_NAMES, looks_like_hub_name

    path = Path(spec).expanduser()
    if spec.lower() in MINILM_NAMES or ":" in spec:
        return None
    if path.is_dir():
        return path / "config.json" if (path / "config.json").is_file() else None
    if path.exists() or not looks_like_hub_name(spec):
        return None
    from mmelocal.builder.sources.hub import fetch_hub_file

    return fetch_hub_file(spec, ("config.json",), spec=spec)


def _config_model(spec: str, config_json: Path, seq_len: int) -> tuple[Any, Mapping[str, Any], str]:
    """The base model of a Hugging Face config, built on the meta device (no weights read),
    an example input for it, and its family."""
    import torch
    import transformers

    from mmelocal.builder.presets import detect_family

    config = transformers.AutoConfig.from_pretrained(str(config_json.parent))
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    family = detect_family(getattr(config, "model_type", None) or spec)
    if getattr(model, "main_input_name", "input_ids") == "pixel_values":
        size = int(getattr(config, "image_size", 224) or 224)
        channels = int(getattr(config, "num_channels", 3) or 3)
        example = {"pixel_values": torch.empty(1, channels, size, size, device="meta")}
    else:
        ids = torch.empty(1, seq_len, dtype=torch.long, device="meta")
        example = {"input_ids": ids, "attention_mask": torch.empty_like(ids)}
    return model, example, family


def _preset_batches(
    family: str,
    overrides: dict[str, Any],
    profile_max: int | None,
    request: int,
    *,
    fmt: str,
    name: str,
    source: str,
) -> Batches:
    """The batches the build preset of ``family`` (with ``overrides``) configures for
    ``fmt`` (a model built as ``name``); its instances on the GPU read from the
    instance_group the build writes, as a built model's are (:func:`~mmelocal.bench.
    estimate.instances.gpu_instances`)."""
    from tritonclient.grpc import model_config_pb2 as pb

    from mmelocal.builder.backends import FORMATS
    from mmelocal.builder.model_config import add_instance_group
    from mmelocal.builder.presets import preset_options

    options = preset_options(family, **overrides)
    cfg = pb.ModelConfig(name=name, platform=FORMATS[fmt][0])
    add_instance_group(cfg, options)
    return _batches(
        max_batch=options.max_batch_size,
        preferred=options.preferred_batch_sizes if options.dynamic_batching else (),
        warmup=options.warmup_batch_sizes if options.warmup else (),
        instances=gpu_instances(cfg, Path(name), source),
        profile_max=profile_max,
        request=request,
    )


def _batches(
    *,
    max_batch: int,
    preferred: Sequence[int],
    warmup: Sequence[int],
    instances: int,
    profile_max: int | None,
    request: int = 1,
) -> Batches:
    top = max(max_batch, 1)
    return Batches(
        warmup=max(warmup, default=0),
        preferred=max(preferred, default=top),
        max=top,
        instances=instances,
        profile_max=profile_max,
        request=request,
    )


def _prebuilt_facts(
    path: Path,
    tmp: Path,
    precision: str | None,
    seq_len: int,
    profile_max: int | None,
    request: int = 1,
) -> tuple[ModelFacts, str, str, Batches]:
    from mmelocal.builder.model_config import read_config

    model_dir = _model_dir(path, tmp)
    cfg = read_config(model_dir / "config.pbtxt")
    platform = str(cfg.platform) or str(cfg.backend)
    fmt = _PLATFORM_FORMAT.get(platform)
    if fmt is None:
        raise UserInputError(
            f"{path}: cannot estimate a {platform or 'backend-less'} model; the estimate reads "
            "TorchScript (pytorch_libtorch) and ONNX (onnxruntime_onnx) models"
        )
    if fmt == "tensorrt":
        raise UserInputError(
            f"{path}: a TensorRT plan cannot be read without TensorRT; estimate the model it "
            "was built from with --format tensorrt"
        )
    batches = _batches(
        max_batch=int(cfg.max_batch_size),
        preferred=list(cfg.dynamic_batching.preferred_batch_size)
        if cfg.HasField("dynamic_batching")
        else (),
        warmup=[int(w.batch_size) for w in cfg.model_warmup],
        instances=gpu_instances(cfg, model_dir, path),
        profile_max=profile_max,
        request=request,
    )
    artifact = _artifact(model_dir, "model.pt" if fmt == "torchscript" else "model.onnx")
    prec = precision or "fp32"
    check_precision(fmt, prec)
    if fmt == "onnx":
        return (
            trace_onnx_file(artifact, batches, precision=prec, dynamic_dim=seq_len),
            fmt,
            prec,
            (batches),
        )
    import torch

    module, device = _load_torchscript(artifact)
    example = {
        str(i.name): torch.empty(
            (1, *[d if d > 0 else seq_len for d in i.dims]),
            dtype=getattr(torch, _TRITON_DTYPES.get(_dtype_name(i.data_type), "float32")),
            device="meta",
        )
        for i in cfg.input
    }
    facts = trace_module(module, example, batches, precision=prec, device=device)
    return facts, fmt, prec, batches


def _load_torchscript(artifact: Path) -> tuple[Any, str]:
    """The TorchScript module at ``artifact`` and the device its weights are on: ``meta``
    (nothing read into memory) where it loads there, else ``cpu``. A traced module (what
    ``mmelocal build`` writes for a Hugging Face model) holds tensor constants that
    ``torch.jit.load`` compares with ``aten::equal``, which meta tensors lack; such a module
    cannot be moved to meta afterwards either (its parameters are plain tensors)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        # torch 2.9+ warns that torch.jit.load is deprecated: noise for a user who only
        # asks for an estimate; every other warning still shows
        warnings.filterwarnings(
            "ignore", message=r"`torch\.jit\.load` is deprecated", category=FutureWarning
        )
        try:
            return torch.jit.load(str(artifact), map_location="meta"), "meta"
        except NotImplementedError:
            return torch.jit.load(str(artifact), map_location="cpu"), "cpu"


def _dtype_name(value: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return str(model_config_pb2.DataType.Name(value))


def _model_dir(path: Path, tmp: Path) -> Path:
    if path.is_dir():
        return path
    from mmelocal.builder.mme_layout import read_layout
    from mmelocal.builder.tarball import safe_extract

    layout = read_layout(safe_extract(path, tmp / "extracted"))
    layout.raise_for_errors(str(path))
    if layout.steps or layout.served_dir is None:
        raise UserInputError(f"{path}: estimate one model at a time, not an ensemble and its steps")
    return layout.served_dir


def _artifact(model_dir: Path, filename: str) -> Path:
    versions = sorted(
        (p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    for version in reversed(versions):
        if (version / filename).is_file():
            return version / filename
    raise UserInputError(f"{model_dir}: no version folder holds {filename}")


__all__ = [
    "estimate_many",
    "estimate_model",
    "measured_from_capacity",
    "repository_models",
    "trace_module",
    "trace_onnx_file",
]
