"""Each kind of bad input gets a named error that says where and what to do."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any, Callable

import pytest

from data_fixtures import HAND_META, HAND_REVIEWS, grid_yaml, write_category, write_jsonl
from mmgrid.config import load_grid
from mmgrid.data.amazon import read_meta, read_reviews
from mmgrid.data.errors import (
    ConfigError, CorruptLineError, EmptyFileError, EmptyPhaseError, MissingFieldError, MissingRawDataError,
    NegativeTimestampError, NoUsableRecordsError, TimestampUnitError, UnknownDomainError, UnreadableFileError,
)  # fmt: skip
from mmgrid.data.jsonl import SkipLog, gzip_break
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
                UnknownDomainError, EmptyFileError, NegativeTimestampError, NoUsableRecordsError,
                UnreadableFileError):  # fmt: skip
        assert issubclass(cls, DataError)


# --------------------------------------------------------------------------- bad files
#
# One case per bad raw file. Each builds a complete source under ROOT with one file broken and
# runs `prepare`; the error must be the named one, its message must name the file (and the line
# where there is one), say what is wrong and how to fix it, and nothing may be written next to
# the grid (no prepared folder, no temporary or scratch folder left behind).


def _lines(recs: list[dict]) -> bytes:
    return ("\n".join(json.dumps(r) for r in recs) + "\n").encode()


def _gz_cut_after(recs: list[dict], n: int, rest: bytes | None) -> bytes:
    """A gzip stream of ``recs`` whose first ``n`` lines are complete and flushed; then either the
    stream stops mid-way (``rest`` None: truncated) or ``rest`` replaces the remainder (corrupt)."""
    head, tail = _lines(recs[:n]), _lines(recs[n:])
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    blob = z.compress(head) + z.flush(zlib.Z_FULL_FLUSH)
    more = z.compress(tail) + z.flush()
    return blob + (more[: len(more) // 2] if rest is None else rest)


def _amazon(reviews: bytes | None = None, meta: bytes | None = None, gz_reviews: bool = False,
            gz_meta: bool = False) -> Callable[[Path], None]:  # fmt: skip
    def build(root: Path) -> None:
        rdir, mdir = root / "raw" / "review_categories", root / "raw" / "meta_categories"
        rdir.mkdir(parents=True), mdir.mkdir(parents=True)
        (rdir / ("Toys.jsonl" + (".gz" if gz_reviews else ""))).write_bytes(
            reviews if reviews is not None else _lines(HAND_REVIEWS))
        (mdir / ("meta_Toys.jsonl" + (".gz" if gz_meta else ""))).write_bytes(
            meta if meta is not None else _lines(HAND_META))  # fmt: skip
    return build


def _csv(text: str) -> Callable[[Path], None]:
    def build(root: Path) -> None:
        _amazon()(root)
        (root / "Toys.train.csv").write_text(text)
    return build


def _recbole(inter: str) -> Callable[[Path], None]:
    def build(root: Path) -> None:
        (root / "toys").mkdir(parents=True)
        (root / "toys" / "toys.inter").write_text(inter)
        (root / "toys" / "toys.item").write_text("item_id:token\tname:token_seq\n" + "".join(
            f"{m['parent_asin']}\t{m['title']}\n" for m in HAND_META if m["title"].strip()))  # fmt: skip
    return build


def _with_ts(fn: Callable[[int, int], Any]) -> bytes:
    """The hand reviews with ``timestamp`` replaced by ``fn(row, timestamp)``."""
    return _lines([dict(r, timestamp=fn(i, r["timestamp"])) for i, r in enumerate(HAND_REVIEWS)])


CSV_HEAD = "user_id,parent_asin,rating,timestamp,history\n"
CSV_ROWS = [f"{r['user_id']},{r['parent_asin']},5.0,{r['timestamp']}," for r in HAND_REVIEWS]
INTER_HEAD = "user_id:token\titem_id:token\ttimestamp:float\n"
INTER_ROWS = [f"{r['user_id']}\t{r['parent_asin']}\t{r['timestamp'] // 1000}" for r in HAND_REVIEWS]
REV, META = "review_categories/Toys.jsonl", "meta_categories/meta_Toys.jsonl"
N = len(HAND_REVIEWS)

# id: (source, builder, data overrides, error, file (suffix of the path), line or None, what, how to fix)
BAD_FILES: dict[str, tuple] = {
    "empty review file": ("amazon2023", _amazon(reviews=b""), {}, EmptyFileError, REV, None,
                          r"empty \(0 bytes\)", "download the file again"),
    "blank lines only": ("amazon2023", _amazon(reviews=b"\n \n\n"), {}, EmptyFileError, REV, None,
                         "only blank lines", "download the file again"),
    "empty gzip": ("amazon2023", _amazon(reviews=gzip.compress(b""), gz_reviews=True), {}, EmptyFileError,
                   REV + ".gz", None, "gzip stream holds no data", "download the file again"),
    "zero-byte .gz": ("amazon2023", _amazon(reviews=b"", gz_reviews=True), {}, EmptyFileError, REV + ".gz", None,
                      r"empty \(0 bytes\)", "download the file again"),
    "truncated .gz": ("amazon2023", _amazon(reviews=_gz_cut_after(HAND_REVIEWS, 5, None), gz_reviews=True), {},
                      UnreadableFileError, REV + ".gz", 6, "gzip stream is truncated", "Download the file again"),
    "corrupt .gz": ("amazon2023", _amazon(reviews=_gz_cut_after(HAND_REVIEWS, 7, b"\xff" * 64), gz_reviews=True),
                    {}, UnreadableFileError, REV + ".gz", 8, "gzip stream is corrupt", "Download the file again"),
    "gzip checksum": ("amazon2023", _amazon(reviews=gzip.compress(_lines(HAND_REVIEWS))[:-8] + b"\0" * 8,
                                            gz_reviews=True),
                      {}, UnreadableFileError, REV + ".gz", N + 1, "gzip stream is corrupt", "Download the file again"),
    "truncated meta .gz": ("amazon2023", _amazon(meta=_gz_cut_after(HAND_META, 2, None), gz_meta=True), {},
                           UnreadableFileError, META + ".gz", 3, "gzip stream is truncated", "Download the file again"),
    "empty meta file": ("amazon2023", _amazon(meta=b""), {}, EmptyFileError, META, None, r"empty \(0 bytes\)",
                        "download the file again"),
    "JSON arrays as lines": ("amazon2023", _amazon(reviews=_lines([list(r.values()) for r in HAND_REVIEWS])), {},
                             NoUsableRecordsError, REV, 1, "got a JSON array", "one JSON object"),
    "JSON arrays as meta lines": ("amazon2023", _amazon(meta=_lines([list(m.values()) for m in HAND_META])), {},
                                  NoUsableRecordsError, META, 1, "got a JSON array", "one JSON object"),
    "bare JSON values as lines": ("amazon2023", _amazon(reviews=b'"u1 A 2022"\n42\nnull\n'), {},
                                  NoUsableRecordsError, REV, 1, "got a JSON string", "one JSON object"),
    "timestamps as digit strings": ("amazon2023", _amazon(reviews=_with_ts(lambda i, t: str(t))), {},
                                    NoUsableRecordsError, REV, 1, "'timestamp' should be a number", "not text"),
    "timestamps as dates": ("amazon2023", _amazon(reviews=_with_ts(lambda i, t: "2022-07-01")), {},
                            NoUsableRecordsError, REV, 1, "'timestamp' should be a number", "not text"),
    "microsecond timestamps": ("amazon2023", _amazon(reviews=_with_ts(lambda i, t: t * 1000)), {},
                               TimestampUnitError, REV, 1, "looks like Unix microseconds", "Divide"),
    "one microsecond timestamp": ("amazon2023", _amazon(reviews=_with_ts(lambda i, t: t * 1000 if i == 6 else t)),
                                  {}, TimestampUnitError, REV, 7, "looks like Unix microseconds", "Divide"),
    "negative timestamps": ("amazon2023", _amazon(reviews=_with_ts(lambda i, t: -t)), {}, NegativeTimestampError,
                            REV, 1, "is negative", "Fix or delete that line"),
    "one negative timestamp": ("amazon2023", _amazon(reviews=_with_ts(lambda i, t: -t if i == 3 else t)), {},
                               NegativeTimestampError, REV, 4, "is negative", "Fix or delete that line"),
    "negative timestamp, unit auto": ("amazon2023", _amazon(reviews=_with_ts(lambda i, t: -t if i == 3 else t)),
                                      {"timestamp_unit": "auto"}, NegativeTimestampError, REV, 4, "is negative",
                                      "Fix or delete that line"),
    "one seconds timestamp": ("amazon2023", _amazon(reviews=_with_ts(lambda i, t: t // 1000 if i == 3 else t)), {},
                              TimestampUnitError, REV, 4, "looks like Unix seconds", "timestamp_unit=auto"),
    "milliseconds under unit s": ("amazon2023", _amazon(), {"timestamp_unit": "s"}, TimestampUnitError, REV, 1,
                                  "looks like Unix milliseconds.*asks for seconds", "timestamp_unit=ms"),
    "empty CSV": ("benchmark_csv", _csv(""), {}, EmptyFileError, "Toys.train.csv", None, "empty", "download"),
    "CSV header only": ("benchmark_csv", _csv(CSV_HEAD), {}, EmptyFileError, "Toys.train.csv", None,
                        "header but no rows", "download"),
    "CSV timestamps as dates": ("benchmark_csv", _csv(CSV_HEAD + "".join(
        f"{r['user_id']},{r['parent_asin']},5.0,2022-07-01,\n" for r in HAND_REVIEWS)), {}, NoUsableRecordsError,
        "Toys.train.csv", 2, "not a number", "timestamp"),  # fmt: skip
    "CSV negative timestamp": ("benchmark_csv", _csv(CSV_HEAD + "\n".join(
        row.replace(",5.0,", ",5.0,-") if i == 2 else row for i, row in enumerate(CSV_ROWS)) + "\n"), {},
        NegativeTimestampError, "Toys.train.csv", 4, "is negative", "Fix or delete that line"),  # fmt: skip
    "CSV microsecond timestamps": ("benchmark_csv", _csv(CSV_HEAD + "".join(
        f"{r['user_id']},{r['parent_asin']},5.0,{r['timestamp'] * 1000},\n" for r in HAND_REVIEWS)), {},
        TimestampUnitError, "Toys.train.csv", 2, "looks like Unix microseconds", "Divide"),  # fmt: skip
    "RecBole empty .inter": ("recbole", _recbole(""), {}, EmptyFileError, "toys.inter", None, "empty", "download"),
    "RecBole millisecond timestamps": ("recbole", _recbole(INTER_HEAD + "".join(
        f"{r['user_id']}\t{r['parent_asin']}\t{r['timestamp']}\n" for r in HAND_REVIEWS)), {},
        TimestampUnitError, "toys.inter", 2, "looks like Unix milliseconds", "RecBole atomic files hold Unix seconds"),
    "RecBole negative timestamp": ("recbole", _recbole(INTER_HEAD + "\n".join(
        row.replace("\t1", "\t-1") if i == 4 else row for i, row in enumerate(INTER_ROWS)) + "\n"), {},
        NegativeTimestampError, "toys.inter", 6, "is negative", "Fix or delete that line"),  # fmt: skip
}


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_bad_file_is_named_before_anything_is_written(tmp_path: Path, case: str) -> None:
    source, build, extra, error, file, line, what, fix = BAD_FILES[case]
    root = tmp_path / "root"
    build(root)
    cfg = load_grid(grid_yaml(tmp_path, {"source": source, "root": str(root), "kcore": 1, **extra}))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(error) as ei:
        prepare(cfg, log=lambda m: None)
    msg = str(ei.value)
    where = re.escape(str(root / "raw" / file) if source == "amazon2023" else file)
    assert re.search(where + (f", line {line}:" if line is not None else ":"), msg), msg
    if line is None:
        assert ", line " not in msg.split(":")[0], msg
    assert re.search(what, msg) and re.search(fix, msg, re.I), msg
    assert isinstance(ei.value, DataError) and getattr(ei.value, "line", None) == line
    assert sorted(p.name for p in tmp_path.iterdir()) == before == ["root", "t.yaml"]  # nothing written


def test_gzip_break_counts_lines_before_the_break(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl.gz"
    sound = gzip.compress(b"a\n") + gzip.compress(b"b\nc\n")  # two members, as `cat a.gz b.gz` writes
    p.write_bytes(sound)
    assert gzip_break(p) is None and gzip_break(p, chunk=1) is None
    p.write_bytes(sound[:-3])  # the second member's trailer cut: all 3 lines are there, the end is not
    for chunk in (1, 5, 1 << 16):
        lines, problem = gzip_break(p, chunk=chunk)  # type: ignore[misc]
        assert lines == 3 and isinstance(problem, EOFError)
