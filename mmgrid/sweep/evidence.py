"""The report's uncertainty: per-user values read back from the registry, turned into intervals and tests.

Every evaluation stores its per-user metric values (``extra.per_user``; ``Registry.per_user(row)``
returns the row's group: ``user_idx``, ``active`` and one column per metric). This module gathers
them into the arrays :mod:`mmgrid.stats` works on:

* ``[n_seeds, n_users]`` for one checkpoint cell (one row per training seed's replicate, the
  same test users), giving Table 2's means with intervals and the paired comparisons;
* ``[n_seeds, n_lambdas, n_users]`` for one domain and user group of the temporal study, giving
  the robust lambda* (seed-averaged curve, bootstrap interval, edge flag) and Figure 5's bands.

A registry written before per-user values were kept has none: then every function falls back to
the recorded means (no interval; the report says so). The checkpoint-cell readers (``PerUser``,
``CheckpointValues``, ``fmt_ci``) live in :mod:`mmgrid.eval.table`, which the console table shares.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mmgrid.eval.table import (KEY_SPAN, LEVEL, N_RESAMPLES, Cell, CheckpointValues, PerUser,  # noqa: F401
                               newest_rows, seed_number, align, checkpoint_rows, fmt_ci, fmt_p, seed_ids)
from mmgrid.stats.bootstrap import cluster_index, cluster_sums, percentile_interval, resample_counts
from mmgrid.stats import (LambdaStar, curve_band, domains_lambda_star_replicates, holm, mean_ci,
                          paired_difference, robust_lambda_star)
from mmgrid.stats.lambda_star import family_interval, family_level

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry



def paired_cells(cv: CheckpointValues, a: tuple[str, str], b: tuple[str, str], metric: str) -> dict[str, Any] | None:
    """A - B of two cells ``(paradigm, domain)`` over their common users (seeds matched where both have them)."""
    ma, mb = cv.values(*a, metric), cv.values(*b, metric)
    if ma is None or mb is None:
        return None
    (ua, va), (ub, vb) = ma, mb
    ia, ib = align(ua, ub)
    if ia.size == 0:
        return None
    va, vb = va[:, ia], vb[:, ib]
    if va.shape[0] != vb.shape[0] and 1 not in (va.shape[0], vb.shape[0]):
        k = min(va.shape[0], vb.shape[0])
        va, vb = va[:k], vb[:k]
    r = paired_difference(va, vb, level=LEVEL, n_resamples=N_RESAMPLES, clusters=ua[ia])
    return {"diff": r.diff, "ci_low": r.ci_low, "ci_high": r.ci_high, "p": r.pvalue, "n_users": r.n_users,
            "n_seeds": r.n_seeds, "mean_a": r.mean_a, "mean_b": r.mean_b}


def with_holm(df: pd.DataFrame, p: str = "p", by: list[str] | None = None) -> pd.DataFrame:
    """Add ``p_holm``: Holm's correction over all rows (or within each ``by`` group)."""
    df = df.copy()
    if df.empty:
        df["p_holm"] = []
        return df
    if not by:
        df["p_holm"] = holm(df[p].to_numpy(dtype=float))
        return df
    df["p_holm"] = np.nan
    for _, g in df.groupby(by):
        df.loc[g.index, "p_holm"] = holm(g[p].to_numpy(dtype=float))
    return df


# --------------------------------------------------------------------------- temporal curves


@dataclass
class Curves:
    """Per-user curves of one domain and group: ``values[seed, lambda, user]``."""

    domain: str
    group: str
    lambdas: np.ndarray
    seeds: list[int]
    users: np.ndarray
    values: np.ndarray
    recipe_hashes: list[str]


def study_rows(registry: Registry, study: str, paradigm: str, variant: str, metric: str) -> pd.DataFrame:
    """The newest evaluation per (domain, group, seed, lambda) of a temporal-type study."""
    df = registry.results(study=study, metric=metric)
    if df.empty:
        return df
    for col, want in (("paradigm", paradigm), ("variant", variant)):
        if col in df.columns:
            df = df[df[col] == want]
    if df.empty or "lambda" not in df.columns:
        return pd.DataFrame()
    df = df.copy()
    df["lambda"] = pd.to_numeric(df["lambda"], errors="coerce").round(9)
    df["seed_k"] = [seed_number(v) for v in df["seed"]] if "seed" in df.columns else -1
    return newest_rows(df, ["domain", "group", "seed_k", "lambda"])


def temporal_curves(registry: Registry, paradigm: str, variant: str, metric: str, study: str = "temporal",
                    pu: PerUser | None = None) -> dict[tuple[str, str], Curves]:
    """(domain, group) -> per-user curves; only lambdas every seed has; {} without per-user values.

    ``pu``: a shared reader (its cache serves every metric of the same records).
    """
    rows = study_rows(registry, study, paradigm, variant, metric)
    if rows.empty:
        return {}
    pu = pu if pu is not None else PerUser(registry)
    out: dict[tuple[str, str], Curves] = {}
    for (domain, group), g in rows.groupby(["domain", "group"], sort=True):
        seeds = sorted(set(g["seed_k"]))
        lams = sorted(set.intersection(*(set(g.loc[g["seed_k"] == s, "lambda"]) for s in seeds)))
        if not lams:
            continue
        per_seed = []
        for s in seeds:
            sub = g[(g["seed_k"] == s) & g["lambda"].isin(lams)].sort_values("lambda")
            m = pu.matrix(sub, metric)
            if m is None:
                return {}
            per_seed.append(m)
        common = per_seed[0][0]
        cols = [np.arange(len(common))]
        for u, _ in per_seed[1:]:
            ia, ib = align(common, u)
            common, cols = common[ia], [c[ia] for c in cols] + [ib]
        vals = np.stack([v[:, c] for (_, v), c in zip(per_seed, cols)])
        out[(str(domain), str(group))] = Curves(str(domain), str(group), np.asarray(lams, float), seeds, common, vals,
                                                list(dict.fromkeys(g["recipe_hash"].dropna())))
    return out


def robust_stars(curves: dict[tuple[str, str], Curves], smooth: int = 1) -> pd.DataFrame:
    """One row per (domain, group): lambda*, its interval, the edge flag, users and seeds; and ``fw_low`` /
    ``fw_high``, the interval at the family level of the group's m domains (:func:`mmgrid.stats.lambda_star.
    family_level`: 1 - 0.05 / m), on which a claim about *some* domain ("lambda = 1 is not the best") is judged."""
    rows = []
    m = Counter(g for _, g in curves)  # the group's domains: the family of its claim
    for (d, g), c in sorted(curves.items()):
        r: LambdaStar = robust_lambda_star(c.lambdas, c.values, smooth=smooth, level=LEVEL, n_resamples=N_RESAMPLES,
                                           clusters=c.users)
        fw_low, fw_high = family_interval(r, LEVEL, m[g])
        rows.append({"domain": d, "group": g, "lambda_star": r.lambda_star, "ci_low": r.ci_low, "ci_high": r.ci_high,
                     "fw_low": fw_low, "fw_high": fw_high, "fw_level": family_level(LEVEL, m[g]),
                     "on_edge": r.on_edge, "edge_side": r.edge_side, "edge_share": r.edge_share, "best": r.best,
                     "n_users": r.n_users, "n_seeds": r.n_seeds, "grid_low": float(c.lambdas[0]),
                     "grid_high": float(c.lambdas[-1])})
    return pd.DataFrame(rows)


def star_replicates(curves: dict[tuple[str, str], Curves], domains: list[str], group: str, smooth: int = 1
                    ) -> np.ndarray | None:
    """``[n_resamples, n_domains]`` lambda* replicates of ``group`` (users within domains, shared seeds)."""
    cs = [c for d in domains if (c := curves.get((d, group))) is not None]
    if len(cs) != len(domains) or len({c.values.shape[0] for c in cs}) != 1:
        return None
    return domains_lambda_star_replicates([c.lambdas for c in cs], [c.values for c in cs], smooth=smooth,
                                          n_resamples=N_RESAMPLES, clusters=[c.users for c in cs])


def bands(curves: dict[tuple[str, str], Curves], smooth: int = 1) -> pd.DataFrame:
    """Figure 5's curves with pointwise bands: domain, group, lambda, value, low, high."""
    rows = []
    for (d, g), c in sorted(curves.items()):
        mid, lo, hi = curve_band(c.values, smooth=smooth, level=LEVEL, n_resamples=500, clusters=c.users)
        rows += [{"domain": d, "group": g, "lambda": float(lam), "value": float(m), "low": float(a), "high": float(b)}
                 for lam, m, a, b in zip(c.lambdas, mid, lo, hi)]
    return pd.DataFrame(rows)


def at_lambda(c: Curves, lam: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(users, values [n_seeds, n_users]) of one curve at the grid point nearest ``lam`` (within 1e-6)."""
    i = int(np.argmin(np.abs(c.lambdas - lam)))
    if abs(c.lambdas[i] - lam) > 1e-6:
        return None
    return c.users, c.values[:, i, :]


# --------------------------------------------------------------------------- the world's own lambda


def analytic_lambdas(data_root: Any, test_offset_days: float = 91.0) -> dict[str, float]:
    """Domain -> the synthetic world's own lambda for its category trend, from ``truth.json``.

    For a sinusoidal category trend of period P days the category mix alone asks for
    ``lambda = 1 + cos(2 pi 91 / P)`` (mmgrid/data/world_files.py; 91 days = one quarter from p2 to
    the test window). {} when the data is not a synthetic world.
    """

    path = Path(str(data_root)) / "truth.json"
    try:
        truth = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for name, d in (truth.get("domains") or {}).items():
        period = float(d.get("trend_period_days") or 0.0)
        if period > 0:
            out[str(name)] = 1.0 + math.cos(2.0 * math.pi * test_offset_days / period)
    return out


# --------------------------------------------------------------------------- cross-domain (Figures 3-4)


def cross_domain_cells(registry: Registry, metric: str, group: str = "all") -> tuple[pd.DataFrame, PerUser]:
    """The cross-domain study's newest evaluation per (paradigm, pair, eval domain, method, base, alpha)."""
    df = registry.results(study="cross_domain", metric=metric, group=group)
    if df.empty:
        return df, PerUser(registry)
    df = df.copy()
    df["alpha"] = pd.to_numeric(df["alpha"], errors="coerce") if "alpha" in df.columns else np.nan
    for c in ("base_kind", "eval_domain"):
        if c not in df.columns:
            df[c] = None
    df["alpha_k"] = df["alpha"].fillna(-1.0).round(9)
    return newest_rows(df, ["paradigm", "domain", "eval_domain", "method", "base_kind", "alpha_k"]), PerUser(registry)


def _user_pairs(pu: PerUser, merged: Any, single: Any, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    m = pu.matrix([merged, single], metric)
    if m is None:
        return None
    return m[1][0], m[1][1], m[0]


def joint_change_errors(cells: pd.DataFrame, pu: PerUser, metric: str, n_resamples: int = 1000, seed: int = 0
                        ) -> pd.DataFrame:
    """Figure 4's joint % change per (paradigm, method, base, alpha) with a 95% bootstrap interval.

    Joint change = mean over (pair, evaluated domain) of mean(merged) / mean(own t2) - 1; each replicate
    resamples the users of every evaluated domain (the merged and the single model see the same users).
    """
    if cells.empty:
        return pd.DataFrame(columns=["paradigm", "method", "base_kind", "alpha", "value", "low", "high"])
    single = cells[cells["method"] == "single"].set_index(["paradigm", "eval_domain"])
    rng = np.random.default_rng(seed)
    rows = []
    merged = cells[(cells["method"] != "single") & cells["alpha"].notna()]
    for (p, meth, kind, a), g in merged.groupby(["paradigm", "method", "base_kind", "alpha"]):
        reps: list[Any] = []
        points: list[Any] = []
        for _, r in g.sort_values(["domain", "eval_domain"], kind="stable").iterrows():  # draws in a fixed order,
            # not in the order the registry recorded the pairs (a worker pool finishes them in any order)
            if (p, r["eval_domain"]) not in single.index:
                continue
            s = single.loc[(p, r["eval_domain"])]
            s = s.iloc[-1] if isinstance(s, pd.DataFrame) else s
            pair = _user_pairs(pu, r, s, metric)
            if pair is None:
                reps = []
                break
            x, b, users = pair
            if b.mean() <= 0:
                continue
            inv, n_c = cluster_index(users, len(x))
            sums, _ = cluster_sums(np.stack([x, b]), inv, n_c)
            counts = resample_counts(rng, n_resamples, n_c)  # whole users drawn
            with np.errstate(divide="ignore", invalid="ignore"):  # mean(x) / mean(b) over the drawn users' rows
                reps.append((counts @ sums[0]) / (counts @ sums[1]) - 1.0)
            points.append(x.mean() / b.mean() - 1.0)
        if not reps:
            continue
        joint = np.nanmean(np.stack(reps), axis=0)
        lo, hi = percentile_interval(joint, LEVEL, finite=False)  # a replicate of 0 / 0 is left out, x / 0 kept
        rows.append({"paradigm": p, "method": meth, "base_kind": kind, "alpha": float(a),
                     "value": 100 * float(np.mean(points)), "low": 100 * float(lo), "high": 100 * float(hi)})
    return pd.DataFrame(rows, columns=["paradigm", "method", "base_kind", "alpha", "value", "low", "high"])


BASE_ORDER = (("historical", "original"), ("neutral", "historical"), ("neutral", "original"))


def base_orderings(cells: pd.DataFrame, pu: PerUser, metric: str) -> pd.DataFrame:
    """Paired tests of MMGRid Fig. 4's base ordering (neutral > historical > original) per paradigm x method.

    For each pair of bases, every (pair of domains, evaluated domain, alpha) evaluated with both bases
    contributes its users' differences (the same users on both sides); the differences of all these
    cells are pooled into one paired comparison (sign-flip p, bootstrap interval over users).
    """
    cols = ["paradigm", "method", "better", "worse", "diff", "ci_low", "ci_high", "p", "n_users", "n_cells"]
    if cells.empty:
        return pd.DataFrame(columns=cols)
    merged = cells[cells["method"] != "single"]
    rows = []
    for (p, meth), g in merged.groupby(["paradigm", "method"]):
        kinds = set(g["base_kind"].dropna())
        for better, worse in BASE_ORDER:
            if not {better, worse} <= kinds:
                continue
            a_rows = g[g["base_kind"] == better].set_index(["domain", "eval_domain", "alpha_k"])
            b_rows = g[g["base_kind"] == worse].set_index(["domain", "eval_domain", "alpha_k"])
            xs: list[np.ndarray] = []
            ys: list[np.ndarray] = []
            cl: list[list[str]] = []
            n_cells = 0
            for k in a_rows.index.intersection(b_rows.index):
                ra, rb = a_rows.loc[k], b_rows.loc[k]
                ra = ra.iloc[-1] if isinstance(ra, pd.DataFrame) else ra
                rb = rb.iloc[-1] if isinstance(rb, pd.DataFrame) else rb
                pair = _user_pairs(pu, ra, rb, metric)
                if pair is None:
                    xs = []
                    break
                xs.append(pair[0])
                ys.append(pair[1])
                cl.append([f"{k[1]}:{u}" for u in pair[2]])  # the same users of an evaluated domain across cells
                n_cells += 1
            if not xs:
                continue
            r = paired_difference(np.concatenate(xs), np.concatenate(ys), level=LEVEL, n_resamples=N_RESAMPLES,
                                  clusters=np.concatenate(cl))
            rows.append({"paradigm": p, "method": meth, "better": better, "worse": worse, "diff": r.diff,
                         "ci_low": r.ci_low, "ci_high": r.ci_high, "p": r.pvalue, "n_users": r.n_users,
                         "n_cells": n_cells})
    return pd.DataFrame(rows, columns=cols)


def pooled_pair(cv: CheckpointValues, pa: str, pb: str, domains: list[str], metric: str) -> dict[str, Any] | None:
    """paradigm A - paradigm B over the users of every domain pooled (seeds matched), with its interval and p."""
    xs, ys, used, cl = [], [], [], []
    for i, d in enumerate(domains):
        ma, mb = cv.values(pa, d, metric), cv.values(pb, d, metric)
        if ma is None or mb is None:
            continue
        ia, ib = align(ma[0], mb[0])
        va, vb = ma[1][:, ia], mb[1][:, ib]
        cl.append(ma[0][ia].astype(np.int64) + i * 10**12)  # users of different domains are different people
        k = min(va.shape[0], vb.shape[0])
        xs.append(va[:k] if vb.shape[0] != 1 else va)
        ys.append(vb[:k] if va.shape[0] != 1 else vb)
        used.append(d)
    if not xs or len({x.shape[0] for x in xs}) != 1 or len({y.shape[0] for y in ys}) != 1:
        return None
    r = paired_difference(np.concatenate(xs, axis=1), np.concatenate(ys, axis=1), level=LEVEL,
                          n_resamples=N_RESAMPLES, clusters=np.concatenate(cl))
    return {"diff": r.diff, "ci_low": r.ci_low, "ci_high": r.ci_high, "p": r.pvalue, "n_users": r.n_users,
            "n_seeds": r.n_seeds, "domains": used}


def seed_matched(a: Curves, b: Curves) -> tuple[list[int], list[int]]:
    """Indices into ``a.seeds`` and ``b.seeds`` of the seeds both have (in order)."""
    both = [x for x in a.seeds if x in b.seeds]
    return [a.seeds.index(x) for x in both], [b.seeds.index(x) for x in both]


def point_pair(a: Curves, lam_a: float, b: Curves, lam_b: float) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per-user values of curve ``a`` at ``lam_a`` and ``b`` at ``lam_b`` on common users and seeds, and the users."""
    pa, pb = at_lambda(a, lam_a), at_lambda(b, lam_b)
    if pa is None or pb is None:
        return None
    ia_s, ib_s = seed_matched(a, b)
    if not ia_s:
        return None
    iu, ju = align(pa[0], pb[0])
    if iu.size == 0:
        return None
    return pa[1][ia_s][:, iu], pb[1][ib_s][:, ju], pa[0][iu]
