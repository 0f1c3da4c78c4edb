"""Field rules of the Amazon 2023 readers, on tiny handmade files."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from mmgrid.data.amazon import item_table, read_benchmark_csv, read_meta, read_reviews
from data_fixtures import meta, ms, review, write_jsonl


@pytest.mark.parametrize("gz", [False, True])
def test_review_fields_are_normalized(tmp_path: Path, gz: bool) -> None:
    recs = [
        review("u1", "A", "2022-01-01", rating=4, helpful_vote=3, images=[{"small_image_url": "x"}]),
        # an older copy: sort_timestamp and helpful_votes
        {k: v for k, v in review("u2", "B", "2022-02-01").items() if k not in ("timestamp", "helpful_vote")}
        | {"sort_timestamp": ms("2022-02-01"), "helpful_votes": 7},
    ]
    df = read_reviews(write_jsonl(tmp_path / "r.jsonl", recs, gz=gz))
    assert df.columns == ["rating", "title", "text", "images", "asin", "parent_asin", "user_id", "timestamp",
                          "helpful_vote", "verified_purchase"]  # fmt: skip
    assert df.schema["rating"] == pl.Float64 and df.schema["timestamp"] == pl.Int64
    assert df.get_column("rating").to_list() == [4.0, 5.0]
    assert df.get_column("timestamp").to_list() == [ms("2022-01-01"), ms("2022-02-01")]
    assert df.get_column("helpful_vote").to_list() == [3, 7]
    assert df.get_column("images").list.len().to_list() == [1, 0]
    assert df.get_column("verified_purchase").to_list() == [True, True]


def test_meta_price_details_and_lists(tmp_path: Path) -> None:
    recs = [
        meta("A", "Alpha", price=12.5, details={"Brand": "X"}),
        meta("B", "Beta", price="None", details=json.dumps({"Brand": "Y"})),
        meta("C", "Gamma", price=None),
        meta("D", "Delta", price="$1,299.00", bought_together=None),
    ]
    df = read_meta(write_jsonl(tmp_path / "m.jsonl", recs))
    assert df.get_column("price").to_list() == [12.5, None, None, 1299.0]
    assert [json.loads(d)["Brand"] for d in df.get_column("details")] == ["X", "Y", "Acme", "Acme"]
    assert df.schema["features"] == pl.List(pl.String) and df.schema["description"] == pl.List(pl.String)
    assert df.get_column("rating_number").to_list() == [3, 3, 3, 3]


def test_item_text_title_first_headers_dropped_truncated() -> None:
    df = pl.DataFrame({
        "parent_asin": ["A", "B", "C", "A"],
        "title": ["  Alpha  ", "", None, "dup"],
        "description": [["Product Description", "Soft and red."], [], [], []],
        "features": [["Light"], [], [], []],
    })  # fmt: skip
    items, drops = item_table(df, ["title", "description", "features"], 200)
    assert items.to_dicts() == [{"parent_asin": "A", "title": "Alpha", "text": "Alpha Soft and red. Light"}]
    assert drops == {"duplicate_item": 1, "no_title": 2}
    short, _ = item_table(df, ["title", "description"], 8)
    assert short.get_column("text").to_list() == ["Alpha So"]
    only_title, _ = item_table(df, ["title"], 200)
    assert only_title.get_column("text").to_list() == ["Alpha"]


def test_benchmark_csv(tmp_path: Path) -> None:
    p = tmp_path / "Toys.train.csv"
    p.write_text(f"user_id,parent_asin,rating,timestamp,history\nu1,A,5.0,{ms('2022-01-01')},\nu1,B,3,{ms('2022-02-01')},A\n")
    df = read_benchmark_csv(p)
    assert df.to_dicts() == [
        {"user_id": "u1", "parent_asin": "A", "rating": 5.0, "timestamp": ms("2022-01-01")},
        {"user_id": "u1", "parent_asin": "B", "rating": 3.0, "timestamp": ms("2022-02-01")},
    ]
