"""``capacity estimate``: each part against its own independent computation.

Models are built with random weights (torchvision ``weights=None``, the tiny BERT's config
from ``mmelocal.testing.tiny_bert``); nothing runs on a device. The activation peak is
checked against a hand computation on a small MLP (peak of live tensors, not their sum), in
PyTorch and in an ONNX graph.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from mmelocal.bench.capacity.projection import GpuSpec
from mmelocal.bench.estimate.activations import onnx_weights, torch_weights, trace_onnx, trace_torch
from mmelocal.bench.estimate.core import (
    CUBLAS_SEGMENT_BYTES,
    ONCE,
    PER_COPY,
    SHIPPED,
    Batches,
    Estimate,
    Measured,
    ModelFacts,
    build_parts,
    card_count,
    check_precision,
    estimate_from_facts,
    sum_parts,
)
from mmelocal.bench.estimate.parts import SERVER_BASELINE_RANGE
from mmelocal.errors import UserInputError
from mmelocal.facts.cards import published_readings

torch = pytest.importorskip("torch")
MIB = 1024 * 1024
DOCS = Path(__file__).resolve().parents[2] / "docs" / "estimate.md"


def test_the_docs_server_row_gives_the_published_readings() -> None:
    """docs/estimate.md's server part names gpus.yaml's empty-server readings, and the
    range a card without one gets (the smallest and largest reading, then the allowance)."""
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith("| server |"))
    readings = [(r.gpu, r.baseline_mib) for r in published_readings()]
    assert readings, "gpus.yaml has no published readings"
    assert ", ".join(f"{gpu} {mib:g} MiB" for gpu, mib in readings) + ";" in row
    low, point, high = (size // MIB for size in SERVER_BASELINE_RANGE)
    assert f"other cards {low} / {point} / {high} MiB" in row


def _mlp(inplace: bool = False) -> Any:
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(inplace=inplace), torch.nn.Linear(8, 2)
    ).eval()


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_activation_peak_is_the_live_peak_not_the_sum(batch: int) -> None:
    # input (4) stays live; Linear1 out (8) and ReLU out (8) are live together; Linear1's
    # out is dropped before Linear2 makes its (2). Peak: 4 + 8 + 8 floats; sum: 4 + 8 + 8 + 2.
    trace = trace_torch(_mlp().to("meta"), (torch.empty(batch, 4, device="meta"),))
    assert trace.peak_bytes == batch * (4 + 8 + 8) * 4
    assert trace.input_bytes == batch * 4 * 4
    assert trace.output_bytes == batch * 2 * 4


def test_in_place_ops_add_nothing_and_precision_scales_floats() -> None:
    module = _mlp(inplace=True).to("meta")
    trace = trace_torch(module, (torch.empty(5, 4, device="meta"),))
    assert trace.peak_bytes == 5 * (4 + 8 + 2) * 4  # ReLU(inplace) reuses Linear1's output
    half = trace_torch(module, (torch.empty(5, 4, device="meta"),), float_bytes=2)
    assert half.peak_bytes == trace.peak_bytes // 2


def test_weights_of_a_tiny_bert_with_random_weights() -> None:
    transformers = pytest.importorskip("transformers")
    from mmelocal.testing.tiny_bert import tiny_bert_config

    config = tiny_bert_config()
    model = transformers.BertModel(config).eval()
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    # the same count from the config, by hand: embeddings, 2 layers, pooler
    assert (config.num_hidden_layers, config.type_vocab_size) == (2, 2)
    h, i = config.hidden_size, config.intermediate_size
    v, p = config.vocab_size, config.max_position_embeddings
    layer = 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h)
    expected = (v + p + 2) * h + 2 * h + 2 * layer + (h * h + h)
    assert params == expected
    weights = torch_weights(model)
    assert weights.params == params
    assert weights.total_bytes == params * 4 + buffers
    assert torch_weights(model, float_bytes=2).param_bytes == params * 2


def test_resnet18_random_weights_parameter_count_is_exact() -> None:
    torchvision = pytest.importorskip("torchvision")
    with torch.device("meta"):
        model = torchvision.models.resnet18(weights=None)
    assert torch_weights(model).params == 11_689_512  # torchvision's documented count
    trace = trace_torch(model.eval(), (torch.empty(2, 3, 224, 224, device="meta"),))
    assert trace.convolutions == 20 and trace.overlapping_convolutions == 17
    # the peak holds the input and at least the largest feature map (64 x 112 x 112)
    assert trace.peak_bytes >= trace.input_bytes + 2 * 64 * 112 * 112 * 4


def _onnx_mlp(path: Path) -> Path:
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.zeros((8, 4), np.float32), "w1"),
        numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
        numpy_helper.from_array(np.zeros((2, 8), np.float32), "w2"),
        numpy_helper.from_array(np.zeros(2, np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("Gemm", ["h2", "w2", "b2"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        initializer=inits,
    )
    onnx.save(helper.make_model(graph), path)
    return path


def test_onnx_shape_inference_gives_the_same_peak(tmp_path: Path) -> None:
    path = _onnx_mlp(tmp_path / "mlp.onnx")
    trace = trace_onnx(path, batch_size=6)
    assert trace.peak_bytes == 6 * (4 + 8 + 8) * 4
    assert trace.unknown_tensors == 0
    weights = onnx_weights(path)
    assert weights.params == 8 * 4 + 8 + 2 * 8 + 2
    assert weights.total_bytes == weights.params * 4


FACTS = ModelFacts(
    params=1_000_000,
    weight_bytes=4_000_000,
    weight_bytes_fp32=4_000_000,
    activation_bytes={1: 1 * MIB, 4: 4 * MIB, 8: 8 * MIB},
)
BATCHES = Batches(warmup=1, preferred=4, max=8, instances=2)


def test_libtorch_parts_and_count_follow_the_formula() -> None:
    parts = build_parts(FACTS, model_format="torchscript", batches=BATCHES)
    weights, acts, remainder, margin, runtime, server = parts
    # one 4 MB block of weights: a 20 MiB segment, per instance (two instances, two copies)
    assert weights.point_bytes == 2 * CUBLAS_SEGMENT_BYTES
    # the cuBLAS workspace (8.1 MiB) fits in what the weights left of their 20 MiB segment;
    # the 1 MiB of batch-1 activations is a small-pool block: one new 2 MiB segment
    assert acts.point_bytes == 2 * 2 * MIB
    assert remainder.point_bytes == 2 * SHIPPED.remainder[1]
    assert margin.point_bytes == 0 and margin.high_bytes == -margin.low_bytes > 0
    assert runtime.scope == server.scope == ONCE
    per_copy = weights.point_bytes + acts.point_bytes + remainder.point_bytes
    once = runtime.point_bytes + server.point_bytes
    assert sum_parts(parts, PER_COPY)[1] == per_copy
    total = 16 * 1024 * MIB
    expected = math.floor((0.9 * total - once) / per_copy)
    assert card_count(parts, memory_bytes=total, threshold=0.9)[1] == expected
    low, point, high = card_count(parts, memory_bytes=total, threshold=0.9)
    assert low <= point <= high


def test_the_request_batch_sets_the_activations_and_is_named() -> None:
    big = ModelFacts(
        params=1_000_000,
        weight_bytes=4_000_000,
        weight_bytes_fp32=4_000_000,
        activation_bytes={1: 1 * MIB, 4: 40 * MIB, 8: 80 * MIB},
    )
    served = Batches(warmup=4, preferred=4, max=8, request=8)
    assert served.activation == 8 and "served requests (batch 8)" in served.activation_driver
    warm = Batches(warmup=4, preferred=4, max=8)
    assert warm.activation == 4 and "warm-up (batch 4)" in warm.activation_driver
    assert "load: batch 1; warm-up: batch 4; served requests: batch 1" in warm.describe()
    none = Batches(warmup=0, preferred=4, max=8)
    assert none.activation == 1 and "warm-up: none" in none.describe()
    acts = [
        build_parts(big, model_format="torchscript", batches=b)[1] for b in (served, warm, none)
    ]
    assert "batch 8" in acts[0].name and "batch 4" in acts[1].name and "batch 1" in acts[2].name
    assert acts[0].point_bytes > acts[1].point_bytes > acts[2].point_bytes
    with pytest.raises(UserInputError, match="request batch"):
        Batches(warmup=1, preferred=1, max=1, request=0)


def test_tensorrt_parts_range_from_fp16_to_fp32_weights() -> None:
    facts = ModelFacts(
        params=1_000_000,
        weight_bytes=2_000_000,
        weight_bytes_fp32=4_000_000,
        activation_bytes={1: MIB, 8: 8 * MIB, 32: 32 * MIB},
    )
    batches = Batches(warmup=1, preferred=8, max=8, profile_max=32)
    engine, context, _, _ = build_parts(facts, model_format="tensorrt", batches=batches)
    assert (engine.low_bytes, engine.high_bytes) == (2_000_000, 4_000_000)
    assert context.low_bytes == int(32 * MIB * SHIPPED.trt_context[0])  # the profile's max
    assert "measure TensorRT models" in context.source  # why the range is wider


def test_int8_is_for_tensorrt_only_and_names_the_fix() -> None:
    assert check_precision("tensorrt", "int8") == 1
    with pytest.raises(UserInputError, match="--format tensorrt"):
        check_precision("torchscript", "int8")


def test_measurement_wins_and_round_trips_through_json() -> None:
    estimate = estimate_from_facts(
        FACTS, source="m", model_format="torchscript", precision="fp32", batches=BATCHES
    )
    card = GpuSpec(name="T4", memory_bytes=15360 * MIB, instances={"ml.g4dn.xlarge": 1})
    estimate = estimate.with_cards([card])
    measured = Measured(
        per_copy_bytes=100 * MIB,
        baseline_bytes=500 * MIB,
        count=120,
        total_bytes=15360 * MIB,
        probe="nvml",
        origin="run",
    )
    both = estimate.with_measurement(measured)
    assert both.cards[0].measured == math.floor((0.9 * 15360 - 500) / 100)
    again = Estimate.from_dict(json.loads(json.dumps(both.to_dict())))
    assert again.cards == both.cards and again.parts == both.parts
    host = estimate.with_measurement(Measured(**{**vars(measured), "probe": "host-pss"}))
    assert host.cards[0].measured is None  # host memory does not project to a GPU


def test_a_measurement_of_another_format_does_not_win() -> None:
    """TensorRT changes the footprint (CNNs about 2x, BERT-base smaller): a TorchScript
    capacity run is no measurement of the TensorRT artifact, and the other way round."""
    from mmelocal.cli.estimate import cards_table, summary_lines

    card = GpuSpec(name="T4", memory_bytes=15360 * MIB, instances={"ml.g4dn.xlarge": 1})
    trt = estimate_from_facts(
        FACTS, source="m", model_format="tensorrt", precision="fp16", batches=BATCHES
    ).with_cards([card])
    measured = Measured(
        per_copy_bytes=100 * MIB, baseline_bytes=500 * MIB, count=120,
        total_bytes=15360 * MIB, probe="nvml", origin="run", model_format="torchscript",
    )  # fmt: skip
    other = trt.with_measurement(measured)
    assert other.cards[0].measured is None
    lines = " ".join(summary_lines(other))
    assert "the measurement wins" not in lines and "torchscript" in lines
    assert len(cards_table(other).columns) == len(cards_table(trt).columns)  # no measured column
    same = trt.with_measurement(Measured(**{**vars(measured), "model_format": "tensorrt"}))
    assert same.cards[0].measured == math.floor((0.9 * 15360 - 500) / 100)
    # a capacity result carries its format into the measurement
    from types import SimpleNamespace

    from mmelocal.bench.estimate.model import measured_from_capacity

    capacity = SimpleNamespace(
        per_model_mean_bytes=100 * MIB, baseline_bytes=500 * MIB, count=120,
        total_bytes=15360 * MIB, probe="nvml", label="", source="m", model_format="torchscript",
    )  # fmt: skip
    assert measured_from_capacity(capacity).model_format == "torchscript"


def test_a_measurement_of_another_precision_does_not_win() -> None:
    """FP16 weights take half the bytes of FP32: a capacity run of FP32 weights is no
    measurement of an FP16 estimate. Like with like only; a measurement that does not record
    its precision (files written before it was recorded) is said to be so."""
    from types import SimpleNamespace

    from mmelocal.bench.estimate.model import measured_from_capacity
    from mmelocal.cli.estimate import cards_table, summary_lines

    card = GpuSpec(name="T4", memory_bytes=15360 * MIB, instances={"ml.g4dn.xlarge": 1})
    fp16 = estimate_from_facts(
        FACTS, source="m", model_format="torchscript", precision="fp16", batches=BATCHES
    ).with_cards([card])
    capacity = SimpleNamespace(
        per_model_mean_bytes=100 * MIB, baseline_bytes=500 * MIB, count=120,
        total_bytes=15360 * MIB, probe="nvml", label="", source="m", model_format="torchscript",
        precision="fp32",
    )  # fmt: skip
    measured = measured_from_capacity(capacity)
    assert measured.precision == "fp32"
    other = fp16.with_measurement(measured)
    assert other.cards[0].measured is None
    lines = " ".join(summary_lines(other))
    assert "the measurement wins" not in lines and "fp32" in lines and "fp16" in lines
    assert len(cards_table(other).columns) == len(cards_table(fp16).columns)
    same = fp16.with_measurement(Measured(**{**vars(measured), "precision": "fp16"}))
    assert same.cards[0].measured == math.floor((0.9 * 15360 - 500) / 100)
    again = Estimate.from_dict(json.loads(json.dumps(same.to_dict())))
    assert again.measured is not None and again.measured.precision == "fp16"
    unknown = fp16.with_measurement(Measured(**{**vars(measured), "precision": ""}))
    assert "does not record its precision" in " ".join(summary_lines(unknown))


def test_built_torchscript_folder_reads_its_config(tmp_path: Path) -> None:
    from mmelocal.bench.estimate.model import estimate_model

    folder = tmp_path / "mlp"
    (folder / "1").mkdir(parents=True)
    torch.jit.script(_mlp()).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 16\n'
        'input { name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }\n'
        'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [2] }\n'
        "dynamic_batching { preferred_batch_size: [4, 8] }\n"
        "instance_group { count: 2 kind: KIND_GPU }\n"
    )
    estimate = estimate_model(folder, instance_types=["ml.g4dn.xlarge"])
    assert estimate.model_format == "torchscript"
    assert estimate.batches == Batches(warmup=0, preferred=8, max=16, instances=2)
    assert estimate.params == 4 * 8 + 8 + 8 * 2 + 2
    assert estimate.activation_bytes[16] == 16 * (4 + 8 + 8) * 4
    assert [c.gpu for c in estimate.cards] == ["T4"]


def test_estimating_a_torchscript_prints_no_torch_deprecation(tmp_path: Path) -> None:
    """torch 2.9+ calls ``torch.jit.load`` deprecated (a FutureWarning that ``capacity
    estimate`` printed); that one warning is silenced around the call, and only there."""
    import warnings

    from mmelocal.bench.estimate.model import estimate_model

    folder = tmp_path / "mlp"
    (folder / "1").mkdir(parents=True)
    torch.jit.script(_mlp()).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        'input { name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }\n'
        'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [2] }\n'
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        estimate_model(folder, instance_types=["ml.g4dn.xlarge"])
        # a FutureWarning after it still shows: nothing was silenced for the caller
        warnings.warn("the caller's own warning", FutureWarning, stacklevel=1)
    messages = [str(w.message) for w in seen]
    assert not [m for m in messages if "torch.jit.load" in m], messages
    assert "the caller's own warning" in messages


#: instance_group -> the instances Triton places on the one GPU of a SageMaker GPU instance
#: (core src/model_config_utils.cc NormalizeInstanceGroup: no group is one KIND_AUTO group,
#: KIND_AUTO listing an absent GPU runs on the CPU, an unset count is 1 per listed GPU;
#: src/backend_model.cc: count instances for each entry of gpus)
GPU_INSTANCES = {
    "": 1,
    "instance_group { kind: KIND_GPU }": 1,
    "instance_group { count: 3 kind: KIND_GPU gpus: [0] }": 3,
    "instance_group [ { count: 2 kind: KIND_GPU }, { count: 3 kind: KIND_CPU } ]": 2,
    "instance_group [ { kind: KIND_AUTO }, { count: 4 kind: KIND_AUTO gpus: [1] } ]": 1,
    "instance_group [ { count: 2 kind: KIND_CPU }, { kind: KIND_MODEL } ]": 1,
}


def _torchscript_folder(tmp_path: Path, groups: str) -> Path:
    folder = tmp_path / "mlp"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.script(_mlp()).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 16\n'
        'input { name: "INPUT__0" data_type: TYPE_FP32 dims: [4] }\n'
        f'output {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [2] }}\n{groups}\n'
    )
    return folder


@pytest.mark.parametrize("groups", list(GPU_INSTANCES))
def test_a_config_s_copies_on_the_gpu_are_its_gpu_instances(tmp_path: Path, groups: str) -> None:
    from mmelocal.bench.estimate.model import estimate_model

    folder = _torchscript_folder(tmp_path, groups)
    estimate = estimate_model(folder, instance_types=["ml.g4dn.xlarge"])
    assert estimate.batches.instances == GPU_INSTANCES[groups]


@pytest.mark.parametrize(
    ("groups", "words"),
    [
        (
            "instance_group [ { count: 2 kind: KIND_CPU }, { kind: KIND_AUTO gpus: [3] } ]",
            "every instance of mlp runs on the CPU",
        ),
        (
            "instance_group { kind: KIND_GPU gpus: [0, 1] }",
            "instance group mlp_0 of model mlp specifies invalid or unsupported gpu id 1",
        ),
    ],
)
def test_a_config_with_no_instance_on_the_one_gpu_is_refused(
    tmp_path: Path, groups: str, words: str
) -> None:
    from mmelocal.bench.estimate.model import estimate_model

    folder = _torchscript_folder(tmp_path, groups)
    with pytest.raises(UserInputError, match=words):
        estimate_model(folder, instance_types=["ml.g4dn.xlarge"])


#: build options (the preset's, with the overrides a user gives) -> the instances on the one
#: GPU of a SageMaker GPU instance: the config the build writes, read as Triton reads it
#: (gpu_instances), as a built folder's is; None: refused with these words
BUILD_INSTANCES: list[tuple[dict[str, Any], int | str]] = [
    ({"instance_count": 2}, 2),
    ({"instance_count": 3, "kind": "gpu", "gpus": (0,)}, 3),
    ({"instance_count": 2, "kind": "cpu"}, "every instance of mlp runs on the CPU"),
    ({"kind": "gpu", "gpus": (0, 1)}, "specifies invalid or unsupported gpu id 1"),
]


@pytest.mark.parametrize(("overrides", "expected"), BUILD_INSTANCES, ids=str)
def test_the_build_options_instances_are_read_as_triton_reads_the_config(
    tmp_path: Path, overrides: dict[str, Any], expected: int | str
) -> None:
    """The estimate of a source took the build options' instance_count as it was: a
    KIND_CPU build (no GPU memory) or one listing a GPU the instance lacks was sized as
    copies on the GPU."""
    from mmelocal.bench.estimate.model import estimate_model

    path = _onnx_mlp(tmp_path / "mlp.onnx")

    def estimate() -> Any:
        return estimate_model(
            path, model_format="onnx", overrides=overrides, instance_types=["ml.g4dn.xlarge"]
        )

    if isinstance(expected, int):
        assert estimate().batches.instances == expected
    else:
        with pytest.raises(UserInputError, match=expected):
            estimate()


def test_cli_estimate_prints_parts_and_writes_json(tmp_path: Path) -> None:
    pytest.importorskip("torchvision")
    from click.testing import CliRunner

    from mmelocal.cli.main import cli

    out = tmp_path / "estimate.json"
    result = CliRunner().invoke(
        cli,
        [
            "capacity",
            "estimate",
            "torchvision:resnet18",
            "--instance-type",
            "ml.g4dn.xlarge,ml.g5.xlarge",
            "--request-batch",
            "64",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "one copy" in result.output and "T4" in result.output
    words = " ".join(result.output.split())
    # the batches assumed, and the one that set the activations (64 > the warm-up's 32)
    assert "load: batch 1; warm-up: batch 32; served requests: batch 64" in words
    assert "activations sized by the served requests (batch 64)" in words
    assert "published runs" in words and "projected" in words  # T4 checked, A10G projected
    data = json.loads(out.read_text())
    assert data["kind"] == "estimate" and data["params"] == 11_689_512
    assert data["batches"]["request"] == 64 and "64" in data["activation_bytes"]
    assert [c["projected"] for c in data["cards"]] == [False, True]
    assert any("cuDNN convolution workspace" in part["name"] for part in data["parts"])
    # traffic's --capacity FILE takes the estimate's own count on the card, the runtime and
    # server it pays once included (it once read a baseline key the file never had: 0)
    from mmelocal.cli.traffic import _capacity_for, _CapacityArgs

    t4 = next(c for c in data["cards"] if c["gpu"] == "T4")
    args = _CapacityArgs(None, None, 0.0, out, data["threshold"])
    assert _capacity_for("ml.g4dn.xlarge", args) == (t4["point"], "estimate, on T4")
    bad = CliRunner().invoke(
        cli, ["capacity", "estimate", "torchvision:resnet18", "--instance-type", "ml.nope"]
    )
    assert bad.exit_code != 0 and "unknown instance type" in str(bad.exception or bad.output)


def _capacity(source: str, probe: str) -> Any:
    from mmelocal.bench.capacity.result import CapacityResult, LoadRecord

    loads = tuple(
        LoadRecord(
            copies=i,
            target=f"m-{i}.tar.gz",
            used_bytes=(500 + 100 * i) * MIB,
            delta_bytes=100 * MIB,
            load_s=1.0,
            warmup_s=0.1,
        )
        for i in (1, 2, 3)
    )
    return CapacityResult(
        source=source,
        label=source,
        model_format="torchscript",
        probe=probe,
        total_bytes=15360 * MIB,
        threshold=0.9,
        baseline_bytes=500 * MIB,
        loads=loads,
        next_copy=None,
        stopped_reason="all copies loaded",
    )


@pytest.mark.parametrize(("probe", "wins"), [("nvml", True), ("host-pss", False)])
def test_report_shows_estimate_and_measurement_side_by_side(
    tmp_path: Path, probe: str, wins: bool
) -> None:
    from mmelocal.bench.report.page import write_report

    card = GpuSpec(name="T4", memory_bytes=15360 * MIB, instances={"ml.g4dn.xlarge": 1})
    estimate = estimate_from_facts(
        FACTS, source="m", model_format="torchscript", precision="fp32", batches=BATCHES
    ).with_cards([card])
    files = write_report([estimate, _capacity("m", probe)], tmp_path / "r")
    page = files.html.read_text()
    assert "Capacity estimate: m" in page
    assert ("the measurement wins" in page) is wins
    cards = (tmp_path / "r" / "estimate-1-cards.csv").read_text().splitlines()
    measured = cards[1].split(",")[-1]
    assert measured == (str(math.floor((0.9 * 15360 - 500) / 100)) if wins else "")


def test_onnx_model_folder_and_tarball(tmp_path: Path) -> None:
    import tarfile

    from mmelocal.bench.estimate.model import estimate_model

    folder = tmp_path / "mlp"
    (folder / "1").mkdir(parents=True)
    _onnx_mlp(folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input { name: "x" data_type: TYPE_FP32 dims: [4] }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: [2] }\n'
        'model_warmup { name: "w" batch_size: 4 inputs { key: "x" value '
        "{ data_type: TYPE_FP32 dims: [4] zero_data: true } } }\n"
    )
    tarball = tmp_path / "mlp.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(folder, arcname="mlp")
    for path in (folder, tarball):
        estimate = estimate_model(path, instance_types=["ml.g5.xlarge"])
        assert estimate.model_format == "onnx"
        assert estimate.batches == Batches(warmup=4, preferred=8, max=8)
        assert estimate.activation_bytes == {4: 4 * 80, 8: 8 * 80}
        activations = next(p for p in estimate.parts if "activations" in p.name)
        assert "batch 4" in activations.name  # the warm-up sets them
        assert activations.high_bytes - activations.low_bytes == 4 * 80  # ORT arena: up to 2x


def test_a_tensorrt_plan_asks_for_its_source(tmp_path: Path) -> None:
    from mmelocal.bench.estimate.model import estimate_model

    folder = tmp_path / "trt"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.plan").write_bytes(b"plan")
    (folder / "config.pbtxt").write_text('platform: "tensorrt_plan"\nmax_batch_size: 8\n')
    with pytest.raises(UserInputError, match="--format tensorrt"):
        estimate_model(folder)


def test_a_repository_root_estimates_every_model(tmp_path: Path) -> None:
    from mmelocal.bench.estimate.model import estimate_many

    for name in ("a", "b"):
        (tmp_path / name / "1").mkdir(parents=True)
        _onnx_mlp(tmp_path / name / "1" / "model.onnx")
        (tmp_path / name / "config.pbtxt").write_text(
            f'platform: "onnxruntime_onnx"\nmax_batch_size: {4 if name == "a" else 2}\n'
            'input { name: "x" data_type: TYPE_FP32 dims: [4] }\n'
            'output { name: "y" data_type: TYPE_FP32 dims: [2] }\n'
        )
    found = estimate_many(tmp_path, instance_types=["ml.g4dn.xlarge"])
    assert [e.source.rsplit("/", 1)[-1] for e in found] == ["a", "b"]
    assert [e.batches.max for e in found] == [4, 2]


def test_runtime_once_is_the_published_first_copy_excess() -> None:
    from mmelocal.bench.estimate.published import PUBLISHED

    # independent: first reading - empty server - slope of the curve, for conv PyTorch rows
    rows = [
        r for r in PUBLISHED if r.platform == "pytorch_libtorch" and r.model != "bert-base-uncased"
    ]
    rows = [r for r in rows if r.model != "roberta-large"]
    excess = [
        r.first_util * r.total_mib
        - r.baseline_mib
        - (r.last_util - r.first_util) / (r.printed - 1) * r.total_mib
        for r in rows
    ]
    facts = ModelFacts(
        params=1,
        weight_bytes=4,
        weight_bytes_fp32=4,
        activation_bytes={1: 1},
        convolutions=1,
    )
    batches = Batches(warmup=1, preferred=1, max=1)
    runtime = next(
        p
        for p in build_parts(facts, model_format="torchscript", batches=batches)
        if p.name.startswith("runtime")
    )
    assert abs(runtime.low_bytes - min(excess) * MIB) < MIB
    assert abs(runtime.high_bytes - max(excess) * MIB) < MIB
    assert 700 < min(excess) <= max(excess) < 800  # libtorch + cuBLAS + cuDNN on a T4/V100


def test_a_hugging_face_folder_needs_only_its_config(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from mmelocal.bench.estimate.model import estimate_model
    from mmelocal.testing.tiny_bert import tiny_bert_config

    config = tiny_bert_config()
    config.save_pretrained(tmp_path)  # config.json only: no weights in the folder
    estimate = estimate_model(tmp_path, seq_len=16, instance_types=["ml.g4dn.xlarge"])
    expected = sum(p.numel() for p in transformers.BertModel(config).parameters())
    assert estimate.params == expected
    assert estimate.batches.max == 8  # the bert preset's max_batch_size
    assert "no weights read" in " ".join(estimate.notes)


@pytest.mark.mmelocal_gpu
def test_traced_peak_equals_what_the_cuda_caching_allocator_allocates() -> None:
    """On a GPU: the activations the trace predicts are what PyTorch's CUDA caching allocator
    hands out during one forward pass (sizes chosen as multiples of its 512-byte rounding;
    a first pass makes the cuBLAS handle and workspace, which stay allocated)."""
    import copy

    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA build")
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 128),
    ).eval()
    x = torch.randn(64, 256)
    traced = trace_torch(copy.deepcopy(model).to("meta"), (x.to("meta"),))
    cuda_model, cuda_x = model.cuda(), x.cuda()
    with torch.no_grad():
        cuda_model(cuda_x)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = cuda_model(cuda_x)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    assert out.shape == (64, 128)
    assert peak - before == traced.peak_bytes - traced.input_bytes


def test_the_report_pairs_an_estimate_only_with_a_measurement_of_its_format(
    tmp_path: Path,
) -> None:
    from mmelocal.bench.capacity.result import CapacityResult, LoadRecord
    from mmelocal.bench.report import write_report

    card = GpuSpec(name="T4", memory_bytes=15360 * MIB, instances={"ml.g4dn.xlarge": 1})
    trt = estimate_from_facts(
        FACTS, source="m", model_format="tensorrt", precision="fp16", batches=BATCHES
    ).with_cards([card])
    loads = tuple(
        LoadRecord(copies=i + 1, target=f"m-v{i}", used_bytes=(i + 6) * 100 * MIB,
                   delta_bytes=100 * MIB, load_s=1.0, warmup_s=0.0)
        for i in range(3)
    )  # fmt: skip
    pytorch_run = CapacityResult(
        source="m", label="m", model_format="torchscript", probe="nvml: 1 x Tesla T4",
        total_bytes=15360 * MIB, threshold=0.9, baseline_bytes=500 * MIB, loads=loads,
        next_copy=None, stopped_reason="test",
    )  # fmt: skip
    page = write_report([trt, pytorch_run], tmp_path).html.read_text()
    assert "the measurement wins" not in page


def test_a_built_hugging_face_torchscript_is_estimated_like_its_source(
    tiny_bert_dir: Path, tmp_path: Path
) -> None:
    """What ``mmelocal build`` writes for a Hugging Face model (a traced TorchScript whose
    constants ``torch.jit.load`` compares, which meta tensors cannot) is estimated from the
    folder and the tarball too: the source's weights, activations at the same batches
    (the traced graph's own: its attention is not the eager model's)."""
    pytest.importorskip("transformers")
    from mmelocal.bench.estimate.model import estimate_model
    from mmelocal.builder.build import BuildOptions, build_model
    from mmelocal.builder.package import package_model

    built = build_model(
        str(tiny_bert_dir), repo=tmp_path / "repo", options=BuildOptions(verify=False)
    )
    tarball = package_model(built.model_dir, tmp_path / "store")
    source = estimate_model(tiny_bert_dir, seq_len=16, instance_types=["ml.g4dn.xlarge"])
    for path in (built.model_dir, tarball):
        estimate = estimate_model(path, seq_len=16, instance_types=["ml.g4dn.xlarge"])
        assert estimate.model_format == "torchscript"
        assert estimate.params == source.params
        assert estimate.batches == source.batches
        assert estimate.activation_bytes.keys() == source.activation_bytes.keys()
        assert all(value > 0 for value in estimate.activation_bytes.values())
