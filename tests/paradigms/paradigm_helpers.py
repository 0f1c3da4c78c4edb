"""Builders and helpers shared by the paradigm tests (imported by name: tests/paradigms is on
sys.path). They live here, not in conftest.py, because several test folders have a
conftest.py and ``from conftest import ...`` picks whichever was imported first."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch


def fit_batch(paradigm: Any, model: torch.nn.Module, batch: dict[str, torch.Tensor], steps: int, lr: float) -> float:
    """Train ``model`` on one batch for ``steps`` AdamW steps; returns the loss before training."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    first = paradigm.loss(model, batch)
    assert torch.isfinite(first)
    for _ in range(steps):
        opt.zero_grad()
        paradigm.loss(model, batch).backward()
        opt.step()
    return float(first.detach())


PHASES = ("pretrain", "p1", "p2", "test")
THEMES = (("red", "cotton", "shirt"), ("blue", "steel", "kettle"), ("green", "paper", "notebook"))
N_PER_THEME = 10
N_USERS = 40
N_EVENTS = 8  # per user: 4 pretrain, 2 p1, 1 p2, 1 test
PHASE_OF_EVENT = ("pretrain",) * 4 + ("p1",) * 2 + ("p2", "test")


@dataclass
class TinyDomain:
    """Stand-in for ``mmgrid.data.dataset.DomainData`` (same attribute names and types)."""

    name: str
    items: pl.DataFrame  # item_idx, parent_asin, title, text, first_seen_ms
    interactions: pl.DataFrame  # user_idx, user_id, item_idx, timestamp, phase
    _examples: pl.DataFrame = field(repr=False)  # phase, user_idx, target, history, timestamp

    @property
    def n_items(self) -> int:
        return self.items.height

    @property
    def item_texts(self) -> list[str]:
        return self.items["text"].to_list()

    @property
    def item_titles(self) -> list[str]:
        return self.items["title"].to_list()

    def examples(self, phase: str) -> pl.DataFrame:
        return self._examples.filter(pl.col("phase") == phase)

    def active_users(self, phase: str) -> set[int]:
        return set(self.interactions.filter(pl.col("phase") == phase)["user_idx"].to_list())

    def popularity(self, phases: list[str] | tuple[str, ...]) -> np.ndarray:
        sel = self.interactions.filter(pl.col("phase").is_in(list(phases)))["item_idx"].to_numpy()
        return np.bincount(sel, minlength=self.n_items).astype(np.int64)


def make_tiny_domain(name: str = "Tiny_Home", seed: int = 0, max_history: int = 20) -> TinyDomain:
    """A deterministic tiny domain whose next item is predictable from the last one."""
    rng = np.random.default_rng(seed)
    titles, texts = [], []
    for t, (color, material, noun) in enumerate(THEMES):
        for j in range(N_PER_THEME):
            title = f"{color} {noun} model {j}"
            titles.append(title)
            texts.append(f"{title}. A {material} {noun} in {color}, size {j}.")
    n_items = len(titles)
    items = pl.DataFrame(
        {
            "item_idx": pl.Series(range(n_items), dtype=pl.Int32),
            "parent_asin": [f"B{i:09d}" for i in range(n_items)],
            "title": titles,
            "text": texts,
            "first_seen_ms": pl.Series([1_600_000_000_000 + i for i in range(n_items)], dtype=pl.Int64),
        }
    )
    rows: list[dict[str, Any]] = []
    ex_rows: list[dict[str, Any]] = []
    for u in range(N_USERS):
        theme = u % len(THEMES)
        start = int(rng.integers(N_PER_THEME))
        seq = [theme * N_PER_THEME + (start + s) % N_PER_THEME for s in range(N_EVENTS)]
        for s, item in enumerate(seq):
            ts = 1_650_000_000_000 + s * 10_000_000_000 + u * 1000
            phase = PHASE_OF_EVENT[s]
            rows.append({"user_idx": u, "user_id": f"U{u}", "item_idx": item, "timestamp": ts, "phase": phase})
            ex_rows.append(
                {"phase": phase, "user_idx": u, "target": item, "history": seq[:s][-max_history:], "timestamp": ts}
            )
    interactions = pl.DataFrame(rows).with_columns(
        pl.col("user_idx").cast(pl.Int32), pl.col("item_idx").cast(pl.Int32), pl.col("timestamp").cast(pl.Int64)
    )
    examples = pl.DataFrame(ex_rows).with_columns(
        pl.col("user_idx").cast(pl.Int32),
        pl.col("target").cast(pl.Int32),
        pl.col("history").cast(pl.List(pl.Int32)),
        pl.col("timestamp").cast(pl.Int64),
    )
    return TinyDomain(name=name, items=items, interactions=interactions, _examples=examples)


def make_tiny_tokenizer(texts: list[str], vocab_size: int = 300) -> Any:
    """Byte-level BPE trained on ``texts``, wrapped as PreTrainedTokenizerFast with pad/eos/bos."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<eos>", "<bos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")


@dataclass
class _StandInBaseBundle:
    """Stand-in for ``mmgrid.models.base.BaseBundle`` until that module exists."""

    model: Any
    tokenizer: Any
    hf_config: Any = None


def _bundle_cls() -> Any:
    try:
        from mmgrid.models.base import BaseBundle

        return BaseBundle
    except (ImportError, AttributeError):
        return _StandInBaseBundle


def make_tiny_base(texts: list[str], seed: int = 0, n_layers: int = 2) -> Any:
    """A tiny Qwen3ForCausalLM (hidden 32, 4 heads, 2 kv heads) and its tokenizer, as a BaseBundle."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = make_tiny_tokenizer(texts)
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    model = Qwen3ForCausalLM(cfg).eval()
    cls = _bundle_cls()
    try:
        return cls(model=model, tokenizer=tokenizer, hf_config=cfg)
    except TypeError:  # a BaseBundle without hf_config
        return cls(model=model, tokenizer=tokenizer)
