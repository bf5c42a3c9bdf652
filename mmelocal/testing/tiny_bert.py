"""A tiny random BERT saved as a Hugging Face folder, for tests and benchmarks (no hub).

Hidden size 32, 2 layers, 2 heads, vocabulary of 1000 WordPiece tokens, positions up to
256; about 0.3 MB. Weights are random (seeded): builds verify against the torch model's own
outputs, so what matters is the architecture, not what it learned.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

VOCAB_SIZE = 1000


def tiny_bert_config() -> Any:
    """The tiny BERT's ``transformers.BertConfig`` (the one architecture every tiny BERT of
    the tests and benchmarks has)."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
    )


def save_tiny_bert(folder: Path, *, tokenizer: bool = True, seed: int = 0) -> Path:
    """Save the model (and, with ``tokenizer``, its WordPiece tokenizer) in ``folder``."""
    import torch
    from transformers import BertModel, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    BertModel(tiny_bert_config()).eval().save_pretrained(folder)
    if tokenizer:
        words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        words += list(string.ascii_lowercase + string.digits + string.punctuation)
        words += ["##" + c for c in string.ascii_lowercase + string.digits]
        sample = "triton serves many models from one endpoint on a single gpu hello world short"
        words += sample.split(" ")
        words = list(dict.fromkeys(words))
        words += [f"tok{i}" for i in range(VOCAB_SIZE - len(words))]
        BertTokenizer(vocab={w: i for i, w in enumerate(words)}).save_pretrained(folder)
    return folder


__all__ = ["VOCAB_SIZE", "save_tiny_bert", "tiny_bert_config"]
