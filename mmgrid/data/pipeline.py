"""The preparation pipeline behind ``mmgrid prepare``: raw files → the prepared dataset (see
docs/contracts.md, "Prepared dataset").

Per domain: read → join items with a title → dedupe (user, item), earliest kept → keep the phase
windows (and ``min_date``) → iterative k-core → phases → dense indices → examples. Then the
statistics, the base-LM texts and ``manifest.json``. Everything is written to a temporary folder
that replaces ``DIR`` in one rename, so a killed run never leaves a half dataset behind; the
manifest's input hashes and config hash make a second run with the same inputs a no-op.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import polars as pl

from mmgrid.config import DataConfig, GridConfig, parse_date_ms
from mmgrid.configtools import stable_hash, to_dict
from mmgrid.data import splits
from mmgrid.fileio.atomic import swap_dir
from mmgrid.data.dataset import MANIFEST, PreparedDataset, load_prepared
from mmgrid.data.errors import EmptyPhaseError
from mmgrid.data.hashing import hash_inputs
from mmgrid.data.jsonl import ScratchDir, SkipLog
from mmgrid.data.phases import phase_windows
from mmgrid.data.sources import RawDomain, discover, load_domain
from mmgrid.data.stats import domain_stats, stats_frame

# Bump when the prepared format or the meaning of a step changes: old datasets are then rebuilt.
FORMAT_VERSION = 1

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def config_hash(data: DataConfig) -> str:
    """Hash of what shapes the prepared data (``strict`` only decides whether bad lines raise)."""
    d = to_dict(data)
    d.pop("strict", None)
    return stable_hash({"data": d, "format": FORMAT_VERSION})


def prepare(
    cfg: GridConfig, out: str | Path | None = None, strict: bool | None = None, log: Log | None = None
) -> PreparedDataset:
    """Prepare the grid's dataset, or reuse it when inputs and config are unchanged.

    Args:
        cfg: the grid (its ``data`` section drives everything; ``world`` only improves hints).
        out: output folder (default ``cfg.prepared``).
        strict: fail on the first corrupt line (default ``cfg.data.strict``).
        log: progress messages (default: stderr).

    Returns:
        The prepared dataset, opened with :func:`load_prepared`.
    """
    log = log or _stderr
    data = cfg.data
    strict = data.strict if strict is None else strict
    out = Path(out or cfg.prepared or f"runs/{cfg.name}/prepared")
    files = discover(data, world_hint=cfg.world is not None)
    old = _old_manifest(out)
    hashes = hash_inputs([p for f in files.values() for p in f.all()], old.get("inputs", {}) if old else {})
    chash = config_hash(data)
    if old and old.get("config_hash") == chash and _same_inputs(old.get("inputs", {}), hashes):
        if not (strict and old.get("skipped_lines", {}).get("total", 0)):
            log(f"{out}: up to date (fingerprint {old['fingerprint']}); nothing recomputed.")
            return load_prepared(out)
    windows = phase_windows(data.phases)
    t0 = time.perf_counter()
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    scratch = ScratchDir(out.parent)
    skips = SkipLog()
    try:
        manifest = _build(cfg, files, windows, tmp, scratch, skips, strict, log)
        manifest.update(
            config_hash=chash,
            inputs=hashes,
            fingerprint=stable_hash({"config": chash, "inputs": {k: v["sha256"] for k, v in hashes.items()}}),
            seconds=round(time.perf_counter() - t0, 3),
        )
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
        swap_dir(tmp, out)  # renames only: a reader sees the old or the new dataset, never half
    finally:
        scratch.close()
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"{out}: prepared {len(files)} domain(s) in {manifest['seconds']:.1f} s "
        f"(fingerprint {manifest['fingerprint']}).")
    return load_prepared(out)


def _build(
    cfg: GridConfig,
    files: dict,
    windows: dict[str, tuple[int | None, int | None]],
    tmp: Path,
    scratch: ScratchDir,
    skips: SkipLog,
    strict: bool,
    log: Log,
) -> dict[str, Any]:
    data = cfg.data
    min_ms = parse_date_ms(data.min_date, "data.min_date") if data.min_date else None
    rows, counts, drops, docs = [], {}, {}, []
    for name, dfiles in files.items():
        log(f"  {name}: reading {', '.join(p.name for p in dfiles.all())}")
        raw = load_domain(dfiles, data, scratch, skips, strict)
        docs.append(_lm_candidates(raw.docs, name, data.lm_text_docs, len(files)))
        res = _prepare_domain(name, raw, data, windows, min_ms)
        del raw
        (tmp / name).mkdir()
        res["items"].write_parquet(tmp / name / "items.parquet")
        res["inter"].write_parquet(tmp / name / "interactions.parquet")
        res["examples"].write_parquet(tmp / name / "examples.parquet")
        rows.append(domain_stats(name, res["inter"], res["items"], res["examples"], windows))
        counts[name], drops[name] = res["counts"], res["drops"]
        del res  # the next domain starts from a clean slate (peak memory is one domain's)
    stats_frame(rows).write_parquet(tmp / "stats.parquet")
    lm = _lm_split(pl.concat(docs), data.lm_text_docs, data.lm_heldout_share)
    lm.write_parquet(tmp / "lm_text.parquet")
    return {
        "format": FORMAT_VERSION,
        "name": cfg.name,
        "config": to_dict(data),
        "world": to_dict(cfg.world) if cfg.world is not None else None,
        "domains": list(files),
        "phases": {k: list(v) for k, v in windows.items()},
        "rows": counts,
        "dropped": drops,
        "skipped_lines": {"total": skips.total(), "by_file": skips.counts, "first": skips.examples},
        "lm_text": {s: int(n) for s, n in lm.group_by("split").len().iter_rows()},
    }


def _prepare_domain(
    name: str, raw: RawDomain, data: DataConfig, windows: dict[str, tuple[int | None, int | None]], min_ms: int | None
) -> dict[str, Any]:
    drops: dict[str, Any] = dict(raw.drops)  # counts, and per-phase counts by name
    inter = raw.inter
    # Categorical ids: dedupe and the k-core rounds hash small integers instead of strings. A fresh
    # category set per domain (not the process-wide one) is freed with the domain's frames.
    cat = inter.schema["user_id"]
    if not isinstance(cat, pl.Categorical):
        cat = pl.Categorical(pl.Categories.random())
        inter = inter.with_columns(pl.col("user_id").cast(cat), pl.col("parent_asin").cast(cat))
    n_reviews = inter.height
    inter = inter.join(raw.items.select(pl.col("parent_asin").cast(cat)), on="parent_asin", how="semi")
    drops["item_without_titled_meta"] = n_reviews - inter.height
    n = inter.height
    inter = splits.dedupe(inter)
    drops["duplicate_user_item"], n = n - inter.height, inter.height
    inter = inter.filter(splits.in_windows(windows, min_ms))
    drops["outside_phases_or_before_min_date"], n = n - inter.height, inter.height
    inter, rounds = splits.kcore(inter, data.kcore)
    drops["kcore"] = n - inter.height
    inter = inter.with_columns(
        splits.phase_expr(windows), pl.col("user_id").cast(pl.String), pl.col("parent_asin").cast(pl.String)
    )
    indexed, _, item_map = splits.index_ids(inter)
    first_seen = indexed.group_by("item_idx").agg(pl.col("timestamp").min().alias("first_seen_ms"))
    items = (
        item_map.join(raw.items, on="parent_asin").join(first_seen, on="item_idx")
        .select("item_idx", "parent_asin", "title", "text", "first_seen_ms").sort("item_idx")
    )  # fmt: skip
    inter = indexed.select("user_idx", "user_id", "item_idx", "timestamp", "phase")
    inter = inter.sort("user_idx", "timestamp", "item_idx")
    examples = splits.build_examples(inter, data.max_history, data.min_history)
    _check_phases(name, inter, examples, windows)
    per_phase = dict(inter.group_by("phase").len().iter_rows())
    ex_phase = dict(examples.group_by("phase").len().iter_rows())
    drops["short_history_targets"] = {p: int(per_phase.get(p, 0) - ex_phase.get(p, 0)) for p in windows}
    counts = {
        "reviews": n_reviews,
        "users": int(inter.get_column("user_idx").n_unique()),
        "items": items.height,
        "interactions": inter.height,
        "kcore_rounds": rounds,
        "interactions_by_phase": {p: int(per_phase.get(p, 0)) for p in windows},
        "examples_by_phase": {p: int(ex_phase.get(p, 0)) for p in windows},
    }
    return {"items": items, "inter": inter, "examples": examples, "counts": counts, "drops": drops}


def _check_phases(name: str, inter: pl.DataFrame, examples: pl.DataFrame, windows: dict) -> None:
    have = set(inter.get_column("phase").unique().to_list())
    have_ex = set(examples.get_column("phase").unique().to_list())
    for p in windows:
        if p not in have:
            raise EmptyPhaseError(name, p)
        if p not in have_ex:
            raise EmptyPhaseError(name, p, "examples (no target has an earlier interaction)")


def _lm_candidates(docs: pl.DataFrame, domain: str, total: int, n_domains: int) -> pl.DataFrame:
    """A deterministic share of one domain's texts (smallest key hashes) for the base LM."""
    per = -(-total // max(n_domains, 1))
    h = pl.col("key").hash(seed=17)
    return docs.select(pl.lit(domain).alias("domain"), "key", "text", h.alias("_h")).top_k(per, by="_h", reverse=True)


def _lm_split(docs: pl.DataFrame, total: int, heldout_share: float) -> pl.DataFrame:
    docs = docs.sort("_h", "key").head(total)
    n_held = int(round(docs.height * heldout_share))
    # Every domain contributes to both splits: order by a second hash, the first n_held are held out.
    docs = docs.with_columns(pl.col("key").hash(seed=29).alias("_g")).sort("_g", "key")
    split = pl.when(pl.int_range(pl.len()) < n_held).then(pl.lit("heldout")).otherwise(pl.lit("train"))
    return docs.select(split.alias("split"), "text", "domain")


def _old_manifest(out: Path) -> dict[str, Any] | None:
    p = out / MANIFEST
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _same_inputs(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return {k: v.get("sha256") for k, v in old.items()} == {k: v["sha256"] for k, v in new.items()}
