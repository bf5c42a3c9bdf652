"""Shared models for the runtime tests (the Triton server itself comes from mmelocal's plugin)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def acceptance_models(
    tmp_path_factory: pytest.TempPathFactory, tiny_bert_dir: Path
) -> dict[str, Path]:
    """Tiny BERT (random BertConfig) and resnet18 (weights=None), TorchScript and ONNX, built
    by mmelocal's builder with reference outputs of the torch model."""
    pytest.importorskip("torchvision")
    from mmelocal.builder.build import BuildOptions, build_model

    root = tmp_path_factory.mktemp("acceptance")
    repo = root / "repo"
    built = {}
    overrides = {"warmup_batch_sizes": (1,)}
    for spec, family in ((str(tiny_bert_dir), "tinybert"), ("torchvision:resnet18", "resnet18")):
        for fmt in ("torchscript", "onnx"):
            name = f"{family}_{fmt}"
            result = build_model(
                spec,
                repo=repo,
                options=BuildOptions(
                    name=name, format=fmt, seq_len=16, verify=False, overrides=overrides
                ),
            )
            built[name] = result.model_dir
    return built
