"""Reading the studies' evaluations back from the registry as tidy DataFrames."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from mmgrid.config import GridConfig, load_grid
from mmgrid.config.runfile import is_run_file, load_run
from mmgrid.data.dataset import PreparedDataset, load_prepared
from mmgrid.registry import Registry


def study_frame(registry: Registry, study: str, **filters: Any) -> pd.DataFrame:
    """All evaluation rows of one study (``extra.study``), newest last.

    Args:
        registry: an open registry.
        study: ``temporal``, ``cross_domain`` or ``lambda_hat``.
        **filters: further registry result filters; None values are ignored.

    Returns:
        The registry's results frame (one row per metric) restricted to the study.
    """
    clean = {k: v for k, v in filters.items() if v is not None}
    df = registry.results(study=study, **clean)
    if df.empty:
        return df
    if "created" in df.columns:
        df = df.sort_values(["created", "key"] if "key" in df.columns else ["created"], kind="stable")
    return df.reset_index(drop=True)


def checkpoint_metrics(registry: Registry, ids: list[str], split: str = "test", group: str = "all") -> pd.DataFrame:
    """Newest recorded metrics of checkpoints: one row per id, one column per metric.

    Rows recorded by a study (an ``extra.study`` key) are ignored: they belong to merges.
    """
    if not ids:
        return pd.DataFrame()
    res = registry.results(id=list(ids), split=split, group=group)
    if res.empty:
        return pd.DataFrame(index=pd.Index([], name="id"))
    if "study" in res.columns:
        res = res[res["study"].isna()]
    res = res.sort_values("created", kind="stable").drop_duplicates(["id", "metric"], keep="last")
    return res.pivot(index="id", columns="metric", values="value")


def open_grid(config: str, overrides: list[str] | None = None) -> tuple[GridConfig, Registry, PreparedDataset]:
    """(GridConfig, Registry, PreparedDataset) of a grid YAML or a run's ``mmgrid-run.yaml`` (its
    paths relative to its folder): what every study script starts from."""
    cfg = load_run(config, overrides) if is_run_file(config) else load_grid(config, overrides)
    return cfg, Registry.open(cfg.registry_root), load_prepared(cfg.prepared_dir)


def script_grid(doc: str | None, extra: Callable[[argparse.ArgumentParser], None] | None = None
                ) -> tuple[argparse.Namespace, Any, Any, Any]:
    """The command line every analysis/ script shares: ``CONFIG [KEY=VALUE ...] --out DIR``.

    Args:
        doc: the script's docstring (its --help).
        extra: adds the script's own options to the parser.

    Returns:
        (parsed arguments, GridConfig, Registry, PreparedDataset); ``--out`` exists afterwards.
    """
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", help="grid YAML, or a packaged grid name such as demo")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    ap.add_argument("--out", default=".", help="folder for the figures (created if missing)")
    if extra is not None:
        extra(ap)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    return (args, *open_grid(args.config, args.overrides))


def recorded(registry: Registry, recipe_hashes: list[str], study: str) -> set[str]:
    """Which of these recipe hashes already have evaluations of ``study`` in the registry."""
    if not recipe_hashes:
        return set()
    df = registry.results(recipe_hash=list(recipe_hashes), study=study)
    return set(df["recipe_hash"]) if not df.empty else set()
