"""Build a Triton model from any ``nn.Module`` through the Python API.

    .venv/bin/python examples/build_from_module.py [REPO]

The module's example inputs fix names, dtypes and shapes; axis 0 is the batch axis
and ``dynamic_axes`` adds more (here the sequence axis). The build exports ONNX,
verifies it against the module, writes config.pbtxt from the generic preset with the
overrides below, and records reference outputs next to it.
"""

from __future__ import annotations

import sys

import torch

from mmelocal.builder.build import BuildOptions, build_model
from mmelocal.builder.sources import source_from_module


class MeanPooledEmbedding(torch.nn.Module):
    """Token ids -> mean of their embeddings over the unmasked positions."""

    def __init__(self, vocab_size: int = 1000, dim: int = 64) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).float()
        return (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def main(repo: str) -> None:
    """Build the example model into ``repo`` and print what was written."""
    example = {
        "input_ids": torch.randint(1, 1000, (2, 32)),
        "attention_mask": torch.ones(2, 32, dtype=torch.long),
    }
    source = source_from_module(
        MeanPooledEmbedding(),
        example,
        name="mean-pooled",
        output_names=["embedding"],
        dynamic_axes={
            "input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "sequence"},
        },
    )
    result = build_model(
        source,
        repo=repo,
        progress=lambda stage, message: print(f"{stage}: {message}"),
        options=BuildOptions(
            format="onnx",
            overrides={"max_batch_size": 16, "preferred_batch_sizes": (8, 16), "instance_count": 2},
        ),
    )
    report = result.verify_report
    print(result.config_path.read_text())
    if report is not None:
        print(f"verified: max abs diff {report.max_abs_diff:.2e} over {len(report.rows)} shapes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "model_repository")
