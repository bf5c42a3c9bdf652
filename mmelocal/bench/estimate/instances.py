"""How many copies of a model Triton places on the GPU of one SageMaker MME GPU instance,
read from its ``instance_group`` as Triton reads it (the estimate's ``instances``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmelocal.builder.backends import backend_of, default_instance_count
from mmelocal.errors import UserInputError

#: the GPU ids of a SageMaker MME GPU instance, as Triton numbers them (one GPU each)
MME_GPU_IDS = frozenset({0})


def gpu_instances(cfg: Any, model_dir: Path, source: Path | str) -> int:
    """The instances of ``cfg`` Triton places on the GPU of one SageMaker MME GPU instance.

    As Triton normalises the groups (core ``NormalizeInstanceGroup``,
    ``src/model_config_utils.cc``): no group is one ``KIND_AUTO`` group; ``KIND_AUTO`` is
    ``KIND_CPU`` when it lists a GPU the instance lacks, else ``KIND_GPU``; a ``KIND_GPU``
    group with no ``gpus`` gets every GPU, and ``count`` (default
    :func:`~mmelocal.builder.backends.default_instance_count`) instances for each GPU it
    lists (``src/backend_model.cc``). ``KIND_CPU`` instances hold no GPU memory.
    ``KIND_MODEL`` instances (the model places itself) are counted as on the GPU.

    Raises :class:`UserInputError` when a ``KIND_GPU`` group lists a GPU the instance lacks
    (Triton refuses the load, in the words used here: ``ValidateInstanceGroup``) or when
    no instance runs on the GPU (the estimate sizes GPU memory; there is none to size).
    """
    from tritonclient.grpc import model_config_pb2 as pb

    kinds = pb.ModelInstanceGroup
    model = str(cfg.name) or model_dir.name
    groups = list(cfg.instance_group) or [kinds(kind=kinds.KIND_AUTO)]
    total = 0
    for index, group in enumerate(groups):
        kind = group.kind
        if kind == kinds.KIND_AUTO:
            absent = any(g not in MME_GPU_IDS for g in group.gpus)
            kind = kinds.KIND_CPU if absent else kinds.KIND_GPU
        if kind == kinds.KIND_CPU:
            continue
        count = (
            int(group.count)
            if group.count >= 1
            else default_instance_count(kind=kinds.Kind.Name(kind), backend=backend_of(cfg))
        )
        if kind != kinds.KIND_GPU:
            total += count
            continue
        absent_ids = [g for g in group.gpus if g not in MME_GPU_IDS]
        if absent_ids:
            raise UserInputError(
                f"{source}: instance group {group.name or f'{model}_{index}'} of model {model} "
                f"specifies invalid or unsupported gpu id {absent_ids[0]}: Triton refuses "
                "the load on a SageMaker GPU instance, which has one GPU (id 0); list "
                "gpus: [0] or leave gpus out"
            )
        total += count * (len(group.gpus) or len(MME_GPU_IDS))
    if total == 0:
        raise UserInputError(
            f"{source}: every instance of {model} runs on the CPU (instance_group KIND_CPU, "
            "or KIND_AUTO listing a GPU other than 0), so its copies hold no GPU memory and "
            "the estimate, which sizes GPU memory, has nothing to size; set kind: KIND_GPU "
            "(or leave instance_group out) to estimate the model on a GPU"
        )
    return total


__all__ = ["MME_GPU_IDS", "gpu_instances"]
