"""Typed config of base model, training, variants and evaluation (grid YAML sections)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class BaseConfig:
    model: str = "tiny_qwen3()"  # a named tiny builder, a local HF folder, or a hub id (never fetched in tests)
    tokenizer: str | None = None  # defaults to the model folder's tokenizer; tiny bases train their own
    vocab_size: int = 4096  # tiny base: byte-level BPE vocabulary trained on the grid's item text
    lm_epochs: int = 2  # tiny base: language-model epochs on the text set apart for it
    lm_lr: float = 1e-3
    lm_batch_size: int = 32
    max_length: int = 64  # tokens per LM example (also for text retention)
    allow_download: bool = False  # HF base: fetch a hub id if it is not cached locally


@dataclass
class TrainConfig:
    stages: list[str] = field(default_factory=lambda: ["pretrain", "p1", "p2"])  # phases trained in order
    epochs: dict[str, int] = field(default_factory=lambda: {"pretrain": 3, "p1": 2, "p2": 2})  # paper: 3 / 2 / 2
    lr: float = 1e-3  # AdamW, fixed
    weight_decay: float = 0.0
    batch_size: int = 32
    seed: int = 0
    max_examples: int | None = None  # cap per stage (quick runs); None = all
    device: str = "auto"  # auto | cpu | cuda
    threads: int | None = None  # torch intra-op CPU threads (None = torch default; 1 is fastest for tiny models)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU


@dataclass
class VariantConfig:
    name: str = "default"  # a row of the grid, e.g. orbit-sd-0.007
    regularizer: str = "none"  # none | l2_init | soup_to_go | orbit
    params: dict[str, Any] = field(default_factory=dict)  # the regularizer's own parameters
    paradigms: list[str] | None = None  # restrict this variant to some paradigms (None = all)


@dataclass
class EvalConfig:
    ks: list[int] = field(default_factory=lambda: [10, 20])
    groups: list[str] = field(default_factory=lambda: ["all", "active", "non_active"])
    activity_phase: str = "p2"  # active users = at least one interaction in this phase
    max_users: int | None = None  # cap evaluated test examples (quick runs); a fixed seeded sample
    split: str = "test"
    retention: bool = True  # also record the text loss on held-out base text (Orbit's forgetting axis)
    retention_docs: int | None = 200  # held-out texts used for retention (None = all)
    matrix_paradigms: list[str] = field(default_factory=lambda: ["emb"])  # accuracy matrix R for these
    popular_phases: list[str] | None = None  # phases counted by the most-popular baseline (None = train.stages)
