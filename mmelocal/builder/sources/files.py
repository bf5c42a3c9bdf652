"""Existing artifacts: a TorchScript ``.pt`` or an ``.onnx`` file, used without re-export.

ONNX: names, dtypes and dims come from the graph; random inputs are made from them
(``-1`` axes take the batch size or the sequence length; ``token_type_ids`` are all 0, one
segment, the only id every segment embedding holds; an integer input that indexes a table
(a ``Gather`` on an initializer: an embedding) draws ids below the table's size, else
below ``vocab_size`` of a ``config.json`` beside the file for ``input_ids``, else below
100). TorchScript files carry no shapes, so only two common forms are recognised from
the ``forward`` argument names: ``(input_ids, attention_mask)`` (a text model, int64
``(batch, seq_len)``; also with ``token_type_ids``, all 0, as a BERT traced on its
tokenizer's output takes) and a single argument (an image model, float32
``(batch, 3, 224, 224)``, named ``pixel_values`` -> ``logits`` like the image sources).
Anything else should come through the Python API,
:func:`~mmelocal.builder.sources.source_from_module` with ``torch.jit.load(path)`` and
example inputs.

Building the same format as the file copies it; the verifier then has nothing
independent to compare with and says so (unless a reference ``.npz`` is given).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmelocal.builder.runners import (
    call_module,
    import_torch,
    load_torchscript,
)
from mmelocal.builder.sources.base import (
    ModelSource,
    float_image_factory,
    suggest_name,
    token_factory,
)
from mmelocal.builder.sources.shapes import infer_dynamic_axes
from mmelocal.errors import ExportError, SourceError, UserInputError

_NLP_INPUTS = ("input_ids", "attention_mask")
#: a BERT traced on its tokenizer's whole output
_SEGMENT_INPUTS = (*_NLP_INPUTS, "token_type_ids")
_FALLBACK_VOCAB = 100


def load_onnx_file(
    path: Path, *, spec: str, name: str | None = None, seq_len: int = 128
) -> ModelSource:
    """An existing ONNX model; the signature is read from its graph."""
    from mmelocal.builder.tensors import load_onnx_graph, onnx_signature, triton_to_numpy

    try:
        graph = load_onnx_graph(path)  # read once: the signature and the index bounds
        signature, batch_dynamic = onnx_signature(graph, path, strip_batch=False)
    except UserInputError as exc:
        raise SourceError(str(exc), source=spec) from None
    if not batch_dynamic:
        raise SourceError(
            f"{path} has a fixed first axis; mmelocal builds batching models, so export it "
            "with a dynamic batch axis (dynamic_axes={name: {0: 'batch'}})",
            source=spec,
        )
    names = signature.input_names
    kind = "nlp" if set(_NLP_INPUTS) <= set(names) else "generic"
    specs = {s.name: (triton_to_numpy(s.data_type), s.dims) for s in signature.inputs}
    bounds = index_bounds(graph, names, config_dir=path.parent)

    def factory(batch_size: int, length: int | None, seed: int) -> dict[str, Any]:
        torch = import_torch("making example inputs")
        import numpy as np

        rng = np.random.default_rng(seed)
        made: dict[str, Any] = {}
        for n, (dtype, dims) in specs.items():
            shape = [batch_size] + [(length or 8) if d == -1 else d for d in dims[1:]]
            high = bounds.get(n, _FALLBACK_VOCAB)
            made[n] = torch.from_numpy(_random_array(rng, n, dtype, tuple(shape), high))
        return made

    axes: dict[str, dict[int, str]] = {}
    for s in signature.inputs + signature.outputs:
        axes[s.name] = {
            i: ("batch" if i == 0 else "sequence" if kind == "nlp" else f"{s.name}_dim{i}")
            for i, d in enumerate(s.dims)
            if d == -1
        }
    has_seq = any(-1 in s.dims[1:] for s in signature.inputs)
    length = seq_len if has_seq else None
    return ModelSource(
        spec=spec,
        name=name or file_model_name(path),
        kind=kind,
        family=None,
        input_names=names,
        output_names=signature.output_names,
        example_inputs=factory(2, length, 0),
        input_factory=factory,
        dynamic_axes=axes,
        file=path,
        file_format="onnx",
        seq_len=length,
        notes=(f"{path.name} is used as it is (no re-export)",),
    )


#: ops an index passes through unchanged on its way to the table it indexes
_INDEX_PASSTHROUGH = frozenset({"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten"})


def index_bounds(graph: Any, names: tuple[str, ...], *, config_dir: Path) -> dict[str, int]:
    """For each input of ``names`` that indexes a table of the ONNX ``graph`` (a ``Gather``
    whose data is an initializer, as an embedding is), the table's size along the gathered
    axis: valid ids are below it. An input that indexes several tables gets the smallest.
    Without such a table, ``input_ids`` gets ``vocab_size`` from a ``config.json`` in
    ``config_dir`` (beside the file: a Hugging Face export's), when there is one."""
    tables = {init.name: list(init.dims) for init in graph.initializer}
    consumers: dict[str, list[tuple[Any, int]]] = {}
    for node in graph.node:
        for position, tensor in enumerate(node.input):
            consumers.setdefault(tensor, []).append((node, position))
    bounds: dict[str, int] = {}
    for name in names:
        sizes = _gathered_sizes(name, consumers, tables)
        if sizes:
            bounds[name] = min(sizes)
    if "input_ids" in names and "input_ids" not in bounds:
        vocab = _config_vocab_size(config_dir / "config.json")
        if vocab is not None:
            bounds["input_ids"] = vocab
    return bounds


def _gathered_sizes(
    name: str, consumers: dict[str, list[tuple[Any, int]]], tables: dict[str, list[int]]
) -> list[int]:
    sizes: list[int] = []
    frontier, seen = [name], set()
    while frontier:
        tensor = frontier.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for node, position in consumers.get(tensor, []):
            if node.op_type == "Gather" and position == 1 and node.input[0] in tables:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                dims = tables[node.input[0]]
                if -len(dims) <= axis < len(dims) and dims[axis] > 0:
                    sizes.append(int(dims[axis]))
            elif node.op_type in _INDEX_PASSTHROUGH and position == 0:
                frontier.extend(node.output)
    return sizes


def _config_vocab_size(path: Path) -> int | None:
    import json

    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _random_array(
    rng: Any, name: str, dtype: Any, shape: tuple[int, ...], high: int = _FALLBACK_VOCAB
) -> Any:
    import numpy as np

    if name == "attention_mask":
        mask = np.ones(shape, dtype=dtype)
        if len(shape) == 2 and shape[0] > 1:
            mask[1:, max(1, shape[1] // 2) :] = 0
        return mask
    if name == "token_type_ids":
        return np.zeros(shape, dtype=dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(1 if high > 1 else 0, high, shape).astype(dtype)


def load_torchscript_file(
    path: Path,
    *,
    spec: str,
    name: str | None = None,
    seq_len: int = 128,
    batch_size: int = 2,
) -> ModelSource:
    """An existing TorchScript model whose input form can be recognised (see module doc)."""
    try:
        module = load_torchscript(path)
    except ExportError as exc:  # here the file is the user's source
        raise SourceError(str(exc), source=spec) from None
    args = tuple(a.name for a in module.forward.schema.arguments if a.name != "self")
    inputs: tuple[str, ...]
    length: int | None
    if args in (_NLP_INPUTS, _SEGMENT_INPUTS):
        factory = token_factory(vocab_size=_vocab_size(module), pad_id=0, low_id=1)
        if args == _SEGMENT_INPUTS:
            factory = _with_segment_ids(factory)
        kind, length, inputs = "nlp", seq_len, args
    elif len(args) == 1:
        factory = float_image_factory((3, 224, 224))
        kind, length, inputs = "cv", None, ("pixel_values",)
    else:
        raise SourceError(
            f"{path} takes {list(args)}; mmelocal recognises (input_ids, attention_mask) or a "
            "single image tensor. Build it from Python: source_from_module("
            "torch.jit.load(path), example_inputs={...}, name=...)",
            source=spec,
        )
    example = factory(batch_size, length, 0)
    count = len(
        call_module(
            module,
            example,
            lambda why: SourceError(
                f"{path} failed on a {kind} example with {why}; build it from Python with "
                "source_from_module(torch.jit.load(path), example_inputs=...)",
                source=spec,
            ),
        )
    )
    if kind == "cv" and count == 1:
        outputs: tuple[str, ...] = ("logits",)
    else:
        outputs = ("output",) if count == 1 else tuple(f"output{i}" for i in range(count))
    axes = infer_dynamic_axes(module, factory, inputs, outputs, length)
    return ModelSource(
        spec=spec,
        name=name or file_model_name(path),
        kind=kind,
        family=None,
        input_names=inputs,
        output_names=outputs,
        example_inputs=dict(zip(inputs, example.values(), strict=True)),
        input_factory=factory,
        dynamic_axes=axes,
        module=module,
        file=path,
        file_format="torchscript",
        seq_len=length,
        notes=(f"{path.name} is used as it is (no re-trace)",),
    )


def _with_segment_ids(factory: Any) -> Any:
    """``factory`` with ``token_type_ids`` added: all 0, one segment (the only id every
    segment embedding holds)."""

    def with_segments(batch_size: int, length: int | None, seed: int) -> dict[str, Any]:
        made = factory(batch_size, length, seed)
        return {**made, "token_type_ids": made["input_ids"].new_zeros(made["input_ids"].shape)}

    return with_segments


def file_model_name(path: Path) -> str:
    """A model name for a file: its stem, or for ``<model>/<version>/model.pt`` the model."""
    if path.stem != "model":
        return suggest_name(path.stem)
    parent = path.resolve().parent
    if parent.name.isdigit():
        parent = parent.parent
    return suggest_name(parent.name)


def _vocab_size(module: Any) -> int:
    for key, value in module.state_dict().items():
        if "word_embeddings" in key and getattr(value, "ndim", 0) == 2:
            return int(value.shape[0])
    return _FALLBACK_VOCAB


__all__ = ["file_model_name", "load_onnx_file", "load_torchscript_file"]
