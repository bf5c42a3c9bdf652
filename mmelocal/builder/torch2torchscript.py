"""PyTorch module -> TorchScript (``torch.jit.trace``) for Triton's ``pytorch_libtorch``.

Tensor names follow the PyTorch backend's conventions, which a TorchScript file
cannot otherwise carry:

* inputs keep the names of the ``forward`` arguments when those equal the source's
  input names (``input_ids``, ``attention_mask`` for text models: Triton matches
  config inputs to forward arguments by name); otherwise they are
  ``<name>__<index>`` (``pixel_values__0`` for image models, whose forward takes ``x``);
* outputs are ``<name>__<index>`` (``last_hidden_state__0``, ``pooler_output__1``,
  ``logits__0``): the index is the position in the returned tuple, which is how
  Triton maps TorchScript outputs.

The trace is checked against the eager module on a second input of another batch
size and sequence length (``check_trace``), so a trace that baked in a shape fails
here and not in Triton. Dims in the signature are measured by running the saved file.

Tracing runs on the CPU and records the device of tensors the model creates (Hugging
Face attention masks: ``arange(..., device="cpu")``, ``mask.to("cpu")``). Served on a
GPU that would mix CPU and CUDA tensors, so after tracing every ``cpu`` device constant
is replaced by the device of the first input (``prim::device(input_ids)``): the saved
model runs wherever Triton puts its inputs. :func:`cpu_device_constants` counts what is
left (0 for our exports).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mmelocal.builder.artifact import ExportedArtifact, measure_signature
from mmelocal.builder.runners import (
    first_line,
    import_torch,
    load_torchscript,
    quiet_warnings,
    run_torchscript_module,
)
from mmelocal.builder.sources.base import ModelSource
from mmelocal.builder.sources.shapes import probe_seq_lens
from mmelocal.errors import ExportError


def torchscript_names(
    source: ModelSource, forward_args: tuple[str, ...]
) -> tuple[dict[str, str], dict[str, str]]:
    """(input name map, output name map) from readable source names to TorchScript names."""
    if forward_args == source.input_names:
        inputs = {n: n for n in source.input_names}
    else:
        inputs = {n: f"{n}__{i}" for i, n in enumerate(source.input_names)}
    outputs = {n: f"{n}__{i}" for i, n in enumerate(source.output_names)}
    return inputs, outputs


def export_torchscript(source: ModelSource, out_path: Path | str) -> ExportedArtifact:
    """Trace ``source.module`` (or copy an existing TorchScript file) to ``out_path``."""
    torch = import_torch("TorchScript export")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    copied = source.file_format == "torchscript" and source.file is not None
    if copied:
        assert source.file is not None
        shutil.copyfile(source.file, out)
    elif source.module is None:
        raise ExportError(
            f"{source.spec} is an ONNX file; it cannot become TorchScript. Build it as "
            "--format onnx (or tensorrt)"
        )
    else:
        _trace_and_save(torch, source, out)
    module = load_torchscript(out)
    forward_args = tuple(a.name for a in module.forward.schema.arguments if a.name != "self")
    if len(forward_args) != len(source.input_names):
        raise ExportError(
            f"{out.name} takes {len(forward_args)} inputs {list(forward_args)}, the source "
            f"has {len(source.input_names)}"
        )
    in_map, out_map = torchscript_names(source, forward_args)
    s1, s2 = probe_seq_lens(source.seq_len)
    signature, batch_dynamic = measure_signature(
        lambda inputs: run_torchscript_module(module, inputs, tuple(out_map.values())),
        source.make_inputs(2, s1, seed=0),
        source.make_inputs(3, s2, seed=1),
        input_names=in_map,
        output_names=out_map,
    )
    notes = ("copied from the source file",) if copied else ()
    return ExportedArtifact(
        path=out,
        format="torchscript",
        signature=signature,
        batch_dynamic=batch_dynamic,
        name_map={**in_map, **out_map},
        copied_from_source=copied,
        notes=notes,
    )


def _trace_and_save(torch: Any, source: ModelSource, out: Path) -> None:
    example = tuple(source.example_inputs.values())
    s1, s2 = probe_seq_lens(source.seq_len)
    check = tuple(source.make_inputs(3, s2 if s2 is not None else s1, seed=1).values())
    with torch.no_grad(), quiet_warnings():
        try:
            traced = torch.jit.trace(
                source.module,
                example,
                check_trace=True,
                check_inputs=[check],
                strict=False,
            )
        except Exception as exc:
            raise ExportError(
                f"torch.jit.trace failed for {source.spec}: {first_line(exc)}"
            ) from None
    follow_input_device(traced)
    tmp = out.with_name(out.name + ".tmp")
    try:
        traced.save(str(tmp))
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)


def follow_input_device(traced: Any) -> int:
    """Replace ``cpu`` device constants in a traced module by its first input's device.

    The forward graph is inlined first so constants inside submodules are reached.
    Returns how many constants were replaced.
    """
    torch = import_torch("TorchScript export")
    graph = traced.graph
    torch._C._jit_pass_inline(graph)
    constants = _cpu_device_nodes(graph)
    if not constants:
        return 0
    tensors = [v for v in list(graph.inputs())[1:] if v.type().kind() == "TensorType"]
    if not tensors:
        return 0
    device = graph.create("prim::device", [tensors[0]], 1)
    device.output().setType(torch._C.DeviceObjType.get())
    device.insertBefore(next(iter(graph.nodes())))
    for node in constants:
        node.output().replaceAllUsesWith(device.output())
        node.destroy()
    return len(constants)


def cpu_device_constants(module: Any) -> int:
    """How many ``cpu`` device constants a TorchScript module's inlined forward still has."""
    return len(_cpu_device_nodes(module.inlined_graph))


def _cpu_device_nodes(graph: Any) -> list[Any]:
    return [
        n
        for n in graph.findAllNodes("prim::Constant")
        if n.output().type().kind() == "DeviceObjType" and _device_type(n) == "cpu"
    ]


def _device_type(node: Any) -> str | None:
    try:
        return str(node.output().toIValue().type)
    except Exception:  # not a constant we can read: leave it alone
        return None


__all__ = [
    "cpu_device_constants",
    "export_torchscript",
    "follow_input_device",
    "torchscript_names",
]
