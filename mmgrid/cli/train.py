"""CLI sub-commands of the grid's build (:mod:`mmgrid.train`): ``mmgrid build`` and ``mmgrid plan``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.cli.context import grid_source, load_config, save_run
from mmgrid.cliargs import REGISTRY_HELP
from mmgrid.errors import ConfigError
from mmgrid.exec.args import add_executor_args, executor_from_args
from mmgrid.exec.base import LocalExecutor
from mmgrid.exec.ddp import is_main

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig


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
    p.add_argument("--retrain", action="store_true",
                   help="train stages the registry holds under an earlier mmgrid's ids again, instead of stopping "
                        "with the advice to run `mmgrid registry remap-ids` (which reuses them)")
    p.add_argument("--plan", action="store_true",
                   help="print the costed plan (as `mmgrid plan`) and stop; nothing is trained")
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
    _register_plan(sub)


def _register_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="what a grid will cost before it runs: stages, merges, evaluations; FLOPs, bytes, memory, time",
        description="Print the stages the build trains and the merges and evaluations its studies run, each with "
                    "examples, tokens, FLOPs (estimates: 6 x N x tokens to train, 2 x N x tokens to evaluate, N the "
                    "model's parameters at that job), checkpoint bytes, peak memory and time, and the totals. Stages "
                    "the registry already holds cost nothing. Time is this machine's measured throughput (a few "
                    "training steps of the tiny base, measured once and cached) or, with --accelerator, a GPU's "
                    "peak bf16 FLOP/s at --mfu. Counts come from the prepared data, a grid's synthetic world, or "
                    "MMGRid Table 1 for the paper's Amazon categories. Nothing is trained or written.")
    p.add_argument("config", nargs="?", default=None, metavar="GRID|RUN",
                   help="grid YAML, a packaged grid name such as demo or amazon2023, or a run folder")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. train.max_examples=2000")
    p.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)
    p.add_argument("--accelerator", default=None, metavar="NAME",
                   help="time on this GPU instead of this machine: h100, h200, a100 or l4 (peak dense bf16 FLOP/s "
                        "from the vendor's datasheet)")
    p.add_argument("--mfu", type=float, default=0.4,
                   help="model FLOPs utilisation with --accelerator, a fraction (default 0.4)")
    p.add_argument("--recalibrate", action="store_true", help="measure this machine's throughput again (cached)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (every job, for scripts)")
    p.set_defaults(func=_plan)


def _print_plan(cfg: GridConfig, args: argparse.Namespace) -> None:
    # lazy: the cost model imports torch (~1-3.5 s) and polars; `mmgrid --help` must not
    from mmgrid.runtime.cost import cost_plan, plan_inputs, render
    from mmgrid.runtime.throughput import accelerator, measured

    name = getattr(args, "accelerator", None)
    tp = accelerator(name, float(getattr(args, "mfu", 0.4))) if name else \
        measured(cfg.train.threads, refresh=bool(getattr(args, "recalibrate", False)))
    plan = cost_plan(plan_inputs(cfg, tp))
    if getattr(args, "json", False):
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        print(render(plan))


def _plan(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides, args if args.registry else None, command="plan")
    _print_plan(cfg, args)
    return 0


def _build(args: argparse.Namespace) -> int:
    # lazy: `mmgrid --help` imports this module to register `build`; training pulls in torch (~3.5 s)
    # and transformers (~1.7 s), measured with `python -X importtime` (docs/architecture.md)
    from mmgrid.config import ExecConfig
    from mmgrid.configtools import check_flag
    from mmgrid.eval.grid import evaluate_and_tabulate
    from mmgrid.runtime.preflight import preflight
    from mmgrid.train.build import build_grid

    if not args.rehearse and (args.out is not None or args.rehearse_domains != 3):
        raise ConfigError("build: --out and --rehearse-domains belong to --rehearse; add --rehearse, or drop them "
                          "(a build writes into the grid's registry).")
    if args.rehearse:  # the real grid unvalidated: the rehearsal reports what `build` would refuse, then goes on
        # lazy: the config loader (yaml) and the rehearsal (every layer of the pipeline)
        from mmgrid.config import load_grid
        from mmgrid.cli.rehearse import rehearse

        extra = [f"exec.executor={args.executor}"] if args.executor else []  # said as "-> local" by the rehearsal
        extra += [f"exec.workers={args.workers}"] if args.workers is not None else []
        real = load_grid(grid_source(args.config, args if args.registry else None, "build"),
                         [*(args.overrides or []), *extra])
        return 0 if rehearse(real, args.out, args.rehearse_domains).ok else 1
    cfg = load_config(args.config, args.overrides, args if args.registry else None, command="build")
    if args.plan:
        _print_plan(cfg, args)
        return 0
    for flag, name in (("--num-cpus", "num_cpus"), ("--workers", "workers")):  # a bad flag: its own one-line error
        check_flag(flag, getattr(args, name), ExecConfig, name, f"exec.{name}")
    preflight(cfg, "build", executor=args.executor, address=args.address)  # every check, before any work
    executor = executor_from_args(args, cfg)
    try:
        res = build_grid(cfg, executor=executor, progress=not args.no_progress, retrain=args.retrain)
        if not is_main():  # under torchrun only rank 0 reports and evaluates
            return 0
        save_run(cfg, Path(cfg.registry_root).resolve().parent, "build")  # follow-ups name this folder
        print(f"grid {cfg.name!r}: {len(res.stages)} stages ({len(res.trained)} trained, {len(res.cached)} cached) "
              f"+ base {res.base_id[:12]} in {res.seconds:.1f}s; registry {cfg.registry}")
        if args.eval:  # the evaluation's jobs on the same executor (the local one: in this process, in order)
            jobs_on = None if isinstance(executor, LocalExecutor) else executor
            print(evaluate_and_tabulate(cfg, res, progress=not args.no_progress, executor=jobs_on))
    finally:
        executor.shutdown()
    return 0
