"""RecBole atomic files as a source: ``<name>.inter`` and ``<name>.item``.

Atomic files are tab-separated with a typed header (``user_id:token  item_id:token
rating:float  timestamp:float``); RecBole timestamps are Unix seconds and are turned into
milliseconds here. ``item_id`` plays the part of Amazon's ``parent_asin``, and the ``.item``
column named by ``data.recbole_text_field`` becomes the item title and text, so any RecBole
dataset maps to the same prepared format.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mmgrid.data.errors import CorruptLineError, EmptyFileError, MissingFieldError, NoUsableRecordsError
from mmgrid.data.jsonl import SkipLog
from mmgrid.data.timestamps import apply_timestamp_unit

SECONDS_HINT = "RecBole atomic files hold Unix seconds: convert the column to seconds in the file."


def atomic_files(root: Path) -> dict[str, dict[str, Path]]:
    """Dataset name → {"inter": path, "item": path} for every ``*.inter`` under root."""
    out: dict[str, dict[str, Path]] = {}
    for p in sorted(root.rglob("*.inter")):
        entry = {"inter": p}
        item = p.with_suffix(".item")
        if item.exists():
            entry["item"] = item
        out[p.stem] = entry
    return out


def _read_atomic(path: Path) -> pl.DataFrame:
    try:
        df = pl.scan_csv(path, separator="\t", quote_char=None, infer_schema=False).collect(engine="streaming")
    except pl.exceptions.NoDataError as exc:
        raise EmptyFileError(str(path), "the file is empty (no header, no rows)") from exc
    if df.height == 0:
        raise EmptyFileError(str(path), "the file has a header but no rows")
    return df.rename({c: c.split(":")[0] for c in df.columns})


def read_inter(path: str | Path, *, strict: bool = False, skips: SkipLog | None = None) -> pl.DataFrame:
    """Read a ``.inter`` file.

    Returns:
        ``user_id``, ``parent_asin`` (the item_id), ``rating`` (Float64, null if absent),
        ``timestamp`` (Int64 milliseconds).
    """
    path = Path(path)
    skips = skips if skips is not None else SkipLog()
    df = _read_atomic(path)
    for col in ("user_id", "item_id", "timestamp"):
        if col not in df.columns:
            raise MissingFieldError(str(path), col)
    rating = pl.col("rating").cast(pl.Float64, strict=False) if "rating" in df.columns else pl.lit(None, pl.Float64)
    out = df.with_row_index("_row").select(
        "_row",
        "user_id",
        pl.col("item_id").alias("parent_asin"),
        rating.alias("rating"),
        pl.col("timestamp").cast(pl.Float64, strict=False).alias("timestamp"),  # seconds until checked below
    )
    bad = out.filter(pl.col("timestamp").is_null() | pl.col("user_id").is_null() | pl.col("parent_asin").is_null())
    if bad.height:
        first = int(bad.get_column("_row")[0]) + 2  # header is line 1
        if strict:
            raise CorruptLineError(str(path), first, "empty id or timestamp not a number")
        if bad.height == out.height:
            raise NoUsableRecordsError(str(path), bad.height, first, "an id is empty or the timestamp is not a number")
        for row in bad.get_column("_row").to_list():
            skips.add(str(path), int(row) + 2, "empty id or timestamp not a number")
        out = out.filter(~pl.col("_row").is_in(bad.get_column("_row").implode()))
    out = apply_timestamp_unit(out, str(path), "s", lambda row: int(row["_row"]) + 2, hint=SECONDS_HINT)
    return out.with_columns(pl.col("timestamp").round().cast(pl.Int64)).drop("_row")


def read_item(path: str | Path, text_field: str) -> pl.DataFrame:
    """Read a ``.item`` file.

    Returns:
        ``parent_asin`` (the item_id) and ``title`` (the text field), ready for
        :func:`mmgrid.data.amazon.item_table`.
    """
    path = Path(path)
    df = _read_atomic(path)
    for col in ("item_id", text_field):
        if col not in df.columns:
            raise MissingFieldError(
                str(path), col, accepted=tuple(c for c in df.columns if c != "item_id") if col == text_field else ()
            )
    return df.select(pl.col("item_id").alias("parent_asin"), pl.col(text_field).alias("title"))
