"""The report's tables (MMGRid Tables 2-4) as DataFrames with the registry ids behind each row.

Every builder returns ``(table, provenance)``: ``provenance`` maps a table row label to
the registry ids (checkpoint ids or recipe hashes) its cells were read from.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.sweep.results import checkpoint_metrics

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.sweep.lambda_model import LambdaPrediction

METRICS = [("recall@10", "R@10"), ("recall@20", "R@20"), ("ndcg@10", "N@10"), ("ndcg@20", "N@20")]
Provenance = dict[str, list[str]]


def markdown_table(df: pd.DataFrame, fmt: str = "{:.3f}", index: bool = True, index_name: str = "") -> str:
    """A GitHub-Markdown table; MultiIndex columns are joined with a space; NaN shows as '-'."""
    cols = [" ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in df.columns]
    head = ([index_name or (df.index.name or "")] if index else []) + cols
    lines = ["| " + " | ".join(map(_esc, head)) + " |", "|" + "---|" * len(head)]
    for label, row in df.iterrows():
        cells = [_cell(v, fmt) for v in row.tolist()]
        lines.append("| " + " | ".join(_esc(c) for c in ([str(label)] if index else []) + cells) + " |")
    return "\n".join(lines)


def _esc(text: str) -> str:
    return str(text).replace("|", "\\|")


def _cell(v: Any, fmt: str) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    if isinstance(v, (float, np.floating)):
        return fmt.format(float(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v)


def final_ids(cfg: GridConfig, registry: Any, paradigm: str, variant: str = "default") -> dict[str, str]:
    """Domain -> id of the newest trained checkpoint of the last stage."""
    ck = registry.query(paradigm=paradigm, variant=variant, kind="trained", period=cfg.train.stages[-1])
    if ck.empty:
        return {}
    ck = ck.sort_values("created").drop_duplicates("domain", keep="last")
    return dict(zip(ck["domain"], ck["id"]))


def table2(cfg: GridConfig, registry: Any, domains: list[str], scale: float = 100.0) -> tuple[pd.DataFrame, Provenance]:
    """MMGRid Table 2: rows paradigm (+ SASRec, MostPop), columns domain x R@10/R@20/N@10/N@20 (x ``scale``)."""
    rows = list(dict.fromkeys([*cfg.paradigms, "popular"]))
    cols = pd.MultiIndex.from_tuples([(d, short) for d in domains for _, short in METRICS])
    out = pd.DataFrame(index=rows, columns=cols, dtype=float)
    prov: Provenance = {}
    for p in rows:
        if p == "popular":
            ck = registry.query(paradigm="popular")
            if not ck.empty:
                ck = ck.sort_values("created").drop_duplicates("domain", keep="last")
            ids = dict(zip(ck["domain"], ck["id"])) if not ck.empty else {}
        else:
            ids = final_ids(cfg, registry, p)
        vals = checkpoint_metrics(registry, list(ids.values()), split=cfg.eval.split, group="all")
        for d in domains:
            cid = ids.get(d)
            if cid is None or cid not in vals.index:
                continue
            for m, short in METRICS:
                if m in vals.columns:
                    out.loc[p, (d, short)] = float(vals.loc[cid, m]) * scale
        prov[p] = [ids[d] for d in domains if d in ids]
    out = out.dropna(how="all")
    return out, {k: v for k, v in prov.items() if k in out.index}


def table3(temporal: pd.DataFrame, lambda_hat: pd.DataFrame, domains: list[str], scale: float = 100.0
           ) -> tuple[pd.DataFrame, Provenance]:
    """MMGRid Table 3: all users' metrics at lambda = 1 and at the predicted lambda_hat* per domain."""
    cols = pd.MultiIndex.from_tuples([(d, short) for d in domains for _, short in METRICS])
    out = pd.DataFrame(index=["lambda = 1", "lambda = lambda_hat*"], columns=cols, dtype=float)
    prov: Provenance = {"lambda = 1": [], "lambda = lambda_hat*": []}
    srcs = {"lambda = 1": temporal[np.isclose(temporal["lambda"].astype(float), 1.0)] if not temporal.empty else temporal,
            "lambda = lambda_hat*": lambda_hat}
    for label, df in srcs.items():
        if df is None or df.empty:
            continue
        df = df[df["group"] == "all"]
        for d in domains:
            sub = df[df["domain"] == d]
            for m, short in METRICS:
                hit = sub[sub["metric"] == m]
                if not hit.empty:
                    out.loc[label, (d, short)] = float(hit["value"].iloc[-1]) * scale
            prov[label] += list(dict.fromkeys(sub["recipe_hash"].dropna()))
    return out, prov


def table4(pred: "LambdaPrediction", feature_labels: dict[str, str] | None = None) -> tuple[pd.DataFrame, Provenance]:
    """MMGRid Table 4 layout: domains as columns; users, p_active, lambda*, statistics, LOO prediction, Eq. 11."""
    labels = {"avg_gap_days": "Ave. interaction time gap (d)", **(feature_labels or {})}
    t = pred.table.set_index("domain")
    rows: dict[str, pd.Series] = {}
    for col, label in (("test_users", "# Users (test)"), ("active_users", "# Active users"),
                       ("non_active_users", "# Non-active users"), ("p_active", "Ratio of active users (p_active)")):
        if col in t.columns:
            rows[label] = t[col]
    rows[f"lambda* ({pred.group.replace('_', '-')} users)"] = t["lambda_star"]
    for f in pred.features:
        rows[labels.get(f, f)] = t[f]
    if pred.loo is not None:
        loo = pred.loo.set_index("domain")
        rows["lambda* predicted (leave-one-out)"] = loo["lambda_pred"]
        rows["lambda_hat* (Eq. 11)"] = loo["lambda_hat"]
    out = pd.DataFrame(rows).T
    out.columns.name = None
    return out, {"all rows": ["prepared stats.parquet", *_star_sources(pred)]}


def _star_sources(pred: "LambdaPrediction") -> list[str]:
    return [f"temporal study: paradigm={pred.paradigm}, metric={pred.metric}"]


def regression_summary(pred: "LambdaPrediction") -> pd.DataFrame:
    """The fitted regression in one small table: coefficients, R^2, Spearman's rho, LOO error."""
    rows: dict[str, float] = {}
    if pred.fit is not None:
        rows["intercept"] = pred.fit.intercept
        for f, c in zip(pred.fit.features, pred.fit.coef):
            rows[f"slope on {f}"] = float(c)
        rows["R^2 (all domains)"] = pred.fit.r2
        rows["residual s.d."] = pred.fit.sigma
    if pred.loo is not None:
        rows["LOO mean |error|"] = float(pred.loo["abs_error"].mean())
    rows[f"Spearman rho ({pred.features[0]}, lambda*)"] = pred.rho
    rows["Spearman p-value"] = pred.pvalue
    rows["domains"] = float(len(pred.table))
    return pd.DataFrame({"value": rows})


def cross_domain_table(rel: pd.DataFrame) -> tuple[pd.DataFrame, Provenance]:
    """Mean relative change (%) per paradigm x method x base (Figures 3-4 in one table)."""
    if rel.empty:
        return pd.DataFrame(), {}
    g = rel.groupby(["paradigm", "method", "base_kind"])
    out = (g["rel_change"].mean() * 100).to_frame("mean % change")
    out["best alpha"] = g.apply(lambda s: s.groupby("alpha")["rel_change"].mean().idxmax() if s["alpha"].notna().any()
                                else np.nan, include_groups=False)
    out.index = [" / ".join(map(str, i)) for i in out.index]
    prov = {" / ".join(map(str, k)): sorted(set(v["recipe_hash"].dropna())) for k, v in g}
    return out, prov


def provenance_markdown(title: str, prov: Provenance) -> str:
    """An appendix section listing the registry ids behind each row."""
    lines = [f"**{title}**", ""]
    for row, ids in prov.items():
        shown = ", ".join(f"`{i}`" for i in ids[:40])
        more = f" (+{len(ids) - 40} more)" if len(ids) > 40 else ""
        lines.append(f"- {row}: {shown or '-'}{more}")
    return "\n".join(lines)


def recipe_inputs(recipe_json: str | None) -> list[str]:
    """Input ids named by a recorded recipe."""
    try:
        return list(json.loads(recipe_json or "{}").get("inputs") or [])
    except ValueError:
        return []
