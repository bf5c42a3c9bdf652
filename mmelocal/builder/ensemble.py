"""The checks Triton applies to an ensemble before it serves it, in Triton's words.

Two stages, as in Triton's core (r24.10):

* :func:`schedule_problems`, the config alone (``ValidateEnsembleSchedulingConfig`` and
  ``BuildEnsembleGraph`` in ``src/model_config_utils.cc``, run when the config is read):
  no ``instance_group`` / ``optimization`` / ``model_warmup``, at least one step, each
  step naming its model and mapping inputs and outputs, every ensemble input used, every
  ensemble output written from the inputs, no ensemble tensor left unused;
* :func:`step_problems`, against the configs of the composing models
  (``ValidateEnsembleConfig`` and ``ValidateTensorMapping`` in
  ``src/ensemble_scheduler/ensemble_utils.cc``, run once the steps are loaded): a step's
  ``max_batch_size`` not below the ensemble's, every ``input_map`` key an input of the
  step and every required input mapped, every ``output_map`` key an output of the step,
  and one data type and one shape for each ensemble tensor wherever it is used.

Triton stops at the first problem; these functions return them all. A step whose config
lists no inputs and no outputs (its backend completes them at load) is not checked
against, since its tensors are only known then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ENSEMBLE_PLATFORM = "ensemble"
#: a dimension of any size (Triton's ``WILDCARD_DIM``)
WILDCARD = -1


def schedule_problems(cfg: Any) -> list[str]:
    """What Triton refuses in an ensemble's config on its own (its messages)."""
    name = str(cfg.name)
    is_ensemble = cfg.platform == ENSEMBLE_PLATFORM
    if not cfg.HasField("ensemble_scheduling"):
        if is_ensemble:
            return [
                f"ensemble scheduling must be set for ensemble {name} whose platform is "
                f"{ENSEMBLE_PLATFORM}"
            ]
        return []
    if not is_ensemble:
        return [
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not "
            f"{ENSEMBLE_PLATFORM}"
        ]
    problems = []
    if cfg.instance_group:
        problems.append(f"instance group should not be specified for ensemble '{name}'")
    if cfg.HasField("optimization"):
        problems.append(f"optimization should not be specified for ensemble '{name}'")
    if cfg.model_warmup:
        problems.append(f"model_warmup can not be specified for ensemble '{name}'")
    steps = cfg.ensemble_scheduling.step
    if not steps:
        return [*problems, f"must specify 'step' for ensemble '{name}'"]
    graph, graph_problems = _graph(cfg)
    if graph_problems:
        return problems + graph_problems
    return problems + _flow_problems(cfg, graph)


@dataclass
class _Node:
    """An ensemble tensor in the data-flow graph (Triton's ``EnsembleTensor``)."""

    name: str
    is_output: bool = False
    ready: bool = False
    prev: list[_Node] = field(default_factory=list)
    next: list[_Node] = field(default_factory=list)


def _graph(cfg: Any) -> tuple[dict[str, _Node], list[str]]:
    name = str(cfg.name)
    graph: dict[str, _Node] = {}
    problems = []
    for index, step in enumerate(cfg.ensemble_scheduling.step):
        where = f"step {index} of ensemble '{name}'"
        missing = [
            what
            for what, empty in (
                ("model_name", not step.model_name),
                ("input_map", not step.input_map),
                ("output_map", not step.output_map),
            )
            if empty
        ]
        if missing:
            problems += [f"must specify '{what}' in {where}" for what in missing]
            continue
        produced = []
        for tensor in step.output_map.values():
            node = graph.get(tensor)
            if node is None:
                node = graph[tensor] = _Node(tensor, is_output=True)
            elif node.is_output:
                problems.append(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' step {index}"
                )
            node.is_output = True
            produced.append(node)
        for tensor in step.input_map.values():
            node = graph.setdefault(tensor, _Node(tensor))
            for out in produced:
                out.prev.append(node)
                node.next.append(out)
    return graph, problems


def _flow_problems(cfg: Any, graph: dict[str, _Node]) -> list[str]:
    name = str(cfg.name)
    problems = []
    queue = []
    for tensor in cfg.input:
        node = graph.get(tensor.name)
        if node is None:
            problems.append(f"ensemble input '{tensor.name}' for ensemble {name}' is not used")
            continue
        node.ready = True
        queue.append(node)
    while queue:
        node = queue.pop(0)
        for after in node.next:
            if not after.ready and all(p.ready for p in after.prev):
                after.ready = True
                queue.append(after)
    outputs = set()
    for tensor in cfg.output:
        node = graph.get(tensor.name)
        if node is None:
            problems.append(f"ensemble output '{tensor.name}' for ensemble {name}' is not used")
        elif not node.ready:
            problems.append(_not_written(name, node))
        else:
            outputs.add(tensor.name)
    for tensor, node in graph.items():
        if tensor not in outputs and (not node.ready or not node.next):
            problems.append(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")
    return problems


def _not_written(ensemble: str, node: _Node) -> str:
    message = f"output '{node.name}' for ensemble '{ensemble}' is not written"
    source, seen = node, set()
    prev = node.prev
    while prev:
        candidates = [p for p in prev if not p.ready and p.name not in seen]
        if not candidates:
            break
        source = candidates[0]
        seen.add(source.name)
        prev = source.prev
    if source is not node:
        message += f": at least one of its depending tensors, '{source.name}', is not connected"
    return message


@dataclass(frozen=True)
class _Tensor:
    """Where an ensemble tensor's type and shape were inferred from (``TensorNode``)."""

    model: str
    data_type: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]


def _tensor(model: str, batching: bool, data_type: int, dims: Any) -> _Tensor:
    shape = tuple(int(d) for d in dims)
    return _Tensor(model, data_type, shape, ((WILDCARD,) if batching else ()) + shape)


def step_problems(cfg: Any, steps: Mapping[str, Any]) -> list[str]:
    """What Triton refuses in an ensemble once its steps are known: ``steps`` maps a step's
    model name to its config (a step absent from it is not checked)."""
    name = str(cfg.name)
    batching = cfg.max_batch_size > 0
    known: dict[str, _Tensor] = {}
    for io in (*cfg.input, *cfg.output):
        dims = io.reshape.shape if io.HasField("reshape") else io.dims
        known.setdefault(io.name, _tensor(name, batching, io.data_type, dims))
    problems = []
    for step in cfg.ensemble_scheduling.step:
        model = steps.get(step.model_name)
        if model is None or (not model.input and not model.output):
            continue
        if 0 < model.max_batch_size < cfg.max_batch_size:
            problems.append(
                f"ensemble {name} allows maximum batch size {cfg.max_batch_size}, but it "
                f"contains model {step.model_name} which only allows maximum batch size to "
                f"be {model.max_batch_size}"
            )
        problems += _mapping_problems(name, step, model, known)
    return problems


def _mapping_problems(ensemble: str, step: Any, model: Any, known: dict[str, _Tensor]) -> list[str]:
    step_name = str(step.model_name)
    batching = model.max_batch_size > 0
    prefix = f"in ensemble {ensemble}, "
    problems = []
    inputs = {t.name: t for t in model.input}
    for key, tensor in step.input_map.items():
        if key not in inputs:
            problems.append(
                f"{prefix}ensemble tensor {tensor} is mapping to non-existing input {key} in "
                f"model {step_name}"
            )
    for key, io in inputs.items():
        if key in step.input_map:
            tensor = step.input_map[key]
            mine = _tensor(step_name, batching, io.data_type, io.dims)
            problems += _consistency(prefix, tensor, known.setdefault(tensor, mine), mine)
        elif not io.optional:
            problems.append(
                f"{prefix}input {key} in model {step_name} is not mapped to any ensemble tensors"
            )
    outputs = {t.name: t for t in model.output}
    for key, tensor in step.output_map.items():
        if key not in outputs:
            problems.append(
                f"{prefix}ensemble tensor {tensor} is mapped from non-existing output {key} in "
                f"model {step_name}"
            )
            continue
        io = outputs[key]
        mine = _tensor(step_name, batching, io.data_type, io.dims)
        problems += _consistency(prefix, tensor, known.setdefault(tensor, mine), mine)
    return problems


def _consistency(prefix: str, tensor: str, first: _Tensor, other: _Tensor) -> list[str]:
    """Triton's ``ValidateTensorConsistency`` of ``tensor`` as two models see it."""
    from tritonclient.grpc import model_config_pb2 as pb

    where = f"{prefix}ensemble tensor {tensor}: "
    if first.data_type != other.data_type:
        return [
            f"{where}inconsistent data type: {pb.DataType.Name(first.data_type)} is inferred "
            f"from model {first.model} while {pb.DataType.Name(other.data_type)} is inferred "
            f"from model {other.model}"
        ]
    if not _dims_match(first.dims, other.dims) and not _dims_match(
        first.full_dims, other.full_dims
    ):
        return [
            f"{where}inconsistent shape: {_dims_text(first.full_dims)} is inferred from model "
            f"{first.model} while {_dims_text(other.full_dims)} is inferred from model "
            f"{other.model}"
        ]
    return []


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Triton's ``CompareDimsWithWildcard``."""
    return len(a) == len(b) and all(x == y or WILDCARD in (x, y) for x, y in zip(a, b, strict=True))


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


__all__ = ["ENSEMBLE_PLATFORM", "schedule_problems", "step_problems"]
