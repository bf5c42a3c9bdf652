"""ConfigOptions validation, build_model_config, and read_config errors (file, line, field)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from mmelocal.builder.model_config import (
    ConfigOptions,
    build_model_config,
    config_to_text,
    read_config,
    write_config,
)
from mmelocal.builder.tensors import Signature, TensorSpec
from mmelocal.errors import ConfigError

SIG = Signature(
    inputs=(TensorSpec("ids", "TYPE_INT64", (-1,)), TensorSpec("img", "TYPE_FP16", (3, -1))),
    outputs=(TensorSpec("out", "TYPE_FP32", (2,)),),
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_size": -1}, "max_batch_size must be >= 0, got -1"),
        ({"max_batch_size": 0}, "dynamic_batching needs max_batch_size > 0"),
        ({"preferred_batch_sizes": (4, 16)}, "preferred_batch_sizes must lie in 1..max_batch_size"),
        ({"preferred_batch_sizes": (4, 4)}, "must not repeat"),
        ({"max_queue_delay_us": -5}, "max_queue_delay_us must be >= 0, got -5"),
        ({"instance_count": 0}, "instance_count must be >= 1, got 0"),
        ({"kind": "tpu"}, "kind must be one of auto, gpu, cpu, got 'tpu'"),
        ({"gpus": (0,)}, "gpus can only be set with kind='gpu'"),
        ({"kind": "gpu", "gpus": (0, 0)}, "gpus must be distinct"),
        ({"warmup_data": "ones"}, "warmup_data must be one of random, zero, got 'ones'"),
        ({"warmup_batch_sizes": (9,)}, "warmup_batch_sizes must be non-empty and lie in 1..8"),
        ({"warmup_dynamic_dim": 0}, "warmup_dynamic_dim must be >= 1"),
    ],
)
def test_options_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ConfigOptions(**kwargs)
    assert message in str(info.value)


def test_options_are_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        ConfigOptions(8)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ConfigOptions().max_batch_size = 2  # type: ignore[misc]


def test_build_full_config_round_trips(tmp_path: Path) -> None:
    opts = ConfigOptions(kind="gpu", gpus=(0, 1), instance_count=2, warmup_batch_sizes=(1, 8))
    cfg = build_model_config(
        name="m",
        platform="onnxruntime_onnx",
        signature=SIG,
        options=opts,
        warmup_dims={"img": (3, 32)},
    )
    assert cfg.instance_group[0].kind == pb.ModelInstanceGroup.KIND_GPU
    assert list(cfg.instance_group[0].gpus) == [0, 1]
    assert [w.batch_size for w in cfg.model_warmup] == [1, 8]
    warm = cfg.model_warmup[0].inputs
    assert list(warm["ids"].dims) == [16] and warm["ids"].zero_data  # ints never random
    assert list(warm["img"].dims) == [3, 32] and warm["img"].random_data
    path = write_config(cfg, tmp_path)
    assert path == tmp_path / "config.pbtxt"
    assert read_config(path) == cfg
    assert text_format.Parse(config_to_text(cfg), pb.ModelConfig()) == cfg


def test_no_batching_and_cpu(tmp_path: Path) -> None:
    opts = ConfigOptions(max_batch_size=0, dynamic_batching=False, kind="cpu", warmup_data="zero")
    cfg = build_model_config(name="m", backend="python", signature=SIG, options=opts)
    assert cfg.backend == "python" and not cfg.platform
    assert not cfg.HasField("dynamic_batching")
    assert cfg.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
    assert [w.batch_size for w in cfg.model_warmup] == [1]
    assert cfg.model_warmup[0].inputs["img"].zero_data
    auto = build_model_config(name="m", backend="python", signature=SIG)
    assert auto.instance_group[0].kind == pb.ModelInstanceGroup.KIND_AUTO
    assert "kind" not in config_to_text(auto)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"platform": None, "backend": None}, "exactly one of platform or backend"),
        ({"platform": "pytorch_libtorch", "backend": "python"}, "exactly one"),
        ({"platform": "torch"}, "platform must be one of"),
        ({"name": ""}, "name must be a non-empty folder name"),
        ({"warmup_dims": {"nope": (1,)}}, "warmup_dims names inputs the model does not have"),
        ({"warmup_dims": {"img": (3, -1)}}, "must be concrete dims"),
        ({"signature": Signature((TensorSpec("s", "TYPE_FP32", ()),), ())}, "has no dims"),
    ],
)
def test_build_errors(kwargs: dict, message: str) -> None:
    args = {"name": "m", "platform": "onnxruntime_onnx", "signature": SIG, **kwargs}
    with pytest.raises(ConfigError, match=message):
        build_model_config(**args)


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ('name: "m"\nmax_batch_size: 8\nbogus_field: 1\n', 3, "bogus_field"),
        ('name: "m"\ninput [{ name: "x" data_type: TYPE_F32 dims: [1] }]\n', 2, "data_type"),
        ('name: "m"\n\ninstance_group [{ kind: KIND_TPU }]\n', 3, "kind"),
        (
            'name: "m"\ndynamic_batching { max_queue_delay_microseconds: soon }\n',
            2,
            "max_queue_delay_microseconds",
        ),
        ('name: "m"\ninput { name: "x" data_type: TYPE_FP32 dims: [1] foo: 2 }\n', 2, "foo"),
        ('name: "m"\nname: "n"\n', 2, "name"),
        ('name: "m"\nmax_batch_size: -4\n', 2, "max_batch_size"),
        ('name: "m"\ninput { name: "x" dims: [1] }\n', 2, "input[0].data_type"),
        ('name: "m"\noutput { name: "y" data_type: TYPE_FP32 }\n', 2, "output[0].dims"),
        ('name: "m"\noutput { name: "y" data_type: TYPE_FP32 dims: [0] }\n', 2, "output[0].dims"),
        # Triton refuses a platform it does not know when no backend is named ...
        ('name: "m"\nplatform: "onnxruntime"\n', 2, "platform"),
        # ... a known backend with another backend's platform ...
        ('name: "m"\nplatform: "onnxruntime_onnx"\nbackend: "pytorch"\n', 2, "platform"),
        # ... and an ensemble with a backend
        ('name: "m"\nplatform: "ensemble"\nbackend: "python"\n', 3, "backend"),
    ],
)
def test_read_config_names_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str
) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_config(path)
    err = info.value
    assert (err.line, err.field) == (line, field)
    assert str(err).startswith(f"{path}:{line}: ")
    assert "\n" not in str(err)


@pytest.mark.parametrize(
    "text",
    [
        'backend: "onnxruntime"\n',  # Triton fills in the platform
        'platform: "pytorch_libtorch"\nbackend: "pytorch"\n',
        'platform: "tensorflow_savedmodel"\nbackend: "tensorflow"\n',
        'backend: "python"\nplatform: "anything"\n',  # python is tied to no platform
        'platform: "anything"\ndefault_model_filename: "model.py"\n',  # python, by file
        'backend: "my_custom"\nplatform: "my_platform"\n',
    ],
)
def test_read_config_platform_and_backend_triton_accepts(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "m"\n' + text)
    read_config(path)


def test_read_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\.pbtxt not found"):
        read_config(tmp_path / "config.pbtxt")


@pytest.mark.parametrize("count", [-1, -7, 0])
def test_an_instance_group_count_below_1_is_tritons_default(tmp_path: Path, count: int) -> None:
    """Triton gives a group whose count is < 1 its default count (core
    ``NormalizeInstanceGroup``: ``if (group.count() < 1) SetDefaultInstanceCount``, r24.10):
    the config is read, with the count left unset (0), which Triton reads the same way."""
    path = tmp_path / "config.pbtxt"
    path.write_text(
        f'name: "m"\nbackend: "python"\ninstance_group [{{ count: {count} kind: KIND_CPU }}]\n'
    )
    cfg = read_config(path)
    assert cfg.instance_group[0].count == 0
    assert "count" not in config_to_text(cfg)
