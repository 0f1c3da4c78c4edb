"""CLI sub-commands of mmgrid.train: ``mmgrid build`` and ``mmgrid eval`` (see mmgrid/cli.py)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this concern's sub-commands to the `mmgrid` parser."""
    p = sub.add_parser("build", help="build (or resume) every checkpoint of a grid: base -> pretrain -> p1 -> p2",
                       description="Train the grid of a YAML config. Finished stages are registry cache hits, so "
                                   "re-running after a kill resumes at the first unfinished stage.")
    p.add_argument("config", help="grid YAML, or a packaged grid name such as demo")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. train.seed=1")
    p.add_argument("--eval", action="store_true", help="evaluate the grid afterwards and print the baseline table")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    from mmgrid.exec.args import add_executor_args

    add_executor_args(p)
    p.set_defaults(func=_build)

    e = sub.add_parser("eval", help="evaluate a grid, a registry checkpoint, or a merge recipe",
                       description="Recall@K / NDCG@K (full ranking, all / active / non-active users) and text "
                                   "retention, recorded in the registry. Forms: `mmgrid eval CONFIG [KEY=VALUE...]`; "
                                   "`mmgrid eval --registry ROOT ID [--domain D] [--prepared DIR] [--config CONFIG]`; "
                                   "`mmgrid eval --recipe FILE.yaml [--config CONFIG]`.")
    e.add_argument("target", nargs="?", help="a grid YAML, or (with --registry) a checkpoint id / alias")
    e.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    e.add_argument("--registry", help="registry root (evaluate one checkpoint)")
    e.add_argument("--recipe", help="merge recipe YAML: method, models, base, params (evaluated, never stored)")
    e.add_argument("--domain", help="domain to evaluate on (default: the checkpoint's own)")
    e.add_argument("--prepared", help="prepared dataset folder (default: the config's)")
    e.add_argument("--config", help="grid YAML giving paradigm params and eval settings (default: demo defaults)")
    e.add_argument("--split", help="phase to evaluate (default: eval.split)")
    e.add_argument("--no-record", action="store_true", help="print only, record nothing")
    e.set_defaults(func=_eval)


def _build(args: argparse.Namespace) -> int:
    from mmgrid.config import load_grid
    from mmgrid.exec.args import executor_from_args
    from mmgrid.exec.ddp import is_main
    from mmgrid.train.build import build_grid

    cfg = load_grid(args.config, args.overrides)
    executor = executor_from_args(args, cfg)
    try:
        res = build_grid(cfg, executor=executor, progress=not args.no_progress)
    finally:
        executor.shutdown()
    if not is_main():  # under torchrun only rank 0 reports and evaluates
        return 0
    print(f"grid {cfg.name!r}: {len(res.stages)} stages ({len(res.trained)} trained, {len(res.cached)} cached) "
          f"+ base {res.base_id[:12]} in {res.seconds:.1f}s; registry {cfg.registry}")
    if args.eval:
        from mmgrid.eval.grid import evaluate_grid
        from mmgrid.eval.table import baseline_table
        from mmgrid.train.context import open_registry

        evaluate_grid(cfg, res, progress=not args.no_progress)
        domains = list(dict.fromkeys(s.domain for s in res.stages))
        print(baseline_table(open_registry(cfg.registry), cfg.paradigms, domains, ks=cfg.eval.ks,
                             group="all", split=cfg.eval.split, period=cfg.train.stages[-1]))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from mmgrid.eval.cli import eval_checkpoint_cli, eval_grid_cli, eval_recipe_cli

    if args.recipe:
        return eval_recipe_cli(args)
    if args.registry:
        return eval_checkpoint_cli(args)
    return eval_grid_cli(args)
