"""``mmgrid demo`` and ``mmgrid validate``: the embedded default end to end."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a grid YAML without running anything")
    p.add_argument("config", help="grid YAML, or a packaged grid name such as demo")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    p.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    from mmgrid.config import load_grid

    cfg = load_grid(args.config, args.overrides)
    print(f"{args.config}: valid grid {cfg.name!r} (hash {cfg.hash()})")
    return 0
