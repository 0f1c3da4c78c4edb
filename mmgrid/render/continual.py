"""The continual-merging study (:mod:`mmgrid.sweep.continual`) as the console shows it: one user group's
table of every strategy against lambda = 1 on the same users, and the verdict line."""

from __future__ import annotations

import math

from mmgrid.errors import ConfigError
from mmgrid.eval.table import LEVEL
from mmgrid.sweep.continual import CONTINUAL, LAMBDA_STRATEGIES, REFERENCE, STUDY, ContinualStudy


def render(study: ContinualStudy, group: str = "all") -> str:
    """Markdown: the pooled table of one user group (every strategy vs lambda = 1) and the verdict line."""
    if study.rows.empty:
        if study.recorded_metrics:
            return (f"_No continual-merging evaluations of {study.metric} recorded (`{STUDY}`); recorded metrics: "
                    f"{', '.join(study.recorded_metrics)} (set sweeps.temporal.metric to one)._\n")
        return f"_No continual-merging evaluations recorded (`{STUDY}`)._\n"
    df = study.rows[study.rows["group"] == group]
    if df.empty:
        raise ConfigError(f"continual merging: no rows for user group {group!r}; recorded groups: "
                          f"{', '.join(sorted(set(study.rows['group'])))}.")
    lines = [f"Continual merging vs lambda scaling ({study.metric}, {group} users; difference to lambda = 1 on "
             f"the same users, {LEVEL:.0%} interval, Holm-corrected p):", "",
             "| domain | strategy | mean [interval] | vs lambda = 1 | p (Holm) |", "|---|---|---|---|---|"]
    order = list(LAMBDA_STRATEGIES) + list(CONTINUAL)
    df = df.assign(_o=df["strategy"].map(lambda s: order.index(s) if s in order else len(order)))
    for r in df.sort_values(["domain", "_o"]).to_dict("records"):
        iv = f"{r['mean']:.4f} [{r['ci_low']:.4f}, {r['ci_high']:.4f}]" if math.isfinite(r["ci_low"]) else f"{r['mean']:.4f}"
        if r["strategy"] == REFERENCE or not math.isfinite(r["diff"]):
            vs, p = "reference" if r["strategy"] == REFERENCE else "-", "-"
        else:
            vs = f"{r['diff']:+.4f} [{r['diff_low']:+.4f}, {r['diff_high']:+.4f}]"
            p = f"{r['p_holm']:.3g}" if math.isfinite(r["p_holm"]) else "-"
        lines.append(f"| {r['domain']} | {r['strategy']} | {iv} | {vs} | {p} |")
    lines += ["", study.verdict_line(), ""]
    return "\n".join(lines)
