"""Handmade stand-ins for the build tests: a DomainData-like domain, a PreparedDataset-like
object, and a toy paradigm ("toy") implementing the Paradigm Protocol on a small model
(mean of history item embeddings -> linear -> dot product with every item)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn

from mmgrid.paradigms import Checkpoint, register_paradigm

PHASE_OF_EVENT = ("pretrain",) * 4 + ("p1",) * 2 + ("p2", "test")
N_ADDED = 2  # rows of the item table that play "added vocabulary"
FAIL_AT: set[tuple[str, str]] = set()  # (domain, phase): raise in examples() (kill injection)
NAN_AT: set[tuple[str, str]] = set()  # (domain, phase): the loss becomes NaN


@dataclass
class FakeDomain:
    name: str
    n_items: int
    interactions: pl.DataFrame
    _examples: pl.DataFrame = field(repr=False)

    @property
    def item_texts(self) -> list[str]:
        return [f"item {i} of {self.name}, a fine thing number {i % 7}" for i in range(self.n_items)]

    @property
    def item_titles(self) -> list[str]:
        return [f"item {i}" for i in range(self.n_items)]

    def examples(self, phase: str) -> pl.DataFrame:
        return self._examples.filter(pl.col("phase") == phase)

    def active_users(self, phase: str) -> set[int]:
        return set(self.interactions.filter(pl.col("phase") == phase)["user_idx"].to_list())

    def popularity(self, phases: list[str]) -> np.ndarray:
        sel = self.interactions.filter(pl.col("phase").is_in(list(phases)))["item_idx"].to_numpy()
        return np.bincount(sel, minlength=self.n_items).astype(np.int64)


def make_domain(name: str, n_items: int = 20, n_users: int = 30, seed: int = 0,
                drop_phase: str | None = None) -> FakeDomain:
    """Users walk item -> item + 1; odd users skip p2 (non-active)."""
    rng = np.random.default_rng(seed)
    inter, ex = [], []
    for u in range(n_users):
        start = int(rng.integers(n_items))
        seq = [(start + s) % n_items for s in range(len(PHASE_OF_EVENT))]
        for s, item in enumerate(seq):
            phase = PHASE_OF_EVENT[s]
            if phase == drop_phase or (phase == "p2" and u % 2):
                continue
            ts = 1_650_000_000_000 + s * 10_000_000_000 + u
            inter.append({"user_idx": u, "user_id": f"U{u}", "item_idx": item, "timestamp": ts, "phase": phase})
            ex.append({"phase": phase, "user_idx": u, "target": item, "history": seq[:s], "timestamp": ts})
    inter_df = pl.DataFrame(inter).with_columns(pl.col("user_idx").cast(pl.Int32), pl.col("item_idx").cast(pl.Int32))
    ex_df = pl.DataFrame(ex).with_columns(pl.col("target").cast(pl.Int32), pl.col("history").cast(pl.List(pl.Int32)))
    return FakeDomain(name, n_items, inter_df, ex_df)


class FakePrepared:
    def __init__(self, domains: list[FakeDomain], fingerprint: str = "fake0") -> None:
        self._d = {d.name: d for d in domains}
        self.fingerprint = fingerprint
        words = ["the", "kettle", "boils", "water", "quickly", "and", "my", "shirt", "is", "blue", "green", "paper"]
        rng = np.random.default_rng(1)
        self._lm = [" ".join(rng.choice(words, size=8)) for _ in range(80)]

    @property
    def domains(self) -> list[str]:
        return list(self._d)

    def domain(self, name: str) -> FakeDomain:
        return self._d[name]

    def lm_text(self, split: str) -> list[str]:
        return self._lm[:60] if split == "train" else self._lm[60:]


class ToyModel(nn.Module):
    def __init__(self, n_items: int, dim: int = 16) -> None:
        super().__init__()
        self.n_items = n_items
        self.items = nn.Embedding(n_items + N_ADDED + 1, dim)  # last row: padding
        self.proj = nn.Linear(dim, dim)

    def users(self, hist: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        e = self.items(hist) * mask.unsqueeze(-1)
        return self.proj(e.sum(1) / mask.sum(1, keepdim=True).clamp(min=1))

    def scores(self, users: torch.Tensor) -> torch.Tensor:
        return users @ self.items.weight[: self.n_items].T


@register_paradigm("toy")
class ToyParadigm:
    name = "toy"

    def build(self, base: Any, domain: Any, params: dict[str, Any], seed: int) -> ToyModel:
        torch.manual_seed(seed)
        m = ToyModel(domain.n_items, int(params.get("dim", 16)))
        m.domain_name = domain.name
        return m

    def examples(self, model: ToyModel, domain: Any, phase: str) -> list[tuple[tuple[int, ...], int]]:
        if (domain.name, phase) in FAIL_AT:
            raise RuntimeError(f"injected failure in {domain.name}/{phase}")
        model.phase = phase
        df = domain.examples(phase)
        return [(tuple(h[-5:]), int(t)) for h, t in zip(df["history"].to_list(), df["target"].to_list())]

    def collate(self, model: ToyModel, examples: list) -> dict[str, torch.Tensor]:
        pad = model.n_items + N_ADDED
        width = max(1, max(len(h) for h, _ in examples))
        hist = torch.full((len(examples), width), pad, dtype=torch.long)
        for i, (h, _) in enumerate(examples):
            hist[i, : len(h)] = torch.tensor(h, dtype=torch.long)
        return {"hist": hist, "mask": (hist != pad).float(), "target": torch.tensor([t for _, t in examples])}

    def loss(self, model: ToyModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        loss = nn.functional.cross_entropy(model.scores(model.users(batch["hist"], batch["mask"])), batch["target"])
        if (getattr(model, "domain_name", ""), getattr(model, "phase", "")) in NAN_AT:
            loss = loss * float("nan")
        return loss

    def rank(self, model: ToyModel, domain: Any, histories: list[list[int]], k: int) -> np.ndarray:
        batch = self.collate(model, [(tuple(h[-5:]), 0) for h in histories])
        with torch.no_grad():
            s = model.scores(model.users(batch["hist"], batch["mask"]))
        return torch.topk(s, k, dim=1).indices.numpy()

    def save(self, model: ToyModel) -> Checkpoint:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return Checkpoint(state, files={"toy.json": b"{}"}, meta={"n_items": model.n_items},
                          added_rows={"items.weight": (model.n_items, [f"<a{i}>" for i in range(N_ADDED + 1)])})

    def load(self, ckpt: Checkpoint, domain: Any, params: dict[str, Any]) -> ToyModel:
        m = ToyModel(int(ckpt.meta["n_items"]), int(params.get("dim", 16)))
        m.load_state_dict(ckpt.state)
        m.domain_name = domain.name
        return m


def grid_dict(tmp: Any, **sections: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "t",
        "prepared": str(tmp / "prep"),
        "registry": str(tmp / "reg"),
        "base": {"model": "tiny_qwen3()", "vocab_size": 300, "lm_epochs": 1, "lm_batch_size": 16, "max_length": 24},
        "paradigms": ["toy"],
        "train": {"epochs": {"pretrain": 2, "p1": 1, "p2": 1}, "batch_size": 8, "lr": 0.01, "seed": 0},
        "eval": {"matrix_paradigms": ["toy"], "retention_docs": 10},
    }
    d.update(sections)
    return d


def make_cfg(tmp: Any, prepared: FakePrepared | None = None, **sections: Any) -> Any:
    from mmgrid.config import GridConfig
    from mmgrid.configtools import build
    from mmgrid.runtime.context import put_prepared

    cfg = build(GridConfig, grid_dict(tmp, **sections))
    put_prepared(cfg.prepared, prepared or FakePrepared([make_domain("A", seed=0), make_domain("B", seed=1)]))
    return cfg
