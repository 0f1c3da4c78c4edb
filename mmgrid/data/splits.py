"""Dedupe, k-core, global time phases and next-item examples (vectorised polars, no per-row Python).

The phases are global, half-open UTC windows ``[start, end)`` listed in time order (MMGRid section
3.2: pretrain before 2022-07-01, P1 and P2 the next two quarters, test January to March 2023; the
split is strictly by timestamp, after Ji et al. [16] on leakage). An example's target lies in one
phase and its history holds only *strictly earlier* interactions of the same user, so nothing from
a later window can reach an earlier window's histories or targets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

Windows = dict[str, tuple[int | None, int | None]]


def dedupe(df: pl.DataFrame, user: str = "user_id", item: str = "parent_asin") -> pl.DataFrame:
    """Keep one row per (user, item): the earliest timestamp (streaming group-by)."""
    return df.lazy().group_by(user, item).agg(pl.col("timestamp").min()).collect(engine="streaming")


def in_windows(windows: Windows, min_ms: int | None = None) -> pl.Expr:
    """True for timestamps inside some phase window (and not before ``min_ms``)."""
    ts = pl.col("timestamp")
    cond = pl.lit(False)
    for start, end in windows.values():
        c = pl.lit(True)
        if start is not None:
            c = c & (ts >= start)
        if end is not None:
            c = c & (ts < end)
        cond = cond | c
    if min_ms is not None:
        cond = cond & (ts >= min_ms)
    return cond


def kcore(df: pl.DataFrame, k: int, user: str = "user_id", item: str = "parent_asin") -> tuple[pl.DataFrame, int]:
    """Iterative k-core: drop users and items with fewer than ``k`` interactions until none is left.

    Dropping every node below ``k`` in the current graph never removes a node of the k-core, so
    filtering users and items in the same round converges to the same (unique) k-core.

    Returns:
        (the k-core, number of rounds).
    """
    rounds = 0
    if k <= 1:
        return df, rounds
    while True:
        rounds += 1
        keep = (pl.len().over(user) >= k) & (pl.len().over(item) >= k)
        out = df.filter(keep)
        if out.height == df.height:
            return out, rounds
        df = out


def phase_expr(windows: Windows) -> pl.Expr:
    """The phase name of each timestamp (null outside every window)."""
    ts = pl.col("timestamp")
    expr: Any = None  # a polars when/then chain, made an Expr by the closing otherwise()
    for name, (start, end) in windows.items():
        c = pl.lit(True)
        if start is not None:
            c = c & (ts >= start)
        if end is not None:
            c = c & (ts < end)
        expr = pl.when(c).then(pl.lit(name)) if expr is None else expr.when(c).then(pl.lit(name))
    assert expr is not None
    return expr.otherwise(pl.lit(None, pl.String)).alias("phase")


def index_ids(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Give users and items dense int32 indices in sorted id order (deterministic).

    Returns:
        (interactions with ``user_idx``/``item_idx``, user map, item map).
    """
    users = df.select(pl.col("user_id").unique().sort()).with_row_index("user_idx")
    items = df.select(pl.col("parent_asin").unique().sort()).with_row_index("item_idx")
    users = users.with_columns(pl.col("user_idx").cast(pl.Int32))
    items = items.with_columns(pl.col("item_idx").cast(pl.Int32))
    out = df.join(users, on="user_id").join(items, on="parent_asin")
    return out, users, items


def build_examples(inter: pl.DataFrame, max_history: int, min_history: int = 1) -> pl.DataFrame:
    """One example per interaction: the target and the user's strictly earlier items.

    Rows are ordered by (user, timestamp, item). Row r's history is the slice ``[a_r, f_r)`` of the
    item column, where ``f_r`` is the first row of r's run of equal (user, timestamp), so an item
    bought at the same millisecond is never "history", and ``a_r = max(user start, f_r - max_history)``.
    The slices are gathered at once with numpy offsets (no per-row Python).

    Args:
        inter: ``user_idx``, ``item_idx``, ``timestamp``, ``phase``.
        max_history: keep at most this many (most recent) earlier items.
        min_history: drop targets with fewer earlier items.

    Returns:
        ``phase``, ``user_idx``, ``target``, ``history`` (list[int32], oldest first), ``timestamp``.
    """
    s = inter.select("user_idx", "item_idx", "timestamp", "phase").sort("user_idx", "timestamp", "item_idx")
    hist = history_lists(
        s.get_column("user_idx").to_numpy(), s.get_column("timestamp").to_numpy(), s.get_column("item_idx").to_numpy(),
        max_history,
    )  # fmt: skip
    out = s.with_columns(hist.alias("history")).filter(pl.col("history").list.len() >= min_history)
    return out.select("phase", "user_idx", pl.col("item_idx").alias("target"), "history", "timestamp")


def history_lists(user: np.ndarray, ts: np.ndarray, item: np.ndarray, max_history: int) -> pl.Series:
    """Histories of rows sorted by (user, timestamp): list[int32] of strictly earlier items, oldest first."""
    n = user.size
    if n == 0:
        return pl.Series("history", [], dtype=pl.List(pl.Int32))
    pos = np.arange(n, dtype=np.int64)
    new_user = np.ones(n, dtype=bool)
    new_user[1:] = user[1:] != user[:-1]
    new_run = new_user.copy()
    new_run[1:] |= ts[1:] != ts[:-1]
    start = np.maximum.accumulate(np.where(new_user, pos, 0))
    end = np.maximum.accumulate(np.where(new_run, pos, 0))  # first row of the run of equal timestamps
    begin = np.maximum(start, end - max_history)
    length = end - begin
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    idx = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - begin, length)
    values = pa.array(item.astype(np.int32)[idx], type=pa.int32())
    arr = pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), values)
    return pl.Series("history", arr).cast(pl.List(pl.Int32))
