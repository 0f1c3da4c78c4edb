"""Typed config of the base model (the ``base:`` section of a grid YAML)."""

from __future__ import annotations

from dataclasses import dataclass

from mmgrid.configtools import ranged


@dataclass
class BaseConfig:
    model: str = "tiny_qwen3()"  # a named tiny builder, a local HF folder, or a hub id (never fetched in tests)
    tokenizer: str | None = None  # defaults to the model folder's tokenizer; tiny bases train their own
    vocab_size: int = ranged(260, 1_000_000, default=4096)  # tiny base: byte-level BPE vocabulary trained on the grid's item text
    lm_epochs: int = ranged(0, 10_000, default=2)  # tiny base: language-model epochs on the text set apart for it
    lm_lr: float = ranged(0, lo_open=True, default=1e-3)
    lm_batch_size: int = ranged(1, 10**6, default=32)
    max_length: int = ranged(2, 131_072, default=64)  # tokens per LM example (also for text retention)
    allow_download: bool = False  # HF base: fetch a hub id if it is not cached locally
