"""``mmgrid calibrate``: the calibration study, and ``--plan``, the design planner (the study: :mod:`mmgrid.sweep.calibration`)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from mmgrid.cli.context import load_config
from mmgrid.cliargs import add_overrides
from mmgrid.errors import ConfigError
from mmgrid.exec.args import add_executor_args, executor_from_args

DESCRIPTION = """\
Can this grid's study see what the synthetic world plants, and reject its absence?

For each planted size in sweeps.calibrate.sizes (0 = the null world: the knobs in
sweeps.calibrate.knobs, e.g. world.plant.turnover, set to 0; 1 = the preset's world), run
sweeps.calibrate.replicates replicate worlds (world seeds world_seed, world_seed + 1, ...) through
the grid's own pipeline at its budget (world -> prepare -> build the swept paradigm -> evaluate ->
temporal sweep), judge every finding as the report does, and compare with each finding's
population value (the same pipeline on worlds with population_user_scale x the users; for lambda*
and the Table 2 difference also each replicate's own world with that many more users, for the first
sweeps.calibrate.own_world_replicates replicates: their intervals are about one world). Writes
OUT/calibration.md (type-I error, power, coverage, bias, minimum detectable effect, each with its
Monte Carlo standard error), OUT/calibration.json and OUT/power_curve.png. Replicates run as
executor jobs (exec.workers, --workers, Ray) and are cached by recipe under OUT/replicates/.

--plan answers the inverse question without running anything: how many test users (per number of
training seeds) a paired comparison needs to detect --effect at 80% power, given the per-user SD
of the difference (--sd) and the seed-to-seed SD of a run's mean (--seed-sd); with --from OUT the
SDs measured by a calibrate run are used.

Examples:
  mmgrid calibrate demo --out runs/calibrate                                 # the full study (~2 h 20 min, 2 cores)
  mmgrid calibrate demo --out /tmp/cal --quick                               # a smoke run (minutes)
  mmgrid calibrate demo sweeps.calibrate.replicates=5 "sweeps.calibrate.sizes=[0, 0.5, 1]" --out runs/cal
  mmgrid calibrate --plan --effect 0.005 --sd 0.2 --seed-sd 0.002
  mmgrid calibrate --rolling --out runs/rolling-cal --quick                  # the rolling verdicts, smoke (~30 s)
  mmgrid calibrate --rolling --out runs/rolling-cal --replicates 40 --sizes 0,0.25,0.5

--rolling calibrates the rolling deployment study's verdicts ("lambda chosen from the past beats
lambda = 1 over the windows", "the best strategy beats lambda = 1") on a checkpoint world with a
planted drift per period (0: none; docs/calibration.md): type-I error, power and minimum detectable
effect; it needs no grid.
"""

# --quick: the demo's quick world and training, three domains (rho needs three), two replicates per size
QUICK = ["world.n_domains=3", "world.scale=0.5", "data.lm_text_docs=600", "base.lm_epochs=1",
         "train.epochs={pretrain: 1, p1: 1, p2: 1}", "train.max_examples=128", "train.seeds=[0]",
         "eval.max_users=100", "sweeps.temporal.step=0.25", "sweeps.calibrate.replicates=2",
         "sweeps.calibrate.population_worlds=1", "sweeps.calibrate.population_user_scale=2"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``calibrate`` to the `mmgrid` parser."""
    p = sub.add_parser("calibrate", help="calibration study: type-I error, power, coverage and MDE of each finding",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", default=None, help="a run folder (its saved grid), a grid YAML with a world: section, or a packaged grid name "
                                                           "such as demo (not needed with --plan)")
    p.add_argument("--out", default=None, help="output folder (required unless --plan)")
    p.add_argument("--quick", action="store_true", help="a smoke configuration: tiny worlds and training, "
                                                       "2 replicates per size (minutes on 2 cores)")
    p.add_argument("--plan", action="store_true", help="answer how many users / seeds a design needs; runs nothing")
    p.add_argument("--rolling", action="store_true", help="calibrate the rolling deployment verdicts on a checkpoint "
                                                         "world (no grid needed; --quick: a smoke plan)")
    p.add_argument("--replicates", type=int, default=None, help="--rolling: replicate worlds per drift (default 40)")
    p.add_argument("--sizes", default=None, help="--rolling: planted drifts, comma-separated (default 0,0.25,0.5)")
    p.add_argument("--population", action="store_true",
                   help="only compute the population values of the grid's own world and budget (cached in "
                        "<data.root>/population.json; the report's \"world's own value\")")
    p.add_argument("--effect", type=float, default=None, help="--plan: the effect to detect (the metric's units, "
                                                              "e.g. 0.005 = 0.5 NDCG@10 points)")
    p.add_argument("--sd", type=float, default=None, help="--plan: SD over test users of the per-user difference")
    p.add_argument("--seed-sd", type=float, default=0.0, help="--plan: SD over training seeds of a run's mean "
                                                              "difference (default 0)")
    p.add_argument("--from", dest="from_dir", default=None, help="--plan: read --sd / --seed-sd from a calibrate "
                                                                 "folder's calibration.json (t2_popular's)")
    p.add_argument("--seeds", default="1,2,3,5,10", help="--plan: numbers of training seeds to plan for")
    p.add_argument("--power", type=float, default=0.8, help="--plan: the power wanted (default 0.8)")
    p.add_argument("--alpha", type=float, default=0.05, help="--plan: two-sided level (default 0.05)")
    add_overrides(p)
    add_executor_args(p)
    p.set_defaults(func=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    if args.plan:
        return _plan(args)
    if args.rolling:
        return _rolling(args)
    if args.population:
        return _population(args)
    if not args.config or not args.out:
        raise ConfigError("mmgrid calibrate: give a grid and --out DIR (e.g. `mmgrid calibrate demo --out "
                          "runs/calibrate`), or --plan.")
    # lazy: the study imports pandas, scipy and (in its jobs) torch; `mmgrid --help` must not
    from mmgrid.render.calibration import write_calibration
    from mmgrid.sweep.calibration.study import run_calibration

    cfg = load_config(args.config, (QUICK if args.quick else []) + list(args.overrides or []), command="calibrate")
    if cfg.world is None:
        raise ConfigError(f"mmgrid calibrate: grid {cfg.name!r} has no world: section; calibration needs the "
                          "synthetic world (e.g. grids/demo.yaml).")
    # lazy: torch (~1-3.5 s), as the study's imports above
    from mmgrid.runtime.preflight import preflight

    # models, devices, Ray before any world is written (each replicate writes and prepares its own data)
    preflight(cfg, "calibrate", executor=args.executor, address=args.address, skip=("data", "sizes", "disk"))
    ex = executor_from_args(args, cfg)
    try:
        res = run_calibration(cfg, args.out, executor=ex)
    finally:
        ex.shutdown()
    md = write_calibration(res, cfg)
    for row in res.table():
        print(f"{row['finding']:<12} size {row['size']:<4g} population {row['population']:.3f}  holds {row['holds']}  "
              f"coverage {row['coverage']}  MDE {row['mde_80']:.3f}")
    print(f"calibration written to {md}")
    return 0


def _rolling(args: argparse.Namespace) -> int:
    if not args.out:
        raise ConfigError("mmgrid calibrate --rolling: give --out DIR (e.g. --out runs/rolling-cal).")
    import dataclasses  # lazy: as the study below

    # lazy: the study imports pandas, scipy and torch; `mmgrid --help` must not
    from mmgrid.render.calibration import write_rolling_calibration
    from mmgrid.sweep.calibration.rolling import SMOKE, RollingPlan, run_rolling_calibration

    plan = SMOKE if args.quick else RollingPlan()
    if args.replicates is not None:
        plan = dataclasses.replace(plan, replicates=args.replicates)
    if args.sizes is not None:
        try:
            sizes = tuple(float(x) for x in args.sizes.split(","))
        except ValueError as exc:
            raise ConfigError(f"--sizes {args.sizes!r}: give drifts separated by commas, e.g. 0,0.25,0.5.") from exc
        plan = dataclasses.replace(plan, sizes=sizes)
    plan.check()
    res = run_rolling_calibration(plan, args.out)
    write_rolling_calibration(plan, res, args.out)
    for row in res["rows"]:
        print(f"{row['key']:<5} drift {row['size']:<5g} holds {row['holds_text']}  difference {row['diff_mean']:+.4f}  "
              f"MDE {row['mde_mean']:.4f}")
    print(f"calibration written to {args.out}/rolling_calibration.md")
    return 0


def _population(args: argparse.Namespace) -> int:
    if not args.config:
        raise ConfigError("mmgrid calibrate --population: give a grid, e.g. `mmgrid calibrate demo --population`.")
    # lazy: as in _calibrate
    from mmgrid.sweep.calibration.population import world_population

    cfg = load_config(args.config, (QUICK if args.quick else []) + list(args.overrides or []), command="calibrate")
    if cfg.world is None:
        raise ConfigError(f"mmgrid calibrate --population: grid {cfg.name!r} has no world: section.")
    ex = executor_from_args(args, cfg)
    try:
        pop = world_population(cfg, executor=ex)
    finally:
        ex.shutdown()
    print(f"population values ({pop.get('worlds')} world(s), {pop.get('user_scale')}x users, seeds {pop.get('seeds')}):")
    for d, by in sorted((pop.get("lambda_star") or {}).items()):
        print(f"  {d}: lambda* " + ", ".join(f"{g} {v:.2f}" for g, v in sorted(by.items()) if v is not None))
    for k in ("t4_rho", "f5_not1", "f5_varies", "t2_popular"):
        if pop.get(k) is not None:
            print(f"  {k}: {pop[k]:.4f}")
    print(f"cached in {cfg.data.root}/population.json")
    return 0


def _read_calibration_json(path: Any) -> dict:
    """A calibrate folder's calibration.json as a mapping, or a named error (not JSON, not an object, unreadable)."""
    import json  # lazy: as in _plan

    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--from: {path} is not a readable calibration.json ({exc}); point --from at the folder "
                          "`mmgrid calibrate --out` wrote, or give --sd and --seed-sd.") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--from: {path} holds a JSON {type(data).__name__}, not the object `mmgrid calibrate` "
                          "writes; point --from at a calibrate folder, or give --sd and --seed-sd.")
    return data


def _sd_value(v: Any, key: str, path: Any) -> float | None:
    """One SD read from calibration.json: None when absent, else a finite number >= 0 (else a named error)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"--from: {path}: {key} is {v!r}, not a finite number >= 0; rerun `mmgrid calibrate` "
                          "to write it again, or give --sd and --seed-sd.")
    return float(v)


def _plan(args: argparse.Namespace) -> int:
    # lazy: json and the power module are only needed by --plan; `mmgrid --help` loads neither
    import json
    from pathlib import Path
    from mmgrid.stats.power import plan_design, z_sum

    sd, seed_sd = args.sd, args.seed_sd
    if args.from_dir:
        path = Path(args.from_dir) / "calibration.json"
        if not path.exists():
            raise ConfigError(f"--from {args.from_dir}: no calibration.json there; run `mmgrid calibrate` first.")
        data = _read_calibration_json(path)
        sds = data.get("t2_sd") or {}
        if not isinstance(sds, dict):
            raise ConfigError(f"--from {args.from_dir}: {path}'s t2_sd is a {type(sds).__name__}, not a mapping of "
                              "user / seed SDs; rerun `mmgrid calibrate` to write it again, or give --sd and --seed-sd.")
        sd = sd if sd is not None else _sd_value(sds.get("user"), "t2_sd.user", path)
        if not seed_sd:
            seed_sd = _sd_value(sds.get("seed"), "t2_sd.seed", path)
            if seed_sd is None:
                print(f"note: {path} has no seed-to-seed SD (its replicates had one training seed); assuming 0, "
                      "which understates what a design needs; give --seed-sd")
                seed_sd = 0.0
    if args.effect is None or sd is None:
        raise ConfigError("mmgrid calibrate --plan: give --effect and --sd (or --from a calibrate folder), e.g. "
                          "--plan --effect 0.005 --sd 0.2.")
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError as exc:
        raise ConfigError(f"--seeds {args.seeds!r}: give numbers separated by commas, e.g. 1,3,5.") from exc
    if not seeds or any(not 1 <= n <= 10_000 for n in seeds):
        raise ConfigError(f"--seeds {args.seeds!r}: each number of seeds must lie in [1, 10000], e.g. 1,3,5.")
    if not math.isfinite(args.effect) or not math.isfinite(sd) or (seed_sd is not None and not math.isfinite(seed_sd)):
        raise ConfigError(f"--effect {args.effect}, --sd {sd}, --seed-sd {seed_sd}: give finite numbers.")
    for name, v in (("--power", args.power), ("--alpha", args.alpha)):
        if not 0 < v < 1:
            raise ConfigError(f"{name} {v}: must lie strictly between 0 and 1.")
    if not sd > 0 or seed_sd < 0:
        raise ConfigError(f"--sd {sd} must be > 0 and --seed-sd {seed_sd} >= 0.")
    if not args.effect:
        raise ConfigError("--effect 0: no sample detects a zero effect; give the smallest effect that matters.")
    plan = plan_design(args.effect, sd, seed_sd, seeds, args.alpha, args.power)
    print(f"to detect |effect| >= {abs(args.effect):g} at {args.power:.0%} power (two-sided, alpha {args.alpha:g}); "
          f"per-user SD {sd:g}, seed SD {seed_sd:g}:")
    for p in plan:
        if p.n_users is None:
            print(f"  {p.n_seeds:>3} seed(s): not reachable - the seeds alone leave an MDE of {p.mde:.4g}; add seeds")
        else:
            print(f"  {p.n_seeds:>3} seed(s): {p.n_users:,} test users (SE {p.se:.4g})")
    if all(p.n_users is None for p in plan) and seed_sd > 0:
        need = math.floor(seed_sd ** 2 / (abs(args.effect) / z_sum(args.alpha, args.power)) ** 2) + 1
        print(f"  at least {need} seeds are needed before users can help")
    return 0
