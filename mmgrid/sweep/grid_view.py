"""The grid as report.html shows it: one cell per (paradigm, variant, domain, period) with its metrics,
and one card per checkpoint (coordinates, manifest, parents, results, lineage).

Each cell's value is the mean over test users of the checkpoint's newest own evaluation on the
grid's test window (``cfg.eval.split``), per user group and metric, in %: seed-pooled (every
training seed's replicate, users and seeds resampled for the 95% interval, as Table 2) and per
seed (the recorded mean and interval of that replicate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.eval.table import LEVEL, N_RESAMPLES, PerUser, checkpoint_rows, seed_ids
from mmgrid.runtime.plan import planned_ids
from mmgrid.stats import mean_ci

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry

GROUPS = ("all", "active", "non_active")
POOLED = "pooled"
MAX_CARDS = 5000  # checkpoint cards in one page (the grid's own checkpoints come first)


@dataclass
class GridView:
    """The heatmaps' cells and the checkpoint cards of report.html."""

    split: str
    metrics: list[str]
    groups: list[str]
    seeds: list[str]  # "pooled" then each training seed as text
    panels: list[dict[str, Any]]  # {key, paradigm, variant, domains, periods}
    cells: list[dict[str, Any]]  # panel, domain, period, group, metric, seed, value, low, high, n_users, id, ids
    cards: dict[str, dict[str, Any]] = field(default_factory=dict)


def grid_view(cfg: GridConfig, registry: Registry) -> GridView:
    """Read every trained checkpoint of the grid's variants and its evaluations into a :class:`GridView`."""
    split = cfg.eval.split
    periods = list(cfg.train.stages)
    pu = PerUser(registry)
    panels, cells, ids_all = [], [], []
    metrics: list[str] = []
    seeds_seen: set[int] = set()
    plan = planned_ids(cfg, registry)  # the grid's ids win over equal coords (an earlier identity)
    planned = plan.id_set if plan is not None else None
    for v in cfg.variants:
        for p in (v.paradigms or cfg.paradigms):
            by_period = {per: seed_ids(registry, p, per, v.name, planned) for per in periods}
            if not any(by_period.values()):
                continue
            key = f"{p}/{v.name}"
            domains = sorted({d for by in by_period.values() for d in by})
            panels.append({"key": key, "paradigm": p, "variant": v.name, "domains": domains,
                           "periods": [per for per in periods if by_period[per]]})
            for per, by_domain in by_period.items():
                for d, by_seed in by_domain.items():
                    ids = [i for _, i in sorted(by_seed.items())]
                    ids_all += ids
                    seeds_seen.update(by_seed)
                    for g in GROUPS:
                        rows = checkpoint_rows(registry, ids, split, g)
                        if rows.empty:
                            continue
                        for m in sorted(x for x in set(rows["metric"]) if "@" in x):  # recall@K, ndcg@K
                            if m not in metrics:
                                metrics.append(m)
                            cells += _cells(key, d, per, g, m, rows[rows["metric"] == m], by_seed, pu)
    order = sorted(metrics, key=lambda m: (m.split("@")[0] != "recall", m))
    seeds = [POOLED] + [str(s) for s in sorted(seeds_seen)]
    return GridView(split, order, [g for g in GROUPS if any(c["group"] == g for c in cells)], seeds, panels, cells,
                    cards(registry, ids_all))


def _cells(panel: str, domain: str, period: str, group: str, metric: str, rows: pd.DataFrame,
           by_seed: dict[int, str], pu: PerUser) -> list[dict[str, Any]]:
    """The pooled cell and one cell per seed of one (checkpoint cell, group, metric)."""
    base = {"panel": panel, "domain": domain, "period": period, "group": group, "metric": metric}
    seed_of = {cid: s for s, cid in by_seed.items()}
    rows = rows.assign(seed_k=[seed_of.get(i, -1) for i in rows["id"]]).sort_values("seed_k")
    out = []
    for r in rows.itertuples():
        out.append({**base, "seed": str(r.seed_k), "value": _pct(r.value), "low": _pct(getattr(r, "ci_low", np.nan)),
                    "high": _pct(getattr(r, "ci_high", np.nan)), "n_users": None, "id": r.id, "ids": [r.id]})
    m = pu.matrix(rows, metric)
    if m is not None:
        mean, lo, hi = mean_ci(m[1], level=LEVEL, n_resamples=N_RESAMPLES, clusters=m[0])
        n_users = int(m[1].shape[1])
    else:
        mean, lo, hi, n_users = float(rows["value"].astype(float).mean()), np.nan, np.nan, None
        if len(rows) == 1:
            lo, hi = float(rows["ci_low"].iloc[0]), float(rows["ci_high"].iloc[0])
    ids = list(rows["id"])
    out.append({**base, "seed": POOLED, "value": _pct(mean), "low": _pct(lo), "high": _pct(hi), "n_users": n_users,
                "id": ids[0], "ids": ids})
    return out


def _pct(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return round(f * 100, 6) if np.isfinite(f) else None


def cards(registry: Registry, ids: list[str]) -> dict[str, dict[str, Any]]:
    """id -> the checkpoint's card: coordinates, manifest (its tensors summarised as count and bytes;
    ``mmgrid show ID`` lists them), parents, results and its lineage graph."""
    out: dict[str, dict[str, Any]] = {}
    ids = list(dict.fromkeys(ids))
    graphs = {cid: registry.lineage(cid) for cid in ids}
    # the ancestors get cards too (a parent link opens one), up to a bound that keeps the page small
    for g in list(graphs.values()):
        for n, d in g.nodes(data=True):
            if n not in graphs and not d.get("missing") and len(graphs) < MAX_CARDS:
                graphs[n] = registry.lineage(n)
    ids = list(graphs)
    res = registry.results(id=ids) if ids else pd.DataFrame()
    for cid in ids:
        m = registry.get(cid)
        g = graphs[cid]
        rows = res[res["id"] == cid] if not res.empty else res
        results = []
        for r in rows.sort_values(["split", "group", "metric"]).itertuples() if not rows.empty else []:
            results.append({"split": r.split, "group": r.group, "metric": r.metric, "value": _num(r.value),
                            "ci_low": _num(getattr(r, "ci_low", None)), "ci_high": _num(getattr(r, "ci_high", None)),
                            "study": _str(getattr(r, "study", None)), "eval_domain": _str(getattr(r, "eval_domain", None))})
        manifest = m.to_json()
        blobs = manifest.pop("blobs", {}) or {}  # one line per tensor: summarised, the page stays small
        manifest["tensors"] = {"count": len(blobs), "bytes": sum(int(b.get("nbytes", 0)) for b in blobs.values())}
        out[cid] = {"id": cid, "kind": m.kind, "coords": dict(m.coords), "seed": m.seed,
                    "manifest": manifest, "parents": [{"id": p.id, "role": p.role} for p in m.parents],
                    "results": results, "lineage": lineage_layout(g, cid)}
    return out


def lineage_layout(g: Any, target: str) -> dict[str, Any]:
    """Nodes placed by generation (x: depth from the roots, y: order within it) and the edges with roles."""
    import networkx as nx  # lazy: networkx (~0.3 s) only where cards are drawn

    nodes = []
    for depth, layer in enumerate(nx.topological_generations(g)):
        for k, n in enumerate(sorted(layer)):
            d = g.nodes[n]
            nodes.append({"id": n, "x": depth, "y": k, "label": str(d.get("label", n)),
                          "kind": str(d.get("kind", "")), "target": n == target})
    edges = [{"from": a, "to": b, "role": str(d.get("role", ""))} for a, b, d in g.edges(data=True)]
    return {"nodes": nodes, "edges": edges}


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def _str(v: Any) -> str | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
