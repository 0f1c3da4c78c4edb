"""End to end on the hand-computed case: contract files, statistics by hand, cache, atomicity."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from data_fixtures import ms
from mmgrid.data.dataset import load_prepared
from mmgrid.data.groups import active_users, user_groups
from mmgrid.data.pipeline import prepare
from mmgrid.data.stats import format_stats

A, B, C, D = 0, 1, 2, 3  # item_idx: sorted parent_asin
U1, U2, U3 = 0, 1, 2


def test_contract_files_and_columns(hand_cfg, tmp_path: Path) -> None:
    ds = prepare(hand_cfg, log=lambda m: None)
    root = Path(hand_cfg.prepared)
    for f in ("manifest.json", "stats.parquet", "lm_text.parquet", "Toys/items.parquet",
              "Toys/interactions.parquet", "Toys/examples.parquet"):  # fmt: skip
        assert (root / f).exists(), f
    d = ds.domain("Toys")
    assert d.items.schema == pl.Schema({"item_idx": pl.Int32, "parent_asin": pl.String, "title": pl.String,
                                        "text": pl.String, "first_seen_ms": pl.Int64})  # fmt: skip
    assert d.interactions.schema == pl.Schema({"user_idx": pl.Int32, "user_id": pl.String, "item_idx": pl.Int32,
                                               "timestamp": pl.Int64, "phase": pl.String})  # fmt: skip
    ex = d.examples("test")
    assert ex.columns == ["phase", "user_idx", "target", "history", "timestamp"]
    assert ex.schema["history"] == pl.List(pl.Int32)
    assert d.item_titles == ["Alpha toy", "Beta toy", "Gamma toy", "Delta toy"]
    assert d.item_texts[0] == "Alpha toy About A. feature of A"
    assert d.items.get_column("first_seen_ms").to_list() == [ms("2022-01-01"), ms("2022-03-01"), ms("2022-11-01"), ms("2022-02-01")]
    assert ds.phases["p1"] == (ms("2022-07-01"), ms("2022-10-01")) and ds.phases["pretrain"][0] is None
    assert len(ds.fingerprint) == 16


def test_examples_by_hand(hand_cfg) -> None:
    d = prepare(hand_cfg, log=lambda m: None).domain("Toys")
    rows = lambda p: sorted(d.examples(p).select("user_idx", "target", "history").rows())  # noqa: E731
    assert rows("pretrain") == [(U1, D, [A])]
    assert rows("p1") == [(U1, B, [A, D])]
    assert rows("p2") == [(U1, C, [A, D, B]), (U3, C, [A])]
    assert rows("test") == [(U2, C, [B]), (U3, B, [A, C])]


def test_groups_and_popularity_by_hand(hand_cfg) -> None:
    ds = prepare(hand_cfg, log=lambda m: None)
    d = ds.domain("Toys")
    assert d.active_users("p2") == {U1, U3}
    assert d.active_users("test") == {U2, U3}
    assert d.popularity("pretrain").tolist() == [2, 1, 0, 1]
    assert d.popularity(["pretrain", "p1", "p2"]).tolist() == [2, 2, 2, 1]
    assert isinstance(d.popularity("test"), np.ndarray)
    g = user_groups([U2, U3], d.interactions, *ds.phases["p2"])
    assert g.rows() == [(U2, "non_active"), (U3, "active")]
    assert active_users(d.interactions, ms("2022-01-01"), ms("2022-01-02")).to_list() == [U1]


def test_statistics_by_hand(hand_cfg) -> None:
    s = prepare(hand_cfg, log=lambda m: None).stats().row(0, named=True)
    assert (s["users"], s["items"], s["interactions"]) == (3, 4, 9)
    assert (s["n_pretrain"], s["n_p1"], s["n_p2"], s["n_test"]) == (4, 1, 2, 2)
    assert s["test_users"] == 2 and s["p_active"] == pytest.approx(0.5)  # u3 of {u2, u3} active in p2
    # training gaps in days: u1A 0, u1D 0, u2B 0, u3A 120, u1B 153, u1C 0, u3C 30
    assert s["avg_gap_days"] == pytest.approx((120 + 153 + 30) / 7)
    assert (s["new_share_pretrain"], s["new_share_p1"], s["new_share_p2"], s["new_share_test"]) == (1.0, 0.0, 1.0, 0.0)


def test_manifest_drops_and_lm_text(hand_cfg) -> None:
    ds = prepare(hand_cfg, log=lambda m: None)
    m = ds.manifest
    dr = m["dropped"]["Toys"]
    assert dr["no_title"] == 1 and dr["item_without_titled_meta"] == 2  # E untitled, F no meta
    assert dr["duplicate_user_item"] == 1 and dr["short_history_targets"]["pretrain"] == 3
    assert m["rows"]["Toys"]["examples_by_phase"] == {"pretrain": 1, "p1": 1, "p2": 2, "test": 2}
    assert all(len(v["sha256"]) == 64 for v in m["inputs"].values())
    train, held = ds.lm_text("train"), ds.lm_text("heldout")
    assert len(train) + len(held) == 6 and len(held) == 1  # lm_text_docs=6, 10% held out
    assert not set(train) & set(held)
    assert all(". " in t for t in train)  # review title + text


def test_cache_and_atomic_swap(hand_cfg, tmp_path: Path) -> None:
    msgs: list[str] = []
    prepare(hand_cfg, log=msgs.append)
    stats = Path(hand_cfg.prepared) / "stats.parquet"
    before = stats.stat().st_mtime_ns
    ds = prepare(hand_cfg, log=msgs.append)
    assert "up to date" in msgs[-1] and stats.stat().st_mtime_ns == before
    fp = ds.fingerprint
    # a changed config recomputes; the folder is replaced whole and nothing temporary is left
    hand_cfg.data.max_history = 1
    ds2 = prepare(hand_cfg, log=msgs.append)
    assert "up to date" not in msgs[-1] and ds2.fingerprint != fp
    assert sorted(ds2.domain("Toys").examples("p2").get_column("history").to_list()) == [[A], [B]]
    assert [p.name for p in Path(hand_cfg.prepared).parent.iterdir() if p.name.startswith(".")] == []
    # a changed input file recomputes too
    raw = next(Path(hand_cfg.data.root).rglob("Toys.jsonl.gz"))
    os.utime(raw, ns=(1, 1))
    msgs.clear()
    prepare(hand_cfg, log=msgs.append)
    assert "up to date" in msgs[-1]  # same bytes, new mtime: re-hashed, still the same input


def test_load_prepared_refuses_half_dataset(tmp_path: Path) -> None:
    from mmgrid.data.errors import PreparedDataError

    (tmp_path / "half").mkdir()
    with pytest.raises(PreparedDataError, match="no manifest.json"):
        load_prepared(tmp_path / "half")


def test_format_stats(hand_cfg) -> None:
    text = format_stats(prepare(hand_cfg, log=lambda m: None).stats())
    assert text.splitlines()[0].startswith("domain") and "Toys" in text and "0.500" in text


def test_failed_prepare_keeps_previous_dataset(hand_cfg) -> None:
    from mmgrid.data.errors import EmptyPhaseError

    first = prepare(hand_cfg, log=lambda m: None)
    hand_cfg.data.min_date = "2022-09-01"  # empties the pretrain phase: this run fails half way
    with pytest.raises(EmptyPhaseError):
        prepare(hand_cfg, log=lambda m: None)
    again = load_prepared(hand_cfg.prepared)
    assert again.fingerprint == first.fingerprint and again.domain("Toys").interactions.height == 9
    assert [p.name for p in Path(hand_cfg.prepared).parent.iterdir() if p.name.startswith(".")] == []
