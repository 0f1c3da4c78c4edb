"""Amazon Reviews 2023 files: reviews, item metadata and the benchmark CSVs.

Layout (https://amazon-reviews-2023.github.io/)::

    ROOT/raw/review_categories/<Category>.jsonl[.gz]
    ROOT/raw/meta_categories/meta_<Category>.jsonl[.gz]

Everything is read with polars (lazy scan, streaming collect); see :mod:`mmgrid.data.jsonl` for
how corrupt lines are handled. Field rules: ``timestamp`` is Unix milliseconds (older
copies say ``sort_timestamp``), ``helpful_vote`` (older: ``helpful_votes``), ``price`` may be a
float, null or a string such as ``"None"``, ``details`` a dict or a JSON string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from mmgrid.data.errors import CorruptLineError, EmptyFileError, MissingFieldError, NoUsableRecordsError
from mmgrid.data.jsonl import ScratchDir, SkipLog, check_list, check_number, collect_jsonl, find_line
from mmgrid.data.timestamps import TimestampUnit, apply_timestamp_unit

REVIEW_RAW_SCHEMA: dict[str, pl.DataType] = {
    "rating": pl.Float64(),
    "title": pl.String(),
    "text": pl.String(),
    "images": pl.List(pl.String()),
    "asin": pl.String(),
    "parent_asin": pl.String(),
    "user_id": pl.String(),
    "timestamp": pl.Float64(),
    "sort_timestamp": pl.Float64(),
    "helpful_vote": pl.Float64(),
    "helpful_votes": pl.Float64(),
    "verified_purchase": pl.Boolean(),
}
REVIEW_COLUMNS = (
    "rating", "title", "text", "images", "asin", "parent_asin", "user_id", "timestamp", "helpful_vote",
    "verified_purchase",
)  # fmt: skip
REVIEW_REQUIRED = ("user_id", "parent_asin", "timestamp")

META_RAW_SCHEMA: dict[str, pl.DataType] = {
    "main_category": pl.String(),
    "title": pl.String(),
    "average_rating": pl.Float64(),
    "rating_number": pl.Float64(),
    "features": pl.List(pl.String()),
    "description": pl.List(pl.String()),
    "price": pl.String(),  # float, null or "None": read as text, parsed below
    "images": pl.List(pl.String()),
    "videos": pl.List(pl.String()),
    "store": pl.String(),
    "categories": pl.List(pl.String()),
    "details": pl.String(),  # a dict is kept as its JSON text, a JSON string as is
    "parent_asin": pl.String(),
    "bought_together": pl.String(),
}
META_COLUMNS = tuple(META_RAW_SCHEMA)

# Section headers that some copies put inside `description`; they say nothing about the item.
DESCRIPTION_HEADERS = frozenset(
    {"product description", "from the manufacturer", "about this item", "description", "product details",
     "from the publisher", "about the author", "review", "editorial reviews"}
)  # fmt: skip


def _review_problem(rec: dict[str, Any]) -> str | None:
    for key in ("rating", "timestamp", "sort_timestamp", "helpful_vote", "helpful_votes"):
        if (why := check_number(rec, key)) is not None:
            return why
    if (why := check_list(rec, "images")) is not None:
        return why
    vp = rec.get("verified_purchase")
    if vp is not None and not isinstance(vp, bool):
        return f"field 'verified_purchase' should be true/false, got {vp!r}"
    return None


def _meta_problem(rec: dict[str, Any]) -> str | None:
    for key in ("average_rating", "rating_number"):
        if (why := check_number(rec, key)) is not None:
            return why
    for key in ("features", "description", "images", "videos", "categories"):
        if (why := check_list(rec, key)) is not None:
            return why
    return None


def read_reviews(
    path: str | Path,
    columns: list[str] | tuple[str, ...] | None = None,
    *,
    strict: bool = False,
    timestamp_unit: TimestampUnit = "ms",
    skips: SkipLog | None = None,
    scratch: ScratchDir | None = None,
    id_dtype: pl.DataType | None = None,
) -> pl.DataFrame:
    """Read an Amazon 2023 review file into normalized columns.

    Args:
        path: ``<Category>.jsonl`` or ``.jsonl.gz``.
        columns: subset of :data:`REVIEW_COLUMNS` to return (default all); the required
            ``user_id``, ``parent_asin``, ``timestamp`` are always checked.
        strict: raise on the first corrupt line or record missing a required field.
        timestamp_unit: ``ms``, ``s`` or ``auto`` (:func:`mmgrid.data.timestamps.apply_timestamp_unit`:
            a value of another unit, or a negative one, raises a named error with its line).
        skips: collects skipped lines (for the manifest); a fresh one if None.
        scratch: temporary folder for cleaned copies (slow path); a private one if None.
        id_dtype: e.g. a ``pl.Categorical``: ``user_id`` and ``parent_asin`` are cast to it inside
            the streaming scan, so full string columns of a huge file are never materialized.

    Returns:
        An eager frame; ``timestamp`` is Int64 Unix milliseconds, ``rating`` Float64.
    """
    path = Path(path)
    cols = list(columns or REVIEW_COLUMNS)
    want = list(dict.fromkeys([*cols, *REVIEW_REQUIRED]))
    own = scratch is None
    scratch = scratch or ScratchDir()
    skips = skips if skips is not None else SkipLog()
    try:
        query = lambda lf: lf.with_row_index("_row").select("_row", *_review_exprs(want, id_dtype))  # noqa: E731
        df = collect_jsonl(path, REVIEW_RAW_SCHEMA, _review_problem, scratch, strict, skips, build=query)
        aliases: dict[str, tuple[str, ...]] = {"timestamp": ("timestamp", "sort_timestamp")}
        df = _drop_missing(df, path, REVIEW_REQUIRED, strict, skips, aliases=aliases)
        df = apply_timestamp_unit(df, str(path), timestamp_unit, lambda row: _line_of_timestamp(path, row["timestamp"]))
    finally:
        if own:
            scratch.close()
    return df.select(cols)


def read_review_texts(path: str | Path, n: int, scratch: ScratchDir | None = None) -> pl.DataFrame:
    """Texts (review title + ". " + text) of the first ``n`` usable reviews of a file, for the base LM.

    Only the head of the file is parsed (the streaming scan stops early), so this costs little
    however large the file; corrupt lines there are skipped silently (the main read counts them).

    Returns:
        ``key`` (user_id|parent_asin|row), ``text`` (non-empty).
    """
    path = Path(path)
    own = scratch is None
    scratch = scratch or ScratchDir()
    text = pl.concat_str([pl.col("title"), pl.col("text")], separator=". ", ignore_nulls=True)
    key = pl.concat_str([pl.col("user_id"), pl.col("parent_asin"), pl.col("_row").cast(pl.String)], separator="|")
    try:
        head = lambda lf: lf.head(n).with_row_index("_row").select(key.alias("key"), text.alias("text"))  # noqa: E731
        df = collect_jsonl(path, REVIEW_RAW_SCHEMA, _review_problem, scratch, False, SkipLog(), build=head)
    finally:
        if own:
            scratch.close()
    return df.filter(pl.col("text").str.len_chars() > 0)


def _review_exprs(cols: list[str], id_dtype: pl.DataType | None = None) -> list[pl.Expr]:
    exprs = {
        "timestamp": pl.coalesce("timestamp", "sort_timestamp").cast(pl.Int64).alias("timestamp"),
        "helpful_vote": pl.coalesce("helpful_vote", "helpful_votes").cast(pl.Int64).alias("helpful_vote"),
    }
    if id_dtype is not None:
        exprs |= {c: pl.col(c).cast(id_dtype) for c in ("user_id", "parent_asin")}
    return [exprs.get(c, pl.col(c)) for c in cols]


def _drop_missing(
    df: pl.DataFrame,
    path: Path,
    required: tuple[str, ...],
    strict: bool,
    skips: SkipLog,
    aliases: dict[str, tuple[str, ...]] | None = None,
) -> pl.DataFrame:
    """Rows lacking a required field: the whole file lacking it always raises; some rows skip or raise."""
    aliases = aliases or {}
    for col in required:
        n_null = df.get_column(col).null_count()
        if n_null == 0:
            continue
        names = aliases.get(col, (col,))
        if n_null == df.height:
            raise MissingFieldError(str(path), col, accepted=names if len(names) > 1 else ())
        if strict:
            line = find_line(path, lambda r: all(r.get(k) is None for k in names))
            raise MissingFieldError(str(path), col, line=line, accepted=names if len(names) > 1 else ())
        for row in df.filter(pl.col(col).is_null()).get_column("_row").head(5).to_list():
            skips.add(str(path), None, f"record #{row + 1} lacks required field {col!r}")
        if n_null > 5:
            skips.counts[str(path)] += n_null - 5
        df = df.filter(pl.col(col).is_not_null())
    return df


def _line_of_timestamp(path: Path, value: int) -> int | None:
    """Line of the first record whose timestamp reads as ``value`` (compared as float64, as polars read it)."""
    return find_line(path, lambda r: (v := _ts_of(r)) is not None and float(v) == float(value))


def _ts_of(rec: dict[str, Any]) -> int | float | None:
    v = rec.get("timestamp", rec.get("sort_timestamp"))
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def read_meta(
    path: str | Path,
    *,
    strict: bool = False,
    skips: SkipLog | None = None,
    scratch: ScratchDir | None = None,
) -> pl.DataFrame:
    """Read an Amazon 2023 item metadata file into normalized columns.

    ``price`` becomes Float64 (null for ``"None"``, ``"—"`` or missing; ``"$1,299.00"`` → 1299.0),
    ``details`` a JSON string, list fields ``list[str]``.

    Args:
        path: ``meta_<Category>.jsonl`` or ``.jsonl.gz``.
        strict: raise on the first corrupt line.
        skips: collects skipped lines (for the manifest).
        scratch: temporary folder for cleaned copies (slow path).

    Returns:
        An eager frame with :data:`META_COLUMNS`.
    """
    path = Path(path)
    own = scratch is None
    scratch = scratch or ScratchDir()
    skips = skips if skips is not None else SkipLog()
    price = pl.col("price").str.replace_all(r"[$,\s]", "").cast(pl.Float64, strict=False)
    try:
        df = collect_jsonl(
            path, META_RAW_SCHEMA, _meta_problem, scratch, strict, skips,
            build=lambda lf: lf.with_row_index("_row").with_columns(
                price.alias("price"), pl.col("rating_number").cast(pl.Int64)
            ),
        )  # fmt: skip
        df = _drop_missing(df, path, ("parent_asin",), strict, skips)
    finally:
        if own:
            scratch.close()
    return df.select(META_COLUMNS)


def item_table(meta: pl.DataFrame, fields: list[str], max_chars: int) -> tuple[pl.DataFrame, dict[str, int]]:
    """Items with a model-ready text: title, then the chosen fields, truncated.

    Args:
        meta: frame from :func:`read_meta` (or any with ``parent_asin``, ``title`` and the fields).
        fields: ``title`` first, then any of ``description``, ``features`` (list fields are joined).
        max_chars: the text is cut to this many characters.

    Returns:
        (items with ``parent_asin``, ``title``, ``text``; counts of dropped rows by reason).
    """
    n0 = meta.height
    meta = meta.unique("parent_asin", keep="first", maintain_order=True)
    n_dup = n0 - meta.height
    title = pl.col("title").str.strip_chars()
    meta = meta.with_columns(title.alias("title"))
    keep = pl.col("title").is_not_null() & (pl.col("title").str.len_chars() > 0)
    n_untitled = meta.height - meta.filter(keep).height
    meta = meta.filter(keep)
    parts = [pl.col("title")]
    for f in fields:
        if f == "title" or f not in meta.columns:
            continue
        parts.append(_field_text(f, meta.schema[f]))
    text = pl.concat_str(parts, separator=" ", ignore_nulls=True).str.replace_all(r"\s+", " ").str.strip_chars()
    items = meta.select("parent_asin", "title", text.str.slice(0, max_chars).alias("text"))
    return items, {"duplicate_item": n_dup, "no_title": n_untitled}


def _field_text(name: str, dtype: pl.DataType) -> pl.Expr:
    col = pl.col(name)
    if isinstance(dtype, pl.List):
        keep = ~pl.element().str.strip_chars().str.to_lowercase().is_in(list(DESCRIPTION_HEADERS))
        col = col.list.eval(pl.element().filter(keep & (pl.element().str.strip_chars() != ""))).list.join(" ")
    return pl.when(col.str.len_chars() > 0).then(col)


def find_category_files(folder: Path, prefix: str = "") -> dict[str, Path]:
    """Category → file for ``<prefix><Category>.jsonl[.gz]`` under ``folder`` (plain wins over .gz)."""
    out: dict[str, Path] = {}
    if not folder.is_dir():
        return out
    for p in sorted(folder.iterdir()):
        name = p.name
        for ext in (".jsonl.gz", ".jsonl"):
            if name.endswith(ext) and name.startswith(prefix):
                out[name[len(prefix) : -len(ext)]] = p
    return out


def review_files(root: Path) -> dict[str, Path]:
    """Category → review file under ``root/raw/review_categories``."""
    return find_category_files(root / "raw" / "review_categories")


def meta_files(root: Path) -> dict[str, Path]:
    """Category → metadata file under ``root/raw/meta_categories``."""
    return find_category_files(root / "raw" / "meta_categories", prefix="meta_")


def benchmark_files(root: Path) -> dict[str, list[Path]]:
    """Category → benchmark CSVs (``<Category>.csv`` or ``<Category>.<split>.csv``) anywhere under root."""
    out: dict[str, list[Path]] = {}
    for p in sorted(root.rglob("*.csv")):
        out.setdefault(p.name.split(".")[0], []).append(p)
    return out


def read_benchmark_csv(path: str | Path, *, strict: bool = False, skips: SkipLog | None = None,
                       timestamp_unit: TimestampUnit = "ms") -> pl.DataFrame:  # fmt: skip
    """Read a benchmark CSV ``user_id,parent_asin,rating,timestamp[,history]``.

    The ``history`` column is ignored: histories are rebuilt from the interactions themselves.
    ``timestamp_unit`` as in :func:`read_reviews` (errors give the CSV line: header = line 1).

    Returns:
        ``user_id``, ``parent_asin``, ``rating`` (Float64), ``timestamp`` (Int64 ms).
    """
    path = Path(path)
    skips = skips if skips is not None else SkipLog()
    try:
        raw = pl.scan_csv(path, infer_schema=False).collect(engine="streaming")
    except pl.exceptions.NoDataError as exc:
        raise EmptyFileError(str(path), "the file is empty (no header, no rows)") from exc
    if raw.height == 0:
        raise EmptyFileError(str(path), "the file has a header but no rows")
    for col in ("user_id", "parent_asin", "timestamp"):
        if col not in raw.columns:
            raise MissingFieldError(str(path), col)
    if "rating" not in raw.columns:
        raw = raw.with_columns(pl.lit(None, pl.String).alias("rating"))
    df = raw.with_row_index("_row").select(
        "_row", "user_id", "parent_asin",
        pl.col("rating").cast(pl.Float64, strict=False),
        pl.col("timestamp").cast(pl.Float64, strict=False).cast(pl.Int64).alias("timestamp"),
        pl.col("rating").is_not_null().alias("_has_rating"),
    )  # fmt: skip
    bad = df.filter(pl.col("timestamp").is_null() | pl.col("user_id").is_null() | pl.col("parent_asin").is_null()
                    | (pl.col("rating").is_null() & pl.col("_has_rating")))  # fmt: skip
    if bad.height:
        first = int(bad.get_column("_row")[0]) + 2  # header is line 1
        if strict:
            raise CorruptLineError(str(path), first, "a field is empty or not a number")
        if bad.height == df.height:
            raise NoUsableRecordsError(str(path), bad.height, first, "a field is empty or not a number (a timestamp "
                                       "as text? an empty id?)")  # fmt: skip
        for row in bad.get_column("_row").to_list():
            skips.add(str(path), int(row) + 2, "a field is empty or not a number")
        df = df.filter(~pl.col("_row").is_in(bad.get_column("_row").implode()))
    df = apply_timestamp_unit(df, str(path), timestamp_unit, lambda row: int(row["_row"]) + 2)
    return df.select("user_id", "parent_asin", "rating", "timestamp")
