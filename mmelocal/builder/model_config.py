"""config.pbtxt on Triton's own schema (``model_config_pb2``), written as protobuf text.

:class:`ConfigOptions` holds the serving knobs (batching, instances, warmup) that are
not read from the artifact; :func:`build_model_config` joins them with a
:class:`~mmelocal.builder.tensors.Signature` taken from the exported model.
:func:`read_config` parses an existing file through the same schema and names the
file, line and field of anything Triton would refuse.

Choices worth knowing:

* ``kind="auto"`` leaves ``kind`` unset in ``instance_group`` (``KIND_AUTO``): Triton
  places instances on the GPUs when there are any, else on the CPU, so one config works
  on a laptop and on the endpoint.
* Warmup inputs need concrete dims: a dynamic dim (``-1``) takes the value given in
  ``warmup_dims`` (the example inputs' dims) or else ``options.warmup_dynamic_dim``.
* ``warmup_data="random"`` fills floating-point inputs with random data, but integer and
  bool inputs always get ``zero_data``: Triton's random data is random bytes, which as
  token ids would index outside an embedding table and fail the load.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import BACKENDS, PLATFORM_BACKENDS, PLATFORMS
from mmelocal.builder.tensors import Signature, TensorSpec
from mmelocal.errors import ConfigError

KINDS = ("auto", "gpu", "cpu")
WARMUP_DATA = ("random", "zero")
_FLOAT_TYPES = ("TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_BF16")
#: backends Triton ties to their platforms (core ``GetBackendType``): named with another
#: platform, the config is refused
_PLATFORM_BOUND_BACKENDS = frozenset({"tensorflow", "tensorrt", "onnxruntime", "pytorch"})
#: platforms Triton knows beyond the backends table (PyTorch AOTInductor, Triton 25.x)
_OTHER_PLATFORMS = ("torch_aoti",)


def _pb() -> Any:
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


@dataclass(frozen=True, kw_only=True)
class ConfigOptions:
    """Serving options for one model's config.pbtxt (defaults fit a small NLP/CV model).

    ``max_batch_size=0`` means the model does not batch (dims then include every dim);
    dynamic batching needs ``max_batch_size > 0``.
    """

    max_batch_size: int = 8
    dynamic_batching: bool = True
    preferred_batch_sizes: tuple[int, ...] = (4, 8)
    max_queue_delay_us: int = 100
    instance_count: int = 1
    kind: str = "auto"
    gpus: tuple[int, ...] = ()
    warmup: bool = True
    warmup_batch_sizes: tuple[int, ...] = (1,)
    warmup_data: str = "random"
    warmup_dynamic_dim: int = 16

    def __post_init__(self) -> None:
        for name in ("preferred_batch_sizes", "gpus", "warmup_batch_sizes"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        mbs = self.max_batch_size
        if mbs < 0:
            raise ConfigError(f"max_batch_size must be >= 0, got {mbs}", field="max_batch_size")
        if self.dynamic_batching:
            if mbs == 0:
                raise ConfigError(
                    "dynamic_batching needs max_batch_size > 0, got max_batch_size=0; "
                    "pass dynamic_batching=False or a max_batch_size",
                    field="dynamic_batching",
                )
            bad = [b for b in self.preferred_batch_sizes if b < 1 or b > mbs]
            if bad:
                raise ConfigError(
                    f"preferred_batch_sizes must lie in 1..max_batch_size ({mbs}), got {bad}",
                    field="preferred_batch_sizes",
                )
            if len(set(self.preferred_batch_sizes)) != len(self.preferred_batch_sizes):
                raise ConfigError(
                    "preferred_batch_sizes must not repeat, "
                    f"got {list(self.preferred_batch_sizes)}",
                    field="preferred_batch_sizes",
                )
        if self.max_queue_delay_us < 0:
            raise ConfigError(
                f"max_queue_delay_us must be >= 0, got {self.max_queue_delay_us}",
                field="max_queue_delay_us",
            )
        if self.instance_count < 1:
            raise ConfigError(
                f"instance_count must be >= 1, got {self.instance_count}", field="instance_count"
            )
        if self.kind not in KINDS:
            raise ConfigError(
                f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}", field="kind"
            )
        if self.gpus and self.kind != "gpu":
            raise ConfigError(
                f"gpus can only be set with kind='gpu', got kind={self.kind!r}", field="gpus"
            )
        if any(g < 0 for g in self.gpus) or len(set(self.gpus)) != len(self.gpus):
            raise ConfigError(
                f"gpus must be distinct device ids >= 0, got {list(self.gpus)}", field="gpus"
            )
        if self.warmup_data not in WARMUP_DATA:
            raise ConfigError(
                f"warmup_data must be one of {', '.join(WARMUP_DATA)}, got {self.warmup_data!r}",
                field="warmup_data",
            )
        if self.warmup_dynamic_dim < 1:
            raise ConfigError(
                f"warmup_dynamic_dim must be >= 1, got {self.warmup_dynamic_dim}",
                field="warmup_dynamic_dim",
            )
        if self.warmup:
            limit = max(mbs, 1)
            bad = [b for b in self.warmup_batch_sizes if b < 1 or b > limit]
            if bad or not self.warmup_batch_sizes:
                raise ConfigError(
                    f"warmup_batch_sizes must be non-empty and lie in 1..{limit} "
                    f"(max_batch_size={mbs}), got {list(self.warmup_batch_sizes)}",
                    field="warmup_batch_sizes",
                )


def build_model_config(
    *,
    name: str,
    platform: str | None = None,
    backend: str | None = None,
    signature: Signature,
    options: ConfigOptions | None = None,
    warmup_dims: Mapping[str, Sequence[int]] | None = None,
    default_model_filename: str | None = None,
) -> Any:
    """Build a ``model_config_pb2.ModelConfig`` for one model.

    Exactly one of ``platform`` (e.g. ``"pytorch_libtorch"``, ``"onnxruntime_onnx"``,
    ``"tensorrt_plan"``) or ``backend`` (e.g. ``"python"``) is set. The signature's dims
    exclude the batch dim when ``options.max_batch_size > 0``. ``warmup_dims`` maps input
    names to concrete dims (batch excluded) used for dynamic dims in warmup requests.
    """
    opts = options or ConfigOptions()
    if not name or "/" in name or name in (".", ".."):
        raise ConfigError(f"name must be a non-empty folder name without '/', got {name!r}")
    if (platform is None) == (backend is None):
        raise ConfigError(
            f"set exactly one of platform or backend, got platform={platform!r}, "
            f"backend={backend!r}"
        )
    if platform is not None and platform not in PLATFORMS:
        raise ConfigError(
            f"platform must be one of {', '.join(PLATFORMS)}, got {platform!r}", field="platform"
        )
    if backend is not None and not backend:
        raise ConfigError("backend must be a non-empty backend name, got ''", field="backend")
    pb = _pb()
    cfg = pb.ModelConfig(name=name, max_batch_size=opts.max_batch_size)
    if platform is not None:
        cfg.platform = platform
    else:
        cfg.backend = backend
    if default_model_filename:
        cfg.default_model_filename = default_model_filename
    for spec in signature.inputs:
        _check_dims(spec)
        cfg.input.add(name=spec.name, data_type=spec.data_type, dims=list(spec.dims))
    for spec in signature.outputs:
        _check_dims(spec)
        cfg.output.add(name=spec.name, data_type=spec.data_type, dims=list(spec.dims))
    if opts.dynamic_batching:
        db = cfg.dynamic_batching
        db.preferred_batch_size.extend(opts.preferred_batch_sizes)
        db.max_queue_delay_microseconds = opts.max_queue_delay_us
    add_instance_group(cfg, opts)
    if opts.warmup and signature.inputs:
        _add_warmup(cfg, signature, opts, dict(warmup_dims or {}))
    return cfg


def add_instance_group(cfg: Any, opts: ConfigOptions) -> Any:
    """Add to ``cfg`` the ``instance_group`` a build with ``opts`` writes; return it."""
    pb = _pb()
    group = cfg.instance_group.add(count=opts.instance_count)
    if opts.kind == "gpu":
        group.kind = pb.ModelInstanceGroup.KIND_GPU
        group.gpus.extend(opts.gpus)
    elif opts.kind == "cpu":
        group.kind = pb.ModelInstanceGroup.KIND_CPU
    return group


def _check_dims(spec: TensorSpec) -> None:
    if not spec.dims:
        raise ConfigError(
            f"tensor {spec.name!r} has no dims; Triton needs at least one "
            "(for a per-sample scalar use dims [1])",
            field="dims",
        )


def _add_warmup(
    cfg: Any, signature: Signature, opts: ConfigOptions, warmup_dims: dict[str, Sequence[int]]
) -> None:
    unknown = sorted(set(warmup_dims) - set(signature.input_names))
    if unknown:
        raise ConfigError(
            f"warmup_dims names inputs the model does not have: {unknown}; "
            f"inputs are {list(signature.input_names)}",
            field="warmup_dims",
        )
    sizes = opts.warmup_batch_sizes if opts.max_batch_size > 0 else (1,)
    for batch_size in dict.fromkeys(sizes):
        entry = cfg.model_warmup.add(name=f"warmup_batch_{batch_size}", batch_size=batch_size)
        for spec in signature.inputs:
            item = entry.inputs[spec.name]
            item.data_type = _pb().DataType.Value(spec.data_type)
            item.dims.extend(_concrete_dims(spec, warmup_dims.get(spec.name), opts))
            if opts.warmup_data == "random" and spec.data_type in _FLOAT_TYPES:
                item.random_data = True
            else:
                item.zero_data = True


def _concrete_dims(
    spec: TensorSpec, example: Sequence[int] | None, opts: ConfigOptions
) -> list[int]:
    if example is not None:
        dims = [int(d) for d in example]
        if len(dims) != len(spec.dims) or any(
            d < 1 or (s != -1 and s != d) for d, s in zip(dims, spec.dims, strict=False)
        ):
            raise ConfigError(
                f"warmup_dims[{spec.name!r}] must be concrete dims matching {list(spec.dims)}, "
                f"got {dims}",
                field="warmup_dims",
            )
        return dims
    return [opts.warmup_dynamic_dim if d == -1 else d for d in spec.dims]


def config_to_text(cfg: Any) -> str:
    """The protobuf text of a ModelConfig, as Triton reads it from config.pbtxt."""
    from google.protobuf import text_format

    text: str = text_format.MessageToString(cfg, use_short_repeated_primitives=True)
    return text


def write_config(cfg: Any, path: Path | str) -> Path:
    """Write ``cfg`` to ``path`` (a config.pbtxt file, or a model folder to put one in)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.pbtxt"
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(config_to_text(cfg), encoding="utf-8")
    tmp.replace(p)
    return p


_NO_FIELD = re.compile(r'has no field named "([^"]+)"')
_MULTIPLE = re.compile(r'multiple "([^"]+)" fields')
_FIELD_BEFORE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:?\s*[\[{]?\s*$")


def read_config(path: Path | str) -> Any:
    """Parse a config.pbtxt through Triton's schema and check what the schema cannot.

    Raises :class:`~mmelocal.errors.ConfigError` naming the file, line and field for an
    unknown field, a bad value or enum, a tensor without a valid data type or dims, or a
    negative ``max_batch_size``.

    An ``instance_group`` ``count`` below 1 is read as 0 (unset): Triton gives such a group
    its default count (core ``NormalizeInstanceGroup``), as it does an unset one.
    """
    from google.protobuf import text_format

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("config.pbtxt not found", path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config: {exc}", path=p) from None
    cfg = _pb().ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        fieldname = _field_of(str(exc), text, line, column)
        reason = re.sub(r"^\d+:\d+ : ", "", str(exc))
        reason = re.sub(r"^'.*?': ", "", reason)
        what = f"field {fieldname!r}: " if fieldname else ""
        raise ConfigError(
            f"{what}{reason} (column {column})", path=p, line=line, field=fieldname
        ) from None
    check_config(cfg, path=p, text=text)
    for group in cfg.instance_group:
        group.count = max(0, group.count)
    return cfg


def _field_of(message: str, text: str, line: int | None, column: int | None) -> str | None:
    for pattern in (_NO_FIELD, _MULTIPLE):
        m = pattern.search(message)
        if m:
            return m.group(1)
    if not line:
        return None
    lines = text.splitlines()
    if line > len(lines):
        return None
    before = lines[line - 1][: max((column or 1) - 1, 0)]
    # the last "identifier:" before the column is the field whose value was refused
    found = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*:", before)
    if found:
        return str(found[-1])
    m = _FIELD_BEFORE.search(before)
    return m.group(1) if m else None


def check_config(cfg: Any, *, path: Path | str | None = None, text: str | None = None) -> None:
    """Semantic checks Triton applies that the schema cannot express; raises ConfigError."""
    _check_platform(cfg, path=path, text=text)
    if cfg.max_batch_size < 0:
        raise ConfigError(
            f"max_batch_size must be >= 0, got {cfg.max_batch_size}",
            path=path,
            line=_line_of(text, "max_batch_size"),
            field="max_batch_size",
        )
    for kind, tensors in (("input", cfg.input), ("output", cfg.output)):
        for i, t in enumerate(tensors):
            where = f"{kind}[{i}]"
            line = _line_of(text, f'"{t.name}"') if t.name else None
            if not t.name:
                raise ConfigError(f"{where} has no name", path=path, field=f"{where}.name")
            if t.data_type == 0:
                raise ConfigError(
                    f"{where} {t.name!r} has no data_type (TYPE_INVALID); set e.g. TYPE_FP32",
                    path=path,
                    line=line,
                    field=f"{where}.data_type",
                )
            dims = list(t.dims)
            if not dims:
                raise ConfigError(
                    f"{where} {t.name!r} has no dims; Triton needs at least one (a reshape "
                    "does not replace them)",
                    path=path,
                    line=line,
                    field=f"{where}.dims",
                )
            if any(d < -1 or d == 0 for d in dims):
                raise ConfigError(
                    f"{where} {t.name!r} dims must be positive or -1, got {dims}",
                    path=path,
                    line=line,
                    field=f"{where}.dims",
                )


def _check_platform(cfg: Any, *, path: Path | str | None, text: str | None) -> None:
    """The platform / backend pairs Triton refuses (core ``ValidateModelConfig``, after
    ``AutoCompleteBackendFields`` filled in what it could)."""
    platform, backend = str(cfg.platform), str(cfg.backend)
    if platform == "ensemble" and backend:
        raise ConfigError(
            f"an ensemble has platform 'ensemble' and no backend, got backend {backend!r}",
            path=path,
            line=_line_of(text, "backend"),
            field="backend",
        )
    if not platform or platform in _OTHER_PLATFORMS:
        return
    owner = PLATFORM_BACKENDS.get(platform)
    if backend in _PLATFORM_BOUND_BACKENDS and owner != backend:
        takes = [p for p, b in PLATFORM_BACKENDS.items() if b == backend]
        raise ConfigError(
            f"platform {platform!r} does not go with backend {backend!r}, which takes "
            f"platform {' or '.join(repr(p) for p in takes)} (or none); Triton refuses the pair",
            path=path,
            line=_line_of(text, "platform"),
            field="platform",
        )
    if platform not in PLATFORMS and not backend and cfg.default_model_filename != "model.py":
        hint = (
            f"; {platform!r} is a backend: write backend: {platform!r}"
            if platform in BACKENDS
            else ""
        )
        raise ConfigError(
            f"unknown platform {platform!r} (Triton refuses it): use one of "
            f"{', '.join(PLATFORMS)}, or name a backend{hint}",
            path=path,
            line=_line_of(text, "platform"),
            field="platform",
        )


def _line_of(text: str | None, needle: str) -> int | None:
    if text is None:
        return None
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


__all__ = [
    "KINDS",
    "PLATFORMS",
    "WARMUP_DATA",
    "ConfigOptions",
    "add_instance_group",
    "build_model_config",
    "check_config",
    "config_to_text",
    "read_config",
    "write_config",
]
