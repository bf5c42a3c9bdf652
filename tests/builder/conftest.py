"""Builder fixtures: model sources and exported artifacts, each built once per session.

Sources: the tiny random BERT (``tiny_bert_dir`` from tests/conftest.py), the packaged
MiniLM, torchvision resnet18 with random weights. Artifacts: each of them exported to
TorchScript and to ONNX in a session temp folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SEQ_LEN = 16


@pytest.fixture(scope="session")
def tiny_bert_source(tiny_bert_dir: Path) -> Any:
    """The tiny BERT as a feature-extraction source at seq_len 16."""
    from mmelocal.builder.sources import load_source

    return load_source(str(tiny_bert_dir), seq_len=SEQ_LEN)


@pytest.fixture(scope="session")
def minilm_source() -> Any:
    """The packaged all-MiniLM-L6-v2 at seq_len 16 (small inputs keep the tests fast)."""
    from mmelocal.builder.sources import load_source

    return load_source("minilm", seq_len=SEQ_LEN)


@pytest.fixture(scope="session")
def resnet_source() -> Any:
    """torchvision resnet18 with random weights."""
    from mmelocal.builder.sources import load_source

    return load_source("torchvision:resnet18", batch_size=1)


@pytest.fixture(scope="session")
def export_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder for the session's exported artifacts."""
    return tmp_path_factory.mktemp("exports")


@pytest.fixture(scope="session")
def artifacts(request: pytest.FixtureRequest, export_dir: Path) -> dict[tuple[str, str], Any]:
    """Lazily exported artifacts keyed (model, format); see :func:`get_artifact`."""
    return {}


def get_artifact(
    request: pytest.FixtureRequest,
    cache: dict[tuple[str, str], Any],
    folder: Path,
    model: str,
    fmt: str,
) -> Any:
    """Export ``model`` (tiny_bert | minilm | resnet) to ``fmt`` once per session."""
    key = (model, fmt)
    if key not in cache:
        source = request.getfixturevalue(f"{model}_source")
        out = folder / model / fmt
        if fmt == "torchscript":
            from mmelocal.builder.torch2torchscript import export_torchscript

            cache[key] = export_torchscript(source, out / "model.pt")
        else:
            from mmelocal.builder.torch2onnx import export_onnx

            cache[key] = export_onnx(source, out / "model.onnx")
    return cache[key]


@pytest.fixture
def artifact_of(
    request: pytest.FixtureRequest, artifacts: dict[tuple[str, str], Any], export_dir: Path
) -> Any:
    """``artifact_of(model, fmt)`` -> the session's ExportedArtifact for that pair."""
    return lambda model, fmt: get_artifact(request, artifacts, export_dir, model, fmt)
