"""Presets: loading, family detection, overrides, and golden config.pbtxt files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from mmelocal.builder.model_config import ConfigOptions, build_model_config, config_to_text
from mmelocal.builder.presets import (
    detect_family,
    list_presets,
    load_preset,
    preset_options,
    templates_dir,
)
from mmelocal.builder.tensors import Signature, TensorSpec
from mmelocal.errors import ConfigError

GOLDEN = Path(__file__).parent / "golden"

NLP = Signature(
    inputs=(
        TensorSpec("input_ids", "TYPE_INT64", (-1,)),
        TensorSpec("attention_mask", "TYPE_INT64", (-1,)),
    ),
    outputs=(TensorSpec("last_hidden_state", "TYPE_FP32", (-1, 384)),),
)
CV = Signature(
    inputs=(TensorSpec("pixel_values", "TYPE_FP32", (3, 224, 224)),),
    outputs=(TensorSpec("logits", "TYPE_FP32", (1000,)),),
)
GENERIC = Signature(
    inputs=(TensorSpec("INPUT__0", "TYPE_FP32", (16,)),),
    outputs=(TensorSpec("OUTPUT__0", "TYPE_FP32", (4,)),),
)
CASES = {
    "bert": ("pytorch_libtorch", None, NLP),
    "roberta": ("onnxruntime_onnx", None, NLP),
    "resnet": ("onnxruntime_onnx", None, CV),
    "convnext": ("pytorch_libtorch", None, CV),
    "vit": ("tensorrt_plan", None, CV),
    "generic": (None, "python", GENERIC),
}


def test_every_preset_has_a_golden_case() -> None:
    assert set(list_presets()) == set(CASES)


@pytest.mark.parametrize("family", sorted(CASES))
def test_golden_config(family: str) -> None:
    platform, backend, signature = CASES[family]
    cfg = build_model_config(
        name=f"{family}_model",
        platform=platform,
        backend=backend,
        signature=signature,
        options=preset_options(family),
    )
    text = config_to_text(cfg)
    golden = GOLDEN / f"{family}.pbtxt"
    if os.environ.get("MMELOCAL_REGEN_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
    parsed = text_format.Parse(golden.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())
    assert parsed == cfg


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("bert-base-uncased", "bert"),
        ("sentence-transformers/all-MiniLM-L6-v2", "bert"),
        ("distilbert", "bert"),
        ("roberta-large", "roberta"),
        ("distilroberta-base", "roberta"),
        ("xlm-roberta", "roberta"),
        ("torchvision:resnet50", "resnet"),
        ("timm:resnet18", "resnet"),
        ("convnext_base", "convnext"),
        ("vit_large_patch16_224", "vit"),
        ("google/vit-base-patch16-224", "vit"),
        ("gpt2", "generic"),
        ("activity", "generic"),
        (None, "generic"),
    ],
)
def test_detect_family(name: str | None, family: str) -> None:
    assert detect_family(name) == family


def test_overrides_and_dependent_defaults() -> None:
    opts = preset_options("resnet", max_batch_size=4, instance_count=2, kind=None)
    assert opts.max_batch_size == 4
    assert opts.preferred_batch_sizes == (4,)
    assert opts.warmup_batch_sizes == (1,)
    assert opts.instance_count == 2
    assert opts.kind == "auto"
    off = preset_options("bert", max_batch_size=0)
    assert off.dynamic_batching is False
    assert preset_options("bert", preferred_batch_sizes=[2]).preferred_batch_sizes == (2,)


def test_bad_overrides() -> None:
    with pytest.raises(ConfigError, match="unknown option"):
        preset_options("bert", max_batch=3)
    with pytest.raises(ConfigError, match="unknown preset family 'nope'"):
        load_preset("nope")
    with pytest.raises(ConfigError, match="kind must be one of auto, gpu, cpu"):
        preset_options("bert", kind="tpu")


def test_presets_are_only_config_options() -> None:
    fields = set(ConfigOptions.__dataclass_fields__)
    for family in list_presets():
        assert set(load_preset(family)["config"]) <= fields
    assert (templates_dir() / "presets" / "bert.yaml").is_file()


def test_templates_dir_in_wheel_layout(tmp_path: Path) -> None:
    """In a wheel the templates sit inside the package (hatch force-include)."""
    import importlib.util
    import shutil

    import mmelocal.builder.presets as presets

    pkg = tmp_path / "site" / "mmelocal"
    (pkg / "builder").mkdir(parents=True)
    shutil.copy(presets.__file__, pkg / "builder" / "presets.py")
    shutil.copytree(templates_dir() / "presets", pkg / "model_repo_templates" / "presets")
    spec = importlib.util.spec_from_file_location("wheel_presets", pkg / "builder" / "presets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.templates_dir() == pkg / "model_repo_templates"
    assert module.list_presets() == list_presets()
