"""Full-ranking evaluation of a paradigm model on one domain's examples of one phase.

:class:`Evaluator` reads and caches what does not depend on the weights (histories,
targets, user groups) once, so that many models of the same paradigm and domain (a
lambda sweep, a merge grid) are evaluated by swapping weights and calling
:meth:`Evaluator.evaluate` again. Groups: ``all``, ``active`` (the user has at least one
interaction in ``activity_phase``, MMGRid section 4.3) and ``non_active``.

An evaluation's answer (:class:`EvalResults`) is ``{group: {metric: mean}}`` and carries
the per-user values behind the means (:class:`PerUser`); :func:`record_evaluation` stores
them once per evaluation (``Registry.put_per_user``) and records each group's means with
their 95% bootstrap intervals (``ci``) and a reference to that file (``extra.per_user``).
"""

from __future__ import annotations

import contextlib

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import torch

from mmgrid.errors import DataError
from mmgrid.eval.metrics import per_user_metrics
from mmgrid.registry.peruser import intervals
from mmgrid.runtime.progress import progress

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry

GROUPS = ("all", "active", "non_active")


@dataclass
class PerUser:
    """One evaluation's per-example values: ``users`` [n], ``active`` [n] (bool), ``metrics`` name -> [n]."""

    users: np.ndarray
    active: np.ndarray
    metrics: dict[str, np.ndarray]

    def mask(self, group: str) -> np.ndarray:
        return {"all": np.ones(len(self.users), dtype=bool), "active": self.active,
                "non_active": ~self.active}[group]


class EvalResults(dict):
    """``{group: {metric: value, "n": count}}`` (a plain dict to every reader) plus ``per_user``
    (a :class:`PerUser`, or None where the values are not known)."""

    def __init__(self, groups: Mapping[str, Mapping[str, float]] | tuple[()] = (), per_user: PerUser | None = None) -> None:
        super().__init__(groups)
        self.per_user = per_user


class Evaluator:
    """Recall@K / NDCG@K of models of one paradigm on one domain's phase ``split``."""

    def __init__(self, paradigm: Any, domain: Any, *, split: str = "test", ks: Sequence[int] = (10, 20),
                 groups: Sequence[str] = GROUPS, activity_phase: str = "p2", max_users: int | None = None,
                 batch_size: int = 256, seed: int = 0) -> None:
        """Read the examples and groups.

        Args:
            paradigm: a Paradigm (its ``rank`` is called); None for ranking-only use.
            domain: the prepared ``DomainData``.
            split: the phase evaluated (the test window by default).
            ks: cut-offs.
            groups: any of ``all``, ``active``, ``non_active``.
            activity_phase: the phase that defines active users.
            max_users: evaluate a fixed, seeded sample of this many examples (None = all).
            batch_size: histories ranked per ``paradigm.rank`` call.
            seed: seed of the sample.

        Raises:
            DataError: the phase has no examples, or an unknown group is asked for.
        """
        unknown = [g for g in groups if g not in GROUPS]
        if unknown:
            raise DataError(f"eval.groups: unknown group(s) {unknown}; use {list(GROUPS)}.")
        df = domain.examples(split)
        if df.height == 0:
            raise DataError(f"domain {domain.name!r}: phase {split!r} has no examples to evaluate; "
                            "check data.phases or choose another eval.split.")
        if max_users is not None and df.height > max_users:
            rows = np.sort(np.random.default_rng(seed).choice(df.height, size=max_users, replace=False))
            df = df[rows.tolist()]
        self.paradigm, self.domain, self.split = paradigm, domain, split
        self.ks, self.batch_size = [int(k) for k in ks], batch_size
        self.users = df.get_column("user_idx").to_numpy().astype(np.int64)
        self.targets = df.get_column("target").to_numpy().astype(np.int64)
        self.histories = [[int(i) for i in (h or [])] for h in df.get_column("history").to_list()]
        # the order in which histories are ranked: by length (stable), so that each batch is padded little
        self.by_length = np.argsort(np.fromiter((len(h) for h in self.histories), dtype=np.int64,
                                                count=len(self.histories)), kind="stable")
        active = np.isin(self.users, np.fromiter(domain.active_users(activity_phase), dtype=np.int64))
        self.active = active
        masks = {"all": np.ones(len(self.users), dtype=bool), "active": active, "non_active": ~active}
        self.masks = {g: masks[g] for g in groups}

    @property
    def n(self) -> int:
        return len(self.targets)

    def rank(self, model: Any) -> np.ndarray:
        """Top-max(K) items for every cached history, best first: int array [n, max(K)]."""
        k = min(max(self.ks), self.domain.n_items)
        ranked = np.zeros((self.n, k), dtype=np.int64)
        starts = range(0, self.n, self.batch_size)
        name = getattr(self.paradigm, "name", "model")
        # a bar only where there is more than one batch (a grid's evaluation has its own bar)
        bar = progress(total=self.n, desc=f"rank {name}/{self.domain.name}/{self.split}", unit="user",
                       enabled=len(starts) > 1)
        with torch.no_grad():
            for s in starts:
                # batches of histories of similar length (a batch is padded to its longest);
                # the answer goes back to each example's own row
                rows = self.by_length[s:s + self.batch_size]
                out = self.paradigm.rank(model, self.domain, [self.histories[i] for i in rows], k)
                ranked[rows] = np.asarray(out, dtype=np.int64).reshape(-1, k)
                bar.update(len(rows))
        bar.close()
        return ranked

    def evaluate_ranked(self, ranked: np.ndarray) -> EvalResults:
        """Metrics per group from a precomputed ranking ([n, >= max K], or [L] shared by all).

        Each group's value is the mean of the per-user values over the group's users (the
        same float operations as :func:`mmgrid.eval.metrics.ranking_metrics` on that group).
        """
        ranked = np.asarray(ranked)
        if ranked.ndim == 1:
            ranked = np.broadcast_to(ranked, (self.n, ranked.shape[0]))
        per = per_user_metrics(ranked, self.targets, self.ks)
        out = EvalResults(per_user=PerUser(self.users, self.active, per))
        for g, mask in self.masks.items():
            metrics = {m: float(v[mask].mean()) for m, v in per.items()} if mask.any() else {
                m: float("nan") for m in per}
            metrics["n"] = float(mask.sum())
            out[g] = metrics
        return out

    def evaluate(self, model: Any) -> EvalResults:
        """``{group: {"recall@10": ..., "ndcg@10": ..., ..., "n": count}}`` of ``model``."""
        if model.training:  # eval() walks every submodule: skipped for a model already in eval mode
            model.eval()
        return self.evaluate_ranked(self.rank(model))


def record_evaluation(registry: Registry, ref: Any, split: str, results: Mapping[str, Mapping[str, float]],
                      recipe: dict | None = None, extra: dict | None = None) -> dict[str, dict[str, float]]:
    """One ``record_eval`` per group; NaN metrics are left out, and a group left with its count only
    is not recorded. Where ``results`` carries per-user values (an :class:`EvalResults`), they are
    stored once (``extra.per_user``) and each record gets ``ci``: the 95% percentile-bootstrap
    interval over the group's users, drawn as whole users (``mmgrid.registry.peruser.intervals``).

    Returns:
        ``{group: metrics}`` as recorded.
    """
    per = getattr(results, "per_user", None)
    extra = dict(extra or {})
    out: dict[str, dict[str, float]] = {}
    recording = getattr(registry, "recording", None)  # all groups recorded together, or none (a full disk)
    with recording() if recording is not None else contextlib.nullcontext():
        if per is not None:
            extra["per_user"] = registry.put_per_user(per.users, per.active, per.metrics)
        for group, metrics in results.items():
            clean = {k: float(v) for k, v in metrics.items() if v == v}
            if not set(clean) - {"n"}:
                continue
            ci = None
            if per is not None and group in GROUPS:
                ci = {k: v for k, v in intervals(per.active, per.metrics, group, per.users).items() if k in clean}
            registry.record_eval(ref, split, group, clean, recipe=recipe, extra=extra, ci=ci)
            out[group] = clean
    return out


def record_results(registry: Registry, ref: Any, split: str, results: Mapping[str, Mapping[str, float]],
                   eval_domain: str, recipe: dict | None = None, extra: dict | None = None) -> None:
    """:func:`record_evaluation` with ``extra.eval_domain`` (one record per group)."""
    record_evaluation(registry, ref, split, results, recipe=recipe, extra={"eval_domain": eval_domain, **(extra or {})})


def evaluate_state(paradigm: Any, ckpt: Any, domain: Any, params: dict[str, Any] | None = None,
                   evaluator: Evaluator | None = None, **kwargs: Any) -> EvalResults:
    """Evaluate an in-memory checkpoint (e.g. a merged state) without storing it.

    Args:
        paradigm: the Paradigm.
        ckpt: a ``Checkpoint`` (files/meta/added rows of a template, ``state`` possibly merged).
        domain: the prepared domain evaluated.
        params: the paradigm's params.
        evaluator: reuse its cached examples (else one is made from ``kwargs``).
    """
    model = paradigm.load(ckpt, domain, dict(params or {}))
    ev = evaluator or Evaluator(paradigm, domain, **kwargs)
    return ev.evaluate(model)
