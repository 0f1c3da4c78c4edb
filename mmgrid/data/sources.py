"""Raw sources → one common shape per domain: interactions, items with text, review texts.

Three source families (``data.source``): ``amazon2023`` (review + meta JSON lines),
``benchmark_csv`` (Amazon 2023 benchmark CSVs + meta JSON lines) and ``recbole`` (atomic
``.inter`` / ``.item`` files).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from mmgrid.data import amazon, recbole
from mmgrid.config import DataConfig
from mmgrid.data.errors import MissingRawDataError, UnknownDomainError
from mmgrid.data.jsonl import ScratchDir, SkipLog


@dataclass
class DomainFiles:
    """The raw files of one domain, by role (``reviews``, ``meta``, ``csv``, ``inter``, ``item``)."""

    name: str
    files: dict[str, list[Path]] = field(default_factory=dict)

    def all(self) -> list[Path]:
        return [p for ps in self.files.values() for p in ps]


@dataclass
class RawDomain:
    """One domain read from its raw files."""

    inter: pl.DataFrame  # user_id, parent_asin (String or Categorical), timestamp (Int64 ms)
    items: pl.DataFrame  # parent_asin, title, text
    docs: pl.DataFrame  # key (user_id|parent_asin|ts), text: candidate texts for the base LM
    drops: dict[str, int]


def discover(data: DataConfig, world_hint: bool = False) -> dict[str, DomainFiles]:
    """Find the raw files of every configured domain (or every domain found).

    Raises:
        MissingRawDataError: nothing of the configured source under ``data.root``.
        UnknownDomainError: a name in ``data.domains`` has no file.
    """
    root = Path(data.root)
    found = _found(data, root)
    if not found:
        hint = (
            f" This grid uses the synthetic world: run `mmgrid world --out {root}` first."
            if world_hint
            else " Point data.root at the folder that holds them (e.g. data.root=/data/amazon2023)."
        )
        raise MissingRawDataError(f"data.root={root}: no {_layout(data)} found.{hint}")
    names = data.domains or sorted(found)
    for n in names:
        if n not in found:
            raise UnknownDomainError(n, str(root), sorted(found))
    return {n: found[n] for n in names}


def _layout(data: DataConfig) -> str:
    return {
        "amazon2023": "review files raw/review_categories/<Category>.jsonl[.gz]",
        "benchmark_csv": "benchmark CSV files <Category>[.split].csv",
        "recbole": "RecBole atomic files <name>.inter",
    }[data.source]


def _found(data: DataConfig, root: Path) -> dict[str, DomainFiles]:
    if not root.is_dir():
        return {}
    if data.source == "recbole":
        return {n: DomainFiles(n, {k: [v] for k, v in f.items()}) for n, f in recbole.atomic_files(root).items()}
    metas = amazon.meta_files(root)
    if data.source == "amazon2023":
        revs = {k: [v] for k, v in amazon.review_files(root).items()}
        key = "reviews"
    else:
        revs = amazon.benchmark_files(root)
        key = "csv"
    out = {}
    for n, ps in revs.items():
        files = {key: ps}
        if n in metas:
            files["meta"] = [metas[n]]
        out[n] = DomainFiles(n, files)
    return out


def load_domain(df: DomainFiles, data: DataConfig, scratch: ScratchDir, skips: SkipLog, strict: bool) -> RawDomain:
    """Read one domain's raw files into a :class:`RawDomain`."""
    if data.source == "recbole":
        return _load_recbole(df, data, skips, strict)
    if "meta" not in df.files:
        root = Path(data.root)
        raise MissingRawDataError(
            f"domain {df.name!r}: no item metadata; expected {root}/raw/meta_categories/meta_{df.name}.jsonl[.gz]. "
            "Item titles come from it: download it next to the reviews, or drop the domain from data.domains."
        )
    meta = amazon.read_meta(df.files["meta"][0], strict=strict, skips=skips, scratch=scratch)
    items, drops = amazon.item_table(meta, data.item_text.fields, data.item_text.max_chars)
    del meta
    if data.source == "amazon2023":
        path = df.files["reviews"][0]
        inter = amazon.read_reviews(
            path, ["user_id", "parent_asin", "timestamp"], strict=strict, timestamp_unit=data.timestamp_unit,
            skips=skips, scratch=scratch, id_dtype=pl.Categorical(pl.Categories.random()),
        )  # fmt: skip
        docs = amazon.read_review_texts(path, 4 * data.lm_text_docs, scratch=scratch)
    else:
        parts = [
            amazon.read_benchmark_csv(p, strict=strict, skips=skips, timestamp_unit=data.timestamp_unit)
            for p in df.files["csv"]
        ]
        inter = pl.concat(parts).select("user_id", "parent_asin", "timestamp")
        docs = _item_docs(items)
    return RawDomain(inter=inter, items=items, docs=docs, drops=drops)


def _load_recbole(df: DomainFiles, data: DataConfig, skips: SkipLog, strict: bool) -> RawDomain:
    if "item" not in df.files:
        inter_path = df.files["inter"][0]
        raise MissingRawDataError(
            f"domain {df.name!r}: no {inter_path.with_suffix('.item')}; item text "
            f"({data.recbole_text_field!r}) comes from the .item file next to the .inter file."
        )
    inter = recbole.read_inter(df.files["inter"][0], strict=strict, skips=skips)
    inter = inter.select("user_id", "parent_asin", "timestamp")
    meta = recbole.read_item(df.files["item"][0], data.recbole_text_field)
    items, drops = amazon.item_table(meta, ["title"], data.item_text.max_chars)
    return RawDomain(inter=inter, items=items, docs=_item_docs(items), drops=drops)


def _item_docs(items: pl.DataFrame) -> pl.DataFrame:
    """Sources without review text lend item texts to the base LM instead."""
    return items.select(pl.col("parent_asin").alias("key"), "text")
