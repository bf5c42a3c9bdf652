"""Project-wide pytest configuration (the user-facing fixtures live in mmelocal.testing.plugin).

Shared model fixtures (session-scoped, built once, heavy imports inside):

* ``tiny_bert_dir``: a random BERT (hidden 32, 2 layers, vocab 1000) and its WordPiece
  tokenizer saved with ``save_pretrained`` (a Hugging Face folder, ~0.3 MB).
"""

from __future__ import annotations

import os
import string
from pathlib import Path

import pytest

TINY_BERT_VOCAB_SIZE = 1000

# mmelocal's own CI must exercise Docker for real: a missing engine fails, it does not skip.
if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
    os.environ.setdefault("MMELOCAL_REQUIRE_DOCKER", "1")


def make_tiny_bert(folder: Path) -> Path:
    """Save a random tiny BERT model and tokenizer in ``folder``; return it."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += list(string.ascii_lowercase + string.digits + string.punctuation)
    words += ["##" + c for c in string.ascii_lowercase + string.digits]
    sample = "triton serves many models from one endpoint on a single gpu hello world short"
    words += sample.split(" ")
    words = list(dict.fromkeys(words))
    words += [f"tok{i}" for i in range(TINY_BERT_VOCAB_SIZE - len(words))]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(words)})
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(words),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
    )
    BertModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT + tokenizer saved with save_pretrained (built once per session)."""
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert") / "tiny-bert")
