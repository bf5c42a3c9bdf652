"""The :class:`ModelSource` every loader returns, and helpers the loaders share.

A source is what the exporters and the verifier need to know about a model: the
``nn.Module`` in eval mode (or an existing file), example inputs for tracing, the
names of its inputs and outputs, which axes are dynamic, and a way to make fresh
random inputs at any batch size (and sequence length for NLP).

torch is imported inside functions only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mmelocal.builder.runners import import_torch, run_module, run_onnx
from mmelocal.errors import SourceError

if TYPE_CHECKING:
    import torch

KINDS = ("nlp", "cv", "generic")
FILE_FORMATS = ("torchscript", "onnx")

InputFactory = Callable[[int, "int | None", int], "dict[str, torch.Tensor]"]
"""``factory(batch_size, seq_len, seed) -> {input name: tensor}``."""


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    """A model ready to export: module (or file), example inputs, names and dynamic axes.

    ``input_names``/``output_names`` are the readable names (``input_ids``,
    ``last_hidden_state``, ``input``, ``output``); each exporter maps them to the names
    its platform needs. ``dynamic_axes`` maps a tensor name to ``{axis: label}``
    (axis 0 is the batch axis for every tensor). ``family`` is a hint for the config
    preset (a Hugging Face ``model_type`` such as ``"bert"``, or an architecture name
    such as ``"resnet18"``). ``file`` is an existing artifact to reuse as it is (its
    format in ``file_format``); ``module`` is what runs as the reference (a TorchScript
    file has both, an ONNX file only ``file``).
    """

    spec: str
    name: str
    kind: str
    family: str | None
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    example_inputs: Mapping[str, Any]
    input_factory: InputFactory
    dynamic_axes: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    module: Any = None
    file: Path | None = None
    file_format: str | None = None
    task: str | None = None
    seq_len: int | None = None
    max_seq_len: int | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SourceError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.module is None and self.file is None:
            raise SourceError("a ModelSource needs a module, a file, or both")
        if self.file is not None and self.file_format not in FILE_FORMATS:
            raise SourceError(
                f"file_format must be one of {', '.join(FILE_FORMATS)}, got {self.file_format!r}"
            )
        if not self.input_names or not self.output_names:
            raise SourceError(f"source {self.spec!r} must have at least one input and output")
        if list(self.example_inputs) != list(self.input_names):
            raise SourceError(
                f"example_inputs keys {list(self.example_inputs)} must equal "
                f"input_names {list(self.input_names)} in the same order"
            )
        if self.seq_len is not None and self.seq_len < 1:
            raise SourceError(f"seq_len must be >= 1, got {self.seq_len}")
        object.__setattr__(self, "input_names", tuple(self.input_names))
        object.__setattr__(self, "output_names", tuple(self.output_names))

    @property
    def is_file(self) -> bool:
        """True for an existing ``.pt``/``.onnx`` file used as it is (no re-export)."""
        return self.file is not None

    @property
    def batch_size(self) -> int:
        """Batch size of the example inputs."""
        first = next(iter(self.example_inputs.values()))
        return int(first.shape[0]) if len(first.shape) else 1

    def make_inputs(
        self, batch_size: int, seq_len: int | None = None, *, seed: int = 0
    ) -> dict[str, torch.Tensor]:
        """Fresh random inputs (same seed, same tensors) at ``batch_size`` and ``seq_len``."""
        if batch_size < 1:
            raise SourceError(f"batch_size must be >= 1, got {batch_size}")
        length = seq_len if seq_len is not None else self.seq_len
        return self.input_factory(batch_size, length, seed)

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run the source model (module or file) on ``inputs``; outputs by readable name."""
        if self.module is not None:
            return run_module(self.module, inputs, self.input_names, self.output_names)
        assert self.file is not None
        if self.file_format == "onnx":
            return run_onnx(self.file, inputs)
        raise SourceError(f"cannot run {self.file}: unknown file format {self.file_format!r}")


def float_image_factory(
    shape: tuple[int, ...], input_name: str = "pixel_values"
) -> Callable[[int, int | None, int], dict[str, Any]]:
    """Input factory for one float32 tensor ``(batch, *shape)`` of standard-normal values."""

    def factory(batch_size: int, seq_len: int | None, seed: int) -> dict[str, Any]:
        torch = import_torch("making example inputs")
        gen = torch.Generator().manual_seed(seed)
        return {input_name: torch.randn((batch_size, *shape), generator=gen)}

    return factory


def token_factory(
    *, vocab_size: int, pad_id: int = 0, low_id: int = 1
) -> Callable[[int, int | None, int], dict[str, Any]]:
    """Input factory for ``input_ids`` + ``attention_mask`` (int64) with random padding.

    Every row but the first is padded to a random length, so the traced or exported
    model is checked with masks that really mask something.
    """

    def factory(batch_size: int, seq_len: int | None, seed: int) -> dict[str, Any]:
        torch = import_torch("making example inputs")
        if seq_len is None or seq_len < 1:
            raise SourceError(f"seq_len must be >= 1 for an NLP model, got {seq_len}")
        gen = torch.Generator().manual_seed(seed)
        high = max(vocab_size, low_id + 1)
        ids = torch.randint(low_id, high, (batch_size, seq_len), generator=gen, dtype=torch.long)
        mask = torch.ones((batch_size, seq_len), dtype=torch.long)
        for row in range(1, batch_size):
            length = int(torch.randint(1, seq_len + 1, (1,), generator=gen))
            mask[row, length:] = 0
            ids[row, length:] = pad_id
        return {"input_ids": ids, "attention_mask": mask}

    return factory


_NAME_BAD = re.compile(r"[^a-z0-9_.-]+")


def suggest_name(text: str) -> str:
    """A Triton model folder name from a spec: lower case, ``[a-z0-9_.-]``, no leading dot."""
    base = text.rstrip("/").split("/")[-1].split(":")[-1]
    name = _NAME_BAD.sub("-", base.lower()).strip("-.")
    return name or "model"


__all__ = [
    "FILE_FORMATS",
    "KINDS",
    "InputFactory",
    "ModelSource",
    "float_image_factory",
    "suggest_name",
    "token_factory",
]
