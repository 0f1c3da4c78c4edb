"""Domain statistics: one row a domain (MMGRid Tables 1 and 4).

Columns: ``domain``, ``users``, ``items``, ``interactions``, ``n_<phase>`` per phase,
``test_users`` (users with a test example), ``p_active`` (share of them active in the phase
before the test phase, MMGRid Eq. 11's p_active), ``avg_gap_days`` (mean over training
interactions of the days since the item's first interaction in the data: Table 4's
"Ave. Interaction Time Gap"), and ``new_share_<phase>`` (share of that phase's interactions whose
item is first seen in that phase). :func:`period_stats` measures the same statistics on the phases up to
one period only (the rolling study's lambda_hat* regressors, known when that period ends).
"""

from __future__ import annotations

from typing import cast

import polars as pl

from mmgrid.data.groups import active_users, in_window

MS_PER_DAY = 86_400_000


def domain_stats(
    name: str,
    inter: pl.DataFrame,
    items: pl.DataFrame,
    examples: pl.DataFrame,
    windows: dict[str, tuple[int | None, int | None]],
) -> dict[str, object]:
    """Statistics of one prepared domain.

    Args:
        name: domain name.
        inter: ``user_idx``, ``item_idx``, ``timestamp``, ``phase``.
        items: ``item_idx``, ``first_seen_ms``.
        examples: ``phase``, ``user_idx`` (targets of every phase).
        windows: phase name → [start_ms, end_ms), in time order; the last is the test phase and
            the one before it the "recent" phase used for p_active.

    Returns:
        A row for :func:`stats_frame`.
    """
    names = list(windows)
    test, recent = names[-1], names[-2] if len(names) > 1 else None
    row: dict[str, object] = {
        "domain": name,
        "users": inter.get_column("user_idx").n_unique(),
        "items": items.height,
        "interactions": inter.height,
    }
    counts = dict(inter.group_by("phase").len().iter_rows())
    for p in names:
        row[f"n_{p}"] = int(counts.get(p, 0))
    test_users = examples.filter(pl.col("phase") == test).get_column("user_idx").unique()
    row["test_users"] = test_users.len()
    if recent is not None and test_users.len():
        act = active_users(inter, *windows[recent])
        row["p_active"] = float(cast(float, test_users.is_in(act.implode()).mean()))  # a boolean column's mean
    else:
        row["p_active"] = float("nan")
    joined = inter.join(items.select("item_idx", "first_seen_ms"), on="item_idx")
    train = joined.filter(pl.col("phase") != test)
    gap = ((pl.col("timestamp") - pl.col("first_seen_ms")) / MS_PER_DAY).mean()
    row["avg_gap_days"] = float(train.select(gap).item()) if train.height else float("nan")
    for p in names:
        start, end = windows[p]
        sub = joined.filter(pl.col("phase") == p)
        new = in_window("first_seen_ms", start, end)
        row[f"new_share_{p}"] = float(sub.select(new.mean()).item()) if sub.height else float("nan")
    return row


PERIOD_STATS = ("avg_gap_days", "new_share", "p_active")


def period_stats(inter: pl.DataFrame, items: pl.DataFrame, examples: pl.DataFrame,
                 windows: dict[str, tuple[int | None, int | None]], phases: list[str]) -> dict[str, float]:
    """The statistics of one domain known when the last of ``phases`` ends (:data:`PERIOD_STATS`); rows of any
    other phase are never read.

    Args:
        inter: ``user_idx``, ``item_idx``, ``timestamp``, ``phase``.
        items: ``item_idx``, ``first_seen_ms`` (an item's first interaction: at or before any of its rows).
        examples: ``phase``, ``user_idx``.
        windows: phase name -> [start_ms, end_ms).
        phases: the phases read, in time order (the last one is "the period").

    Returns:
        ``avg_gap_days``: mean days from an item's first interaction to each interaction of ``phases``;
        ``new_share``: share of the last phase's interactions whose item is first seen in it;
        ``p_active``: share of the last phase's example users with an interaction in the phase before it
        (MMGRid Eq. 11's p_active for that window; NaN with one phase or no example user).
    """
    last = phases[-1]
    joined = inter.filter(pl.col("phase").is_in(phases)).join(items.select("item_idx", "first_seen_ms"), on="item_idx")
    gap = ((pl.col("timestamp") - pl.col("first_seen_ms")) / MS_PER_DAY).mean()
    row = {"avg_gap_days": float(joined.select(gap).item()) if joined.height else float("nan")}
    sub = joined.filter(pl.col("phase") == last)
    row["new_share"] = (float(sub.select(in_window("first_seen_ms", *windows[last]).mean()).item())
                        if sub.height else float("nan"))
    users = examples.filter(pl.col("phase") == last).get_column("user_idx").unique()
    row["p_active"] = float("nan")
    if len(phases) > 1 and users.len():
        act = active_users(inter.filter(pl.col("phase") == phases[-2]), *windows[phases[-2]])
        share = users.is_in(act.implode()).mean()
        row["p_active"] = float(share) if isinstance(share, (int, float)) else float("nan")
    return row


def stats_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    """Rows of :func:`domain_stats` → a frame (one row a domain)."""
    return pl.DataFrame(rows)


def format_stats(df: pl.DataFrame) -> str:
    """The statistics table as aligned plain text (for the terminal)."""
    if df.height == 0:
        return "(no domains)"
    cols = df.columns
    cells = [[_fmt(v) for v in r] for r in df.iter_rows()]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    out = [_line(cols, widths), _line(["-" * w for w in widths], widths)]
    out += [_line(r, widths) for r in cells]
    return "\n".join(out)


def _line(vals: list[str], widths: list[int]) -> str:
    """First column left-aligned (the domain), numbers right-aligned."""
    return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths)))


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return "nan" if v != v else (f"{v:.1f}" if abs(v) >= 10 else f"{v:.3f}")
    return str(v)
