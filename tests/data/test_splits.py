"""Dedupe, k-core, phases and examples, against hand-computed cases and invariants."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrid.data.splits import build_examples, dedupe, in_windows, kcore, phase_expr

WINDOWS = {"pre": (None, 100), "p1": (100, 200), "p2": (200, 300), "test": (300, 400)}


def _frame(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"user_id": pl.String, "parent_asin": pl.String, "timestamp": pl.Int64}, orient="row")


def test_dedupe_keeps_earliest() -> None:
    df = dedupe(_frame([("u", "a", 5), ("u", "a", 3), ("u", "b", 9), ("v", "a", 1)]))
    assert sorted(df.rows()) == [("u", "a", 3), ("u", "b", 9), ("v", "a", 1)]


def test_kcore_cascades() -> None:
    # k=2: user z has one interaction -> dropped; then item c has one -> dropped; then user y
    # has one left -> dropped; x and w with items a, b remain (each twice).
    rows = [("x", "a", 1), ("x", "b", 2), ("w", "a", 3), ("w", "b", 4), ("y", "c", 5), ("y", "a", 6), ("z", "c", 7)]
    out, rounds = kcore(_frame(rows), 2)
    assert sorted(out.rows()) == [("w", "a", 3), ("w", "b", 4), ("x", "a", 1), ("x", "b", 2)]
    assert rounds >= 2
    assert (out.group_by("user_id").len().get_column("len") >= 2).all()
    assert (out.group_by("parent_asin").len().get_column("len") >= 2).all()


def test_kcore_one_is_identity() -> None:
    df = _frame([("x", "a", 1)])
    assert kcore(df, 1)[0].rows() == df.rows()


def test_phases_are_half_open() -> None:
    df = pl.DataFrame({"timestamp": [-5, 99, 100, 199, 200, 300, 399, 400]})
    got = df.with_columns(phase_expr(WINDOWS)).get_column("phase").to_list()
    assert got == ["pre", "pre", "p1", "p1", "p2", "test", "test", None]
    assert df.filter(in_windows(WINDOWS, min_ms=100)).get_column("timestamp").to_list() == [100, 199, 200, 300, 399]


def test_examples_hand_computed() -> None:
    inter = pl.DataFrame({
        "user_idx": [0, 0, 0, 0, 1, 1],
        "item_idx": [5, 3, 4, 6, 1, 2],
        "timestamp": [10, 150, 150, 250, 320, 330],
        "phase": ["pre", "p1", "p1", "p2", "test", "test"],
    }, schema_overrides={"user_idx": pl.Int32, "item_idx": pl.Int32})  # fmt: skip
    ex = build_examples(inter, max_history=2)
    assert ex.select("phase", "user_idx", "target", "history").rows() == [
        ("p1", 0, 3, [5]),  # 3 and 4 share a timestamp: neither is the other's history
        ("p1", 0, 4, [5]),
        ("p2", 0, 6, [3, 4]),  # most recent two, oldest first
        ("test", 1, 2, [1]),
    ]
    assert build_examples(inter, max_history=20, min_history=0).height == 6


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 9), st.integers(0, 399)), min_size=1, max_size=60),
       st.integers(1, 5))  # fmt: skip
def test_no_leakage(rows: list[tuple[int, int, int]], h: int) -> None:
    """Every history item was interacted with strictly before the target, by the same user, and
    no history item comes from a later phase than the target's."""
    inter = pl.DataFrame(rows, schema={"user_idx": pl.Int32, "item_idx": pl.Int32, "timestamp": pl.Int64}, orient="row")
    inter = inter.unique(["user_idx", "item_idx"]).with_columns(phase_expr(WINDOWS))
    ex = build_examples(inter, max_history=h)
    when = {(u, i): t for u, i, t in inter.select("user_idx", "item_idx", "timestamp").rows()}
    order = list(WINDOWS)
    phase_of = {(u, i): p for u, i, p in inter.select("user_idx", "item_idx", "phase").rows()}
    for phase, u, target, hist, ts in ex.rows():
        assert len(hist) <= h
        earlier = sorted((t, i) for (uu, i), t in when.items() if uu == u and t < ts)
        assert [i for _, i in earlier][-h:] == hist
        for i in hist:
            assert when[(u, i)] < ts
            assert order.index(phase_of[(u, i)]) <= order.index(phase)
    # every interaction with an earlier one is an example
    n_expected = sum(1 for (u, i), t in when.items() if any(uu == u and tt < t for (uu, _), tt in when.items()))
    assert ex.height == n_expected
