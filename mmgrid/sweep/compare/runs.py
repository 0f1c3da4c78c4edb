"""Compare two runs cell by cell, paired per user: ``compare_runs(registry_a, registry_b, spec)``.

Two runs of the same grid that differ in one setting (a learning rate, a seed list, a world)
hold evaluations of the same cells. A **cell** is everything that names what was evaluated,
read from the evaluation records, never from checkpoint ids (ids change with every training
setting): the study (None for a checkpoint's own evaluation), the checkpoint's kind, paradigm,
domain, period and variant, and the study's own coordinates recorded with the evaluation
(strategy, method, lambda, alpha, base kind, evaluation domain...), for one split, user group
and metric; a row with a named ``strategy`` (the continual study's lambda*, lambda_hat*) is paired by
that name, not by the lambda each run chose. Within a cell, the rows of each training seed are paired with the other run's rows
of the same seed, and each row's per-user values (``Registry.per_user``) with the other's by
user (and by the order of a user's test examples).

Per paired cell: A's and B's means, the difference A - B with its percentile-bootstrap interval
over users and seeds and a paired sign-flip randomization p (:func:`mmgrid.stats.paired_difference`,
users as the resampled unit, seeds kept together, as the report's paired comparisons), and
Holm's correction over all paired cells of the comparison (:func:`mmgrid.stats.holm`).

A cell that cannot be paired is listed with the reason: present in one run only, the metric
recorded in one run only, no training seed in common, no per-user values (a registry written
before mmgrid kept them), or different users (the test windows differ: a difference of means
over different users is not a paired comparison, so none is computed).

Duplicates: where a run holds several evaluations of one cell and seed (an evaluation re-run, or
two checkpoints with the same coordinates, e.g. stored under an earlier mmgrid's id), the newest
evaluation is used and ``duplicates`` counts the others set aside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd

from mmgrid.errors import ConfigError
from mmgrid.eval.table import PerUser, align, newest_rows, seed_number
from mmgrid.stats import holm, paired_difference

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry

# Columns of a results row that are not coordinates of what was evaluated.
NOT_COORDS = frozenset({"id", "recipe_hash", "split", "group", "metric", "value", "ci_low", "ci_high", "seed",
                        "per_user", "recipe", "created", "key", "extra", "seed_k", "n"})
# The leading cell columns, in this order; the study's own coordinates follow, sorted.
LEADING = ["study", "kind", "paradigm", "domain", "period", "variant"]
# Coordinates a named ``strategy`` chooses from each run's own data (lambda* and lambda_hat*): a strategy's
# rows pair by its name, whatever lambda each run chose.
CHOSEN = ("lambda",)
FILTERS = ("kind", "paradigm", "domain", "period", "variant", "study")

MAX_RESAMPLES = 1_000_000  # bootstrap replicates per cell (--resamples), checked before any work


@dataclass(frozen=True)
class CompareSpec:
    """What to compare.

    Attributes:
        metric: the metric (``ndcg@10``, ``recall@10``...).
        split: the evaluation split (``test``).
        group: the user group (``all``, ``active``, ``non_active``).
        filters: cell coordinates to keep (``kind``, ``paradigm``, ``domain``, ``period``,
            ``variant``, ``study``; ``study="none"`` keeps only the checkpoints' own evaluations).
        level: the intervals' coverage.
        n_resamples: bootstrap replicates per cell.
    """

    metric: str = "ndcg@10"
    split: str = "test"
    group: str = "all"
    filters: Mapping[str, str] = field(default_factory=dict)
    level: float = 0.95
    n_resamples: int = 2000

    def __post_init__(self) -> None:
        bad = sorted(set(self.filters) - set(FILTERS))
        if bad:
            raise ConfigError(f"compare: unknown cell filter(s) {bad}; filter on {list(FILTERS)}")
        if not 0.0 < self.level < 1.0:
            raise ConfigError(f"compare: level={self.level} must lie in (0, 1), e.g. 0.95")
        if not 1 <= self.n_resamples <= MAX_RESAMPLES:
            raise ConfigError(f"compare --resamples {self.n_resamples}: out of range; accepted: an integer in "
                              f"[1, {MAX_RESAMPLES:,}] (bootstrap replicates per cell). Give e.g. --resamples 2000.")


@dataclass
class Comparison:
    """The result of :func:`compare_runs`.

    Attributes:
        rows: one row per paired cell: the cell columns, ``seeds``, ``n_users``, ``mean_a``,
            ``mean_b``, ``diff`` (A - B), ``ci_low``, ``ci_high``, ``p``, ``p_holm``, ``duplicates``.
        unpaired: one row per cell that cannot be paired: the cell columns and ``reason``.
        cell_columns: the columns that name a cell.
        spec: what was compared; label_a, label_b: the runs' names.
    """

    rows: pd.DataFrame
    unpaired: pd.DataFrame
    cell_columns: list[str]
    spec: CompareSpec
    label_a: str = "A"
    label_b: str = "B"


def _rows(registry: Registry, spec: CompareSpec) -> pd.DataFrame:
    """The run's evaluation rows of the split and group (every metric), filtered on the cell."""
    df = registry.results(split=spec.split, group=spec.group)
    if df.empty:
        return df
    for k, v in spec.filters.items():
        if k == "study" and str(v).lower() == "none":
            df = df[df["study"].isna()] if "study" in df.columns else df
        elif k not in df.columns:
            return df.iloc[0:0]
        else:
            df = df[df[k].astype(str) == str(v)]
    return df


def _coords(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    cols = set(a.columns) | set(b.columns)
    rest = sorted(c for c in cols - NOT_COORDS - set(LEADING) if not c.startswith("_"))
    return [c for c in LEADING if c in cols] + rest


def _norm(v: Any) -> Any:
    """A cell coordinate made comparable across runs: missing -> None, floats rounded, numpy scalars unboxed."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, np.generic):
        v = v.item()
    return round(v, 9) if isinstance(v, float) else v


def _groups(df: pd.DataFrame, cols: list[str]) -> dict[tuple, pd.DataFrame]:
    """Cell -> its rows (every metric), with ``seed_k`` (the training seed; -1 for none)."""
    if df.empty:
        return {}
    df = df.copy()
    for c in cols:
        if c not in df.columns:
            df[c] = None
    df["seed_k"] = [seed_number(v) for v in df["seed"]] if "seed" in df.columns else -1
    named = [cols.index(c) for c in CHOSEN if c in cols]
    at = cols.index("strategy") if "strategy" in cols else None
    buckets: dict[tuple, list[int]] = {}
    for i, k in enumerate(df[cols].itertuples(index=False, name=None)):
        key = [_norm(v) for v in k]
        if at is not None and key[at] is not None:  # a named strategy: its lambda is chosen per run
            for j in named:
                key[j] = None
        buckets.setdefault(tuple(key), []).append(i)
    return {k: df.iloc[ix] for k, ix in buckets.items()}


def compare_runs(registry_a: Any, registry_b: Any, spec: CompareSpec | None = None,
                 labels: tuple[str, str] = ("A", "B")) -> Comparison:
    """Pair the cells of two runs' registries and compare ``spec.metric`` per cell (module docstring)."""
    spec = spec or CompareSpec()
    raw_a, raw_b = _rows(registry_a, spec), _rows(registry_b, spec)
    cols = _coords(raw_a, raw_b)
    ga, gb = _groups(raw_a, cols), _groups(raw_b, cols)
    pu_a, pu_b = PerUser(registry_a), PerUser(registry_b)
    paired, unpaired = [], []
    for key in sorted(set(ga) | set(gb), key=repr):
        cell = dict(zip(cols, key))
        da, db = ga.get(key), gb.get(key)
        ma = da[da["metric"] == spec.metric] if da is not None else None
        mb = db[db["metric"] == spec.metric] if db is not None else None
        has_a, has_b = ma is not None and not ma.empty, mb is not None and not mb.empty
        if not has_a and not has_b:
            continue  # the cell has other metrics only, in both runs
        reason = _missing(spec.metric, labels, da, db, has_a, has_b)
        if reason:
            unpaired.append({**cell, "reason": reason})
            continue
        got = _pair(pu_a, pu_b, ma, mb, spec, labels)
        if isinstance(got, str):
            unpaired.append({**cell, "reason": got})
        else:
            paired.append({**cell, **got})
    rows = pd.DataFrame(paired, columns=[*cols, "seeds", "n_users", "mean_a", "mean_b", "diff", "ci_low", "ci_high",
                                         "p", "duplicates", "seeds_unpaired"])
    rows["p_holm"] = holm(rows["p"].to_numpy(dtype=float)) if not rows.empty else []
    return Comparison(rows, pd.DataFrame(unpaired, columns=[*cols, "reason"]), cols, spec, *labels)


def _missing(metric: str, labels: tuple[str, str], da: pd.DataFrame | None, db: pd.DataFrame | None,
             has_a: bool, has_b: bool) -> str | None:
    """Why a cell is not in both runs with ``metric``, or None when it is."""
    if has_a and has_b:
        return None
    have, lack, other = (labels[0], labels[1], db) if has_a else (labels[1], labels[0], da)
    if other is None or other.empty:
        return f"only in run {have} (run {lack} has no evaluation of this cell)"
    return (f"{metric} recorded in run {have} only; run {lack} recorded this cell with "
            f"{', '.join(sorted(set(other['metric'])))}")


def _pair(pu_a: PerUser, pu_b: PerUser, ma: pd.DataFrame, mb: pd.DataFrame, spec: CompareSpec,
          labels: tuple[str, str]) -> dict[str, Any] | str:
    """The paired comparison of one cell, or why it cannot be made."""
    dups = (len(ma) - len(set(ma["seed_k"]))) + (len(mb) - len(set(mb["seed_k"])))
    na, nb = newest_rows(ma, ["seed_k"]), newest_rows(mb, ["seed_k"])
    seeds = sorted(set(na["seed_k"]) & set(nb["seed_k"]))
    if not seeds:
        return (f"no training seed in common (run {labels[0]}: {sorted(set(na['seed_k']))}, "
                f"run {labels[1]}: {sorted(set(nb['seed_k']))}; -1: none recorded)")
    va = pu_a.matrix(na.set_index("seed_k").loc[seeds].reset_index(), spec.metric)
    vb = pu_b.matrix(nb.set_index("seed_k").loc[seeds].reset_index(), spec.metric)
    if va is None or vb is None:
        lab = labels[0] if va is None else labels[1]
        return f"run {lab} has no per-user values for this cell (recorded before mmgrid kept them); evaluate it again"
    (ua, xa), (ub, xb) = va, vb
    ia, ib = align(ua, ub)
    if ia.size != len(ua) or ib.size != len(ub):
        return (f"different users: {ia.size} test examples in common, {len(ua) - ia.size} only in run {labels[0]}, "
                f"{len(ub) - ib.size} only in run {labels[1]} (different test windows or data)")
    r = paired_difference(xa[:, ia], xb[:, ib], level=spec.level, n_resamples=spec.n_resamples, clusters=ua[ia])
    only = sorted((set(na["seed_k"]) | set(nb["seed_k"])) - set(seeds))
    out = {"seeds": seeds, "n_users": int(np.unique(ua[ia]).size), "mean_a": r.mean_a, "mean_b": r.mean_b,
           "diff": r.diff, "ci_low": r.ci_low, "ci_high": r.ci_high, "p": r.pvalue, "duplicates": dups, "seeds_unpaired": only}
    return out
