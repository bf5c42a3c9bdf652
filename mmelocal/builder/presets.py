"""Per-family defaults for config.pbtxt, read from ``model_repo_templates/presets/*.yaml``.

A preset only supplies defaults: :func:`preset_options` applies the user's overrides
on top and returns a validated :class:`~mmelocal.builder.model_config.ConfigOptions`.
When the user lowers ``max_batch_size`` without naming the dependent options, those
follow: preferred and warmup batch sizes above the new limit are dropped (the limit
itself is used if none is left) and ``max_batch_size=0`` turns dynamic batching off.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from pathlib import Path
from typing import Any

from mmelocal.builder.model_config import ConfigOptions
from mmelocal.errors import ConfigError

GENERIC = "generic"


def templates_dir() -> Path:
    """The ``model_repo_templates`` folder, in an installed wheel or in the source tree.

    The wheel carries it as ``mmelocal/model_repo_templates`` (hatch force-include);
    a source checkout or editable install has it at the repository root.
    """
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (
        package_dir / "model_repo_templates",
        package_dir.parent / "model_repo_templates",
    ):
        if candidate.is_dir():
            return candidate
    raise ConfigError(
        f"model_repo_templates not found next to {package_dir}; reinstall mmelocal "
        "(pip install --force-reinstall mmelocal)"
    )


def presets_dir() -> Path:
    """The folder holding one ``<family>.yaml`` per preset."""
    return templates_dir() / "presets"


def list_presets() -> tuple[str, ...]:
    """Names of the available preset families, sorted."""
    return tuple(sorted(p.stem for p in presets_dir().glob("*.yaml")))


@cache
def _load(family: str) -> dict[str, Any]:
    import yaml

    path = presets_dir() / f"{family}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"unknown preset family {family!r}; choose one of {', '.join(list_presets())}",
            field="family",
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"preset is not valid YAML: {exc}", path=path) from None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise ConfigError("preset must be a mapping with a 'config' mapping", path=path)
    return data


def load_preset(family: str) -> dict[str, Any]:
    """The preset for ``family`` as a dict (``config``, ``kind``, ``input_names``, ...)."""
    import copy

    return copy.deepcopy(_load(family))


def detect_family(model_type_or_name: str | None) -> str:
    """The preset family for a HF ``model_type`` or a model name; ``"generic"`` if none fits.

    Names are split into tokens (``"sentence-transformers/all-MiniLM-L6-v2"`` ->
    ``sentence``, ``transformers``, ``all``, ``minilm``, ...); a token that starts or ends
    with a preset's ``match`` pattern selects it, the longest pattern winning, so
    ``distilroberta`` is RoBERTa rather than BERT.
    """
    if not model_type_or_name:
        return GENERIC
    text = model_type_or_name.lower().split(":", 1)[-1]
    tokens = [t for t in re.split(r"[^a-z0-9]+", text) if t]
    joined = "-".join(tokens)
    best: tuple[int, str] = (0, GENERIC)
    for family in list_presets():
        for pattern in _load(family).get("match") or []:
            pattern = str(pattern).lower()
            if "-" in pattern:
                hit = pattern in joined
            else:
                hit = any(t.startswith(pattern) or t.endswith(pattern) for t in tokens)
            if hit and len(pattern) > best[0]:
                best = (len(pattern), family)
    return best[1]


_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(ConfigOptions))


def preset_values(name: str) -> dict[str, Any]:
    """Family -> the value its preset gives ConfigOptions field ``name`` (ConfigOptions'
    default where a preset leaves it out), for every preset, sorted by family."""
    if name not in _OPTION_FIELDS:
        raise KeyError(name)
    default = next(f.default for f in dataclasses.fields(ConfigOptions) if f.name == name)
    return {family: _load(family)["config"].get(name, default) for family in list_presets()}


def preset_options(family: str, **overrides: Any) -> ConfigOptions:
    """ConfigOptions from the ``family`` preset with ``overrides`` applied.

    Overrides set to ``None`` are ignored, so CLI options left unset can be passed as is.
    Unknown names raise ConfigError listing the allowed ones.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(given) - set(_OPTION_FIELDS))
    if unknown:
        raise ConfigError(
            f"unknown option(s) {unknown}; allowed: {', '.join(_OPTION_FIELDS)}", field=unknown[0]
        )
    values: dict[str, Any] = {
        k: (tuple(v) if isinstance(v, list) else v)
        for k, v in _load(family)["config"].items()
        if k in _OPTION_FIELDS
    }
    values.update(given)
    mbs = int(values.get("max_batch_size", ConfigOptions.max_batch_size))
    if "max_batch_size" in given:
        if mbs == 0 and "dynamic_batching" not in given:
            values["dynamic_batching"] = False
        if "preferred_batch_sizes" not in given and mbs > 0:
            kept = tuple(b for b in values.get("preferred_batch_sizes", ()) if b <= mbs)
            values["preferred_batch_sizes"] = kept or (mbs,)
        if "warmup_batch_sizes" not in given:
            limit = max(mbs, 1)
            kept = tuple(b for b in values.get("warmup_batch_sizes", ()) if b <= limit)
            values["warmup_batch_sizes"] = kept or (limit,)
    return ConfigOptions(**values)


__all__ = [
    "GENERIC",
    "detect_family",
    "list_presets",
    "load_preset",
    "preset_options",
    "preset_values",
    "presets_dir",
    "templates_dir",
]
