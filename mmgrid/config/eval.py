"""Typed config of evaluation (the ``eval:`` section of a grid YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mmgrid.configtools import ranged


@dataclass
class EvalConfig:
    ks: list[int] = ranged(1, 10_000, default_factory=lambda: [10, 20])  # cut-offs of recall@k / ndcg@k
    groups: list[str] = field(default_factory=lambda: ["all", "active", "non_active"])
    activity_phase: str = "p2"  # active users = at least one interaction in this phase
    max_users: int | None = ranged(1, 10**9, default=None)  # cap evaluated test examples (quick runs); a fixed seeded sample
    split: str = "test"
    retention: bool = True  # also record the text loss on held-out base text (Orbit's forgetting axis)
    retention_docs: int | None = ranged(1, 10**8, default=200)  # held-out texts used for retention (None = all)
    matrix_paradigms: list[str] = field(default_factory=lambda: ["emb"])  # accuracy matrix R for these
    popular_phases: list[str] | None = None  # phases counted by the most-popular baseline (None = train.stages)
    # most-popular leaves out each user's history items, as every paradigm's exclude_history does (false: the
    # same top-K for every user, the rule of stored baselines from before the key existed)
    popular_exclude_history: bool = True
