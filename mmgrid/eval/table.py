"""The baseline table in the layout of MMGRid's Table 2: rows are paradigms (plus SASRec
and the most-popular baseline), columns are domain x {R@10, N@10, R@20, N@20}."""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

PRETTY = {"text": "Text (BIGRec)", "semid": "Semantic ID", "emb": "Semantic Emb (HLLM)", "sasrec": "SASRec",
          "popular": "MostPop"}


def baseline_frame(results: pd.DataFrame, paradigms: Sequence[str], domains: Sequence[str],
                   ks: Sequence[int] = (10, 20)) -> pd.DataFrame:
    """Wide frame: index paradigm, columns (domain, "R@K" / "N@K"); newest result per cell.

    Args:
        results: long rows with paradigm, domain, metric, value (and created, eval_domain).
        paradigms: row order.
        domains: column order.
        ks: cut-offs shown.
    """
    df = results
    if "eval_domain" in df.columns:
        df = df[df["eval_domain"].isna() | (df["eval_domain"] == df["domain"])]
    if "created" in df.columns:
        df = df.sort_values("created")
    cols = pd.MultiIndex.from_tuples(
        [(d, f"{m[0].upper()}@{k}") for d in domains for k in ks for m in ("recall", "ndcg")])
    out = pd.DataFrame(index=list(paradigms), columns=cols, dtype=float)
    last = df.groupby(["paradigm", "domain", "metric"])["value"].last() if not df.empty else pd.Series(dtype=float)
    for p in paradigms:
        for d in domains:
            for k in ks:
                for m in ("recall", "ndcg"):
                    key = (p, d, f"{m}@{k}")
                    if key in last.index:
                        out.loc[p, (d, f"{m[0].upper()}@{k}")] = float(last[key])
    return out


def format_table(frame: pd.DataFrame, digits: int = 4) -> str:
    """Markdown table of :func:`baseline_frame` (best value per column in bold)."""
    domains = list(dict.fromkeys(c[0] for c in frame.columns))
    sub = list(dict.fromkeys(c[1] for c in frame.columns))
    head1 = "| Paradigm | " + " | ".join(f"{d} {s}" for d in domains for s in sub) + " |"
    sep = "|---|" + "---|" * len(frame.columns)
    best = frame.max(axis=0)
    lines = [head1, sep]
    for p, row in frame.iterrows():
        cells = []
        for c in frame.columns:
            v = row[c]
            txt = "-" if pd.isna(v) else f"{v:.{digits}f}"
            cells.append(f"**{txt}**" if not pd.isna(v) and v == best[c] else txt)
        lines.append(f"| {PRETTY.get(p, p)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def baseline_table(registry: Any, paradigms: Sequence[str], domains: Sequence[str], *, variant: str = "default",
                   period: str | None = None, split: str = "test", group: str = "all",
                   ks: Sequence[int] = (10, 20), with_popular: bool = True) -> str:
    """The Table-2-style Markdown table from the registry's results.

    Args:
        registry: an open Registry.
        paradigms: GR paradigms and sasrec, in row order (``popular`` is appended).
        domains: domains in column order.
        variant: the grid row shown.
        period: the checkpoints' period (None: any; the newest result wins).
        split, group: which evaluations.
    """
    rows = list(paradigms) + (["popular"] if with_popular and "popular" not in paradigms else [])
    res = registry.results(split=split, group=group)
    if not res.empty:
        res = res[res["paradigm"].isin(rows) & res["domain"].isin(list(domains))]
        res = res[(res["variant"] == variant) | (res["paradigm"] == "popular")]
        if period is not None:
            res = res[(res["period"] == period) | (res["paradigm"] == "popular")]
    return format_table(baseline_frame(res, rows, domains, ks))
