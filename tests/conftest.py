"""Project-wide pytest configuration (the user-facing fixtures live in mmelocal.testing.plugin).

Shared model fixtures (session-scoped, built once, heavy imports inside):

* ``tiny_bert_dir``: a random BERT (hidden 32, 2 layers, vocab 1000) and its WordPiece
  tokenizer saved with ``save_pretrained`` (a Hugging Face folder, ~0.3 MB).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# mmelocal's own CI must exercise Docker for real: a missing engine fails, it does not skip.
if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
    os.environ.setdefault("MMELOCAL_REQUIRE_DOCKER", "1")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT + tokenizer saved with save_pretrained (built once per session)."""
    from mmelocal.testing.tiny_bert import save_tiny_bert

    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "tiny-bert")
