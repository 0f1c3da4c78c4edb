"""`mmgrid compare` as the console shows it: two runs' cells side by side, A - B paired per user
(:func:`mmgrid.sweep.compare.runs.compare_runs`)."""

from __future__ import annotations

import math
from typing import Any

from mmgrid.eval.table import fmt_ci, fmt_p
from mmgrid.sweep.compare.runs import Comparison


def comparison_text(cmp: Comparison, scale: float = 100.0) -> str:
    """`mmgrid compare`'s plain-text table of a :class:`~mmgrid.sweep.compare.runs.Comparison`: A - B per cell
    (values in %, differences in points) with its interval, p and Holm p, then the cells that cannot be paired."""
    s = cmp.spec
    lines = [f"{s.metric} ({s.split}, {s.group} users): A = {cmp.label_a}, B = {cmp.label_b}; "
             f"A - B per cell, paired per user, {int(s.level * 100)}% bootstrap interval over users and seeds, "
             "sign-flip p, Holm over the cells"]
    show = [c for c in cmp.cell_columns if c in cmp.rows.columns and cmp.rows[c].notna().any()]
    if cmp.rows.empty:
        lines.append("no cell could be paired")
    else:
        head = show + ["seeds", "users", "A", "B", "A - B [interval]", "p", "p (Holm)"]
        body = []
        for r in cmp.rows.to_dict("records"):
            body.append([_txt(r[c]) for c in show] + [",".join(str(x) for x in r["seeds"]), str(r["n_users"]),
                        fmt_ci(r["mean_a"], math.nan, math.nan, scale), fmt_ci(r["mean_b"], math.nan, math.nan, scale),
                        fmt_ci(r["diff"], r["ci_low"], r["ci_high"], scale, sign=True), fmt_p(r["p"]),
                        fmt_p(r["p_holm"])])
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        lines += ["  ".join(x.ljust(w) for x, w in zip(b, widths)) for b in body]
        part = [r for r in cmp.rows.to_dict("records") if r["seeds_unpaired"]]
        if part:
            lines.append(f"{len(part)} cell(s) paired on their common seeds only; the others: "
                         + "; ".join(f"{', '.join(_txt(r[c]) for c in show)}: {r['seeds_unpaired']}" for r in part))
        dup = int(cmp.rows["duplicates"].sum())
        if dup:
            lines.append(f"{dup} older evaluation(s) of a cell and seed set aside (the newest is used)")
    if not cmp.unpaired.empty:
        lines.append(f"cannot be paired ({len(cmp.unpaired)}):")
        for r in cmp.unpaired.to_dict("records"):
            cell = ", ".join(f"{c}={_txt(r[c])}" for c in cmp.cell_columns if c in r and _txt(r[c]) != "-")
            lines.append(f"  {cell}: {r['reason']}")
    return "\n".join(lines)


def _txt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)
