"""Each kind of bad input gets a named error that says where and what to do (issue 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_fixtures import HAND_META, HAND_REVIEWS, grid_yaml, write_category, write_jsonl
from mmgrid.config import load_grid
from mmgrid.data.amazon import read_meta, read_reviews
from mmgrid.data.errors import (
    ConfigError, CorruptLineError, EmptyPhaseError, MissingFieldError, MissingRawDataError, TimestampUnitError,
    UnknownDomainError,
)  # fmt: skip
from mmgrid.data.jsonl import SkipLog
from mmgrid.data.pipeline import prepare
from mmgrid.errors import DataError

BAD = {2: '{"rating": 5.0, "user_id": "u9", "parent_', 5: '{"rating": "five", "user_id": "u9"}', 7: "[1, 2]"}


@pytest.mark.parametrize("gz", [False, True])
def test_corrupt_line_strict_names_file_and_line(tmp_path: Path, gz: bool) -> None:
    p = write_jsonl(tmp_path / "r.jsonl", HAND_REVIEWS, gz=gz, raw_lines=BAD)
    with pytest.raises(CorruptLineError, match=r"r\.jsonl(\.gz)?, line 3: corrupt record \(not valid JSON") as ei:
        read_reviews(p, strict=True)
    assert ei.value.line == 3 and "--strict" in str(ei.value)


def test_corrupt_lines_skipped_and_counted(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "r.jsonl", HAND_REVIEWS, raw_lines=BAD)
    skips = SkipLog()
    df = read_reviews(p, skips=skips)
    assert df.height == len(HAND_REVIEWS)
    assert skips.total() == 3
    assert [e["line"] for e in skips.examples] == [3, 6, 8]
    assert "should be a number" in skips.examples[1]["reason"]
    assert "expected a JSON object" in skips.examples[2]["reason"]


def test_corrupt_lines_in_manifest(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_category(root, "Toys", HAND_REVIEWS, HAND_META, raw_lines=BAD)
    ds = prepare(load_grid(grid_yaml(tmp_path, {"root": str(root), "kcore": 1})), log=lambda m: None)
    assert ds.manifest["skipped_lines"]["total"] == 3
    assert ds.manifest["rows"]["Toys"]["interactions"] == 9
    with pytest.raises(CorruptLineError, match="line 3"):
        prepare(load_grid(grid_yaml(tmp_path, {"root": str(root), "kcore": 1})), strict=True, log=lambda m: None)


def test_missing_field_everywhere_and_in_one_line(tmp_path: Path) -> None:
    no_user = [{k: v for k, v in r.items() if k != "user_id"} for r in HAND_REVIEWS]
    with pytest.raises(MissingFieldError, match="every record.*'user_id'"):
        read_reviews(write_jsonl(tmp_path / "a.jsonl", no_user))
    no_ts = [{k: v for k, v in r.items() if k != "timestamp"} for r in HAND_REVIEWS]
    with pytest.raises(MissingFieldError, match="timestamp.*sort_timestamp"):
        read_reviews(write_jsonl(tmp_path / "b.jsonl", no_ts))
    one = list(HAND_REVIEWS)
    one[4] = {k: v for k, v in one[4].items() if k != "parent_asin"}
    p = write_jsonl(tmp_path / "c.jsonl", one)
    with pytest.raises(MissingFieldError, match=r"c\.jsonl, line 5: required field 'parent_asin'"):
        read_reviews(p, strict=True)
    skips = SkipLog()
    assert read_reviews(p, skips=skips).height == len(one) - 1 and skips.total() == 1
    with pytest.raises(MissingFieldError, match="parent_asin"):
        read_meta(write_jsonl(tmp_path / "m.jsonl", [{"title": "x"}]))


def test_seconds_timestamps_detected(tmp_path: Path) -> None:
    recs = list(HAND_REVIEWS)
    recs[3] = dict(recs[3], timestamp=recs[3]["timestamp"] // 1000)
    p = write_jsonl(tmp_path / "r.jsonl", recs)
    with pytest.raises(TimestampUnitError, match=r"r\.jsonl, line 4: timestamp \d+ looks like Unix seconds.*timestamp_unit"):
        read_reviews(p)
    fixed = read_reviews(p, timestamp_unit="auto").get_column("timestamp").to_list()
    assert fixed == [r["timestamp"] for r in HAND_REVIEWS]
    all_s = [dict(r, timestamp=r["timestamp"] // 1000) for r in HAND_REVIEWS]
    got = read_reviews(write_jsonl(tmp_path / "s.jsonl", all_s), timestamp_unit="s").get_column("timestamp").to_list()
    assert got == [r["timestamp"] for r in HAND_REVIEWS]


def test_unknown_category(tmp_path: Path, hand_root: Path) -> None:
    cfg = load_grid(grid_yaml(tmp_path, {"root": str(hand_root), "domains": ["Toyz"]}))
    with pytest.raises(UnknownDomainError, match="'Toyz'.*Did you mean 'Toys'"):
        prepare(cfg, log=lambda m: None)


def test_empty_phase_after_filtering(tmp_path: Path, hand_root: Path) -> None:
    # min_date after the pretrain window: nothing is left in it
    cfg = load_grid(grid_yaml(tmp_path, {"root": str(hand_root), "kcore": 1, "min_date": "2022-09-01"}))
    with pytest.raises(EmptyPhaseError, match="domain 'Toys', phase 'pretrain'.*data.phases"):
        prepare(cfg, log=lambda m: None)


def test_phase_order_and_unknown_key(tmp_path: Path, hand_root: Path) -> None:
    bad = {"root": str(hand_root), "phases": {"a": [None, "2022-07-01"], "b": ["2022-06-01", "2022-09-01"]}}
    with pytest.raises(ConfigError, match="'b' starts before 'a' ends"):
        load_grid(grid_yaml(tmp_path, bad), ["train.stages=[a, b]", "train.epochs={a: 1, b: 1}"])
    with pytest.raises(ConfigError, match="unknown key 'kcor'.*Did you mean 'kcore'"):
        load_grid(grid_yaml(tmp_path, {"root": str(hand_root), "kcor": 3}))
    with pytest.raises(ConfigError, match="data.timestamp_unit"):
        load_grid(grid_yaml(tmp_path, {"root": str(hand_root)}), ["data.timestamp_unit=minutes"])


def test_no_raw_files_hints_world(tmp_path: Path) -> None:
    cfg = load_grid(grid_yaml(tmp_path, {"root": str(tmp_path / "nothing")}, world={"seed": 0}))
    with pytest.raises(MissingRawDataError, match=r"mmgrid world --out .*nothing"):
        prepare(cfg, log=lambda m: None)


def test_missing_meta_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_jsonl(root / "raw" / "review_categories" / "Toys.jsonl", HAND_REVIEWS)
    with pytest.raises(MissingRawDataError, match="meta_Toys.jsonl"):
        prepare(load_grid(grid_yaml(tmp_path, {"root": str(root)})), log=lambda m: None)


def test_all_errors_are_data_or_config_errors() -> None:
    for cls in (CorruptLineError, EmptyPhaseError, MissingFieldError, MissingRawDataError, TimestampUnitError,
                UnknownDomainError):  # fmt: skip
        assert issubclass(cls, DataError)
