"""Active and non-active users of an interval (MMGRid section 4.2, Table 4).

A user is *active* in ``[t1, t2)`` when they have at least one interaction in it, and
*non-active* otherwise; the paper uses the P2 window to split the test users.
"""

from __future__ import annotations

import polars as pl


def in_window(col: str, start_ms: int | None, end_ms: int | None) -> pl.Expr:
    """``col`` lies in the half-open ``[start_ms, end_ms)`` (None = open end)."""
    c = pl.col(col)
    cond = pl.lit(True)
    if start_ms is not None:
        cond = cond & (c >= start_ms)
    if end_ms is not None:
        cond = cond & (c < end_ms)
    return cond


def active_users(inter: pl.DataFrame, start_ms: int | None, end_ms: int | None, user: str = "user_idx") -> pl.Series:
    """Distinct users with at least one interaction in the half-open ``[start_ms, end_ms)``."""
    return inter.filter(in_window("timestamp", start_ms, end_ms)).get_column(user).unique().sort()


def user_groups(
    users: pl.Series | list[int], inter: pl.DataFrame, start_ms: int | None, end_ms: int | None, user: str = "user_idx"
) -> pl.DataFrame:
    """Label each of ``users`` ``active`` or ``non_active`` for the interval ``[start_ms, end_ms)``.

    Returns:
        ``user_idx`` (as given), ``group``.
    """
    users = pl.Series(user, users) if not isinstance(users, pl.Series) else users.alias(user)
    act = active_users(inter, start_ms, end_ms, user)
    frame = pl.DataFrame({user: users.unique().sort()})
    return frame.with_columns(
        pl.when(pl.col(user).is_in(act.implode())).then(pl.lit("active")).otherwise(pl.lit("non_active")).alias("group")
    )
