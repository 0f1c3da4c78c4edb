"""CLI sub-command of mmgrid.train: ``mmgrid build`` (see mmgrid/cli.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mmgrid.cliargs import REGISTRY_HELP, grid_source, load_config, save_run
from mmgrid.errors import ConfigError
from mmgrid.exec.args import add_executor_args, executor_from_args
from mmgrid.exec.base import LocalExecutor
from mmgrid.exec.ddp import is_main


def register(sub: argparse._SubParsersAction) -> None:
    """Add this concern's sub-commands to the `mmgrid` parser."""
    p = sub.add_parser("build", help="build (or resume) every checkpoint of a grid: base -> pretrain -> p1 -> p2",
                       description="Train the grid of a YAML config. Finished stages are registry cache hits, so "
                                   "re-running after a kill resumes at the first unfinished stage.")
    p.add_argument("config", nargs="?", default=None, metavar="CONFIG|RUN",
                   help="grid YAML, a packaged grid name such as demo, or a run folder (its saved grid); the resolved "
                        "grid is saved as mmgrid-run.yaml beside the registry")
    p.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. train.seed=1")
    p.add_argument("--eval", action="store_true", help="evaluate the grid afterwards and print the baseline table")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--rehearse", action="store_true",
                   help="run the grid's own code path end to end at toy size on CPU in a few minutes, before renting "
                        "GPUs: its architecture shrunk with random weights, its paradigms and embedders, the first users "
                        "of each domain (or a synthetic world in the grid's layout), every stage type, one merge of "
                        "each study, evaluation and the report, in a separate folder with its own registry; prints "
                        "what was substituted and each step's time, exits non-zero unless every step ran")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="with --rehearse: the rehearsal folder (default: a new temporary folder)")
    p.add_argument("--rehearse-domains", type=int, default=3, metavar="N",
                   help="with --rehearse: rehearse the grid's first N domains (default 3, the fewest every study runs on)")
    add_executor_args(p)
    p.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    # lazy: `mmgrid --help` imports this module to register `build`; training pulls in torch (~3.5 s)
    # and transformers (~1.7 s), measured with `python -X importtime` (docs/architecture.md)
    from mmgrid.eval.grid import evaluate_and_tabulate
    from mmgrid.train.build import build_grid

    if not args.rehearse and (args.out is not None or args.rehearse_domains != 3):
        raise ConfigError("build: --out and --rehearse-domains belong to --rehearse; add --rehearse, or drop them "
                          "(a build writes into the grid's registry).")
    if args.rehearse:  # the real grid unvalidated: the rehearsal reports what `build` would refuse, then goes on
        # lazy: the config loader (yaml) and the rehearsal (every layer of the pipeline)
        from mmgrid.config import load_grid
        from mmgrid.rehearse import rehearse

        extra = [f"exec.executor={args.executor}"] if args.executor else []  # said as "-> local" by the rehearsal
        extra += [f"exec.workers={args.workers}"] if args.workers is not None else []
        real = load_grid(grid_source(args.config, args if args.registry else None, "build"),
                         [*(args.overrides or []), *extra])
        return 0 if rehearse(real, args.out, args.rehearse_domains).ok else 1
    cfg = load_config(args.config, args.overrides, args if args.registry else None, command="build")
    executor = executor_from_args(args, cfg)
    try:
        res = build_grid(cfg, executor=executor, progress=not args.no_progress)
        if not is_main():  # under torchrun only rank 0 reports and evaluates
            return 0
        save_run(cfg, Path(cfg.registry).resolve().parent, "build")  # follow-ups name this folder
        print(f"grid {cfg.name!r}: {len(res.stages)} stages ({len(res.trained)} trained, {len(res.cached)} cached) "
              f"+ base {res.base_id[:12]} in {res.seconds:.1f}s; registry {cfg.registry}")
        if args.eval:  # the evaluation's jobs on the same executor (the local one: in this process, in order)
            jobs_on = None if isinstance(executor, LocalExecutor) else executor
            print(evaluate_and_tabulate(cfg, res, progress=not args.no_progress, executor=jobs_on))
    finally:
        executor.shutdown()
    return 0
