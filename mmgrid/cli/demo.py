"""``mmgrid demo`` and ``mmgrid validate``: the embedded default end to end.

``mmgrid demo`` runs, on the synthetic world and the tiny base, every step a researcher
runs at paper scale: world → prepare → build (all paradigms x domains x stages, plus the
regularizer variants) → baseline table → temporal and cross-domain merge sweeps →
lambda* prediction → continual merging against lambda scaling (Table 3's continual rows,
on every training seed of :data:`CONTINUAL_SEEDS`) → report. Every step is cached, so a second run only re-renders.
``--quick`` shrinks the world and the training so that the whole chain runs in about a
minute (CI runs it).
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from mmgrid.cli.context import grid_source, load_source, save_run
from mmgrid.cliargs import add_overrides

# --quick: fewer domains, fewer users, fewer steps, two training seeds; still every step of the study.
QUICK_OVERRIDES = [
    "world.n_domains=2",
    "world.scale=0.5",
    "data.lm_text_docs=1500",
    "base.lm_epochs=1",
    "train.epochs={pretrain: 1, p1: 1, p2: 1}",
    "train.max_examples=256",
    "train.seeds=[0, 1]",
    "eval.max_users=100",
    "sweeps.temporal.step=0.25",
    "sweeps.cross_domain.paradigms=[emb]",
    "sweeps.cross_domain.alphas=[0.5]",
    "sweeps.cross_domain.methods={average: {}, ties_dare: {p: 0.1, density: 0.2}}",
    "sweeps.cross_domain.bases=[original, neutral]",
]


# the training seeds of the continual-merging step (`mmgrid sweep continual`): None = every seed of the grid.
# Its cost on the 2-core machine: docs/merging.md, "Continual merging in the temporal study".
CONTINUAL_SEEDS: list[int] | None = None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a grid YAML (schema, names, phases) without running or downloading anything",
        description="Load a grid YAML with safe_load, apply overrides, and validate every section.",
    )
    p.add_argument("config", help="grid YAML, a packaged grid name such as demo or amazon2023, or a run folder")
    add_overrides(p)
    p.set_defaults(func=_validate)

    d = sub.add_parser(
        "demo",
        help="run the whole study on the embedded synthetic world (CPU, minutes)",
        description=(
            "world -> prepare -> build -> baseline table -> temporal and cross-domain sweeps -> "
            "lambda* prediction -> continual merging (MagMax, OPCM, DOP, TA, TIES) vs lambda scaling -> report, "
            "on grids/demo.yaml. Cached: a rerun only redoes what changed."
        ),
    )
    d.add_argument("--quick", action="store_true", help="smaller world and training: the whole chain in about a minute")
    d.add_argument("--out", default=None, help="output folder (default runs/demo, or runs/demo-quick with --quick)")
    d.add_argument("--config", default="demo", help="grid YAML to run (default: the packaged demo grid)")
    d.add_argument("--rolling", action="store_true",
                   help="instead: a short rolling deployment (grids/rolling.yaml cut to four quarters, two domains, "
                        "the emb paradigm): world, prepare, build, `sweep rolling`, report.md with its 'Deployment "
                        "over time' section (default out runs/rolling-demo; a few minutes)")
    add_overrides(d)
    d.set_defaults(func=_demo)


def _validate(args: argparse.Namespace) -> int:
    # lazy: the validation pass imports every registry of names (paradigms, regularizers, merge
    # methods: torch ~3.5 s), which `mmgrid --help` must not pay (python -X importtime -m mmgrid --help)
    from mmgrid.validate import validate_grid

    cfg = load_source(grid_source(args.config, command="validate"), args.overrides)
    for w in validate_grid(cfg):
        print(f"warning: {w}")
    print(f"{args.config}: valid grid {cfg.name!r} (hash {cfg.hash()})")
    return 0


@contextmanager
def _step(name: str, timings: dict[str, float]) -> Iterator[None]:
    print(f"\n== {name}", flush=True)
    t0 = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - t0
    print(f"   ({timings[name]:.1f} s)", flush=True)


def demo_config(quick: bool, out: str | None, config: str = "demo", overrides: list[str] | None = None):
    """The demo's grid config with the output folders under ``out``."""
    # lazy: mmgrid.config imports yaml; kept out of `mmgrid --help` with the rest of the demo
    from mmgrid.config import load_grid

    out_dir = Path(out or ("runs/demo-quick" if quick else "runs/demo"))
    paths = [f"data.root={out_dir / 'world'}", f"prepared={out_dir / 'prepared'}", f"registry={out_dir / 'registry'}"]
    extra = (QUICK_OVERRIDES if quick else []) + paths + list(overrides or [])
    return load_grid(config, extra), out_dir


def run_demo(quick: bool = False, out: str | None = None, config: str = "demo", overrides: list[str] | None = None) -> Path:
    """Run the whole demo; returns the path of the written report."""
    # lazy: `mmgrid --help` imports this module to register `demo`; the demo runs everything
    # (torch ~3.5 s, transformers, polars, matplotlib; python -X importtime -m mmgrid --help)
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.stats import format_stats
    from mmgrid.data.world_files import write_world
    from mmgrid.eval.grid import evaluate_and_tabulate
    from mmgrid.exec.args import executor_from_config
    from mmgrid.registry.api import Registry
    from mmgrid.sweep.continual import evaluate_continual
    from mmgrid.sweep.crossdomain import run_cross_domain
    from mmgrid.sweep.lambda_model import extend_temporal, predict_lambda
    from mmgrid.render.report import write_report
    from mmgrid.sweep.temporal import run_temporal
    from mmgrid.train.build import build_grid
    from mmgrid.validate import validate_grid

    cfg, out_dir = demo_config(quick, out, config, overrides)
    validate_grid(cfg)
    save_run(cfg, out_dir, "demo")  # follow-ups name out_dir (or its registry) instead of repeating the overrides
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    with _step("world", timings):
        assert cfg.world is not None
        root = write_world(cfg.data.root, cfg.world)
        print(f"   synthetic Amazon-2023-format world in {root}")
    with _step("prepare", timings):
        prepared = prepare(cfg)
        print(format_stats(prepared.stats()))
    # one executor for every step (exec.workers: the demo grid uses one worker process per CPU),
    # so the workers start once and keep their loaded data between steps
    executor = executor_from_config(cfg)
    try:
        with _step("build", timings):
            build_grid(cfg, executor=executor)
        reg = Registry.open(cfg.registry_root)
        with _step("baselines (Table 2)", timings):
            print(evaluate_and_tabulate(cfg, registry=reg, prepared=prepared, executor=executor))
            made = demo_aliases(cfg, reg)
            best = {k: v[:12] for k, v in made.items() if k.endswith("-best")}
            print(f"   aliases: {len(made)} (DOMAIN-PARADIGM-STAGE, e.g. books-emb-p2; and {best})")
        with _step("temporal sweep", timings):
            run_temporal(cfg, reg, prepared, executor=executor)
            # sweeps.temporal.extend_steps: grow the grid past an edge lambda*
            extend_temporal(cfg, reg, prepared, executor=executor)
        with _step("cross-domain sweep", timings):
            run_cross_domain(cfg, reg, prepared, executor=executor)
        with _step("lambda* prediction", timings):
            predict_lambda(cfg, reg, prepared)
        # after the prediction: lambda_hat* (where recorded) is one of the strategies the verdict compares
        with _step("continual merging", timings):
            cells = evaluate_continual(cfg, reg, prepared, executor=executor, seeds=CONTINUAL_SEEDS)
            print(f"   {cells} (seed, domain) cells: MagMax, OPCM, DOP, task arithmetic, TIES vs lambda scaling "
                  "(Table 3's continual rows)")
    finally:
        executor.shutdown()
    with _step("report", timings):
        report = write_report(cfg, reg, prepared, out_dir, html=True)  # report.md and the interactive report.html
    total = time.perf_counter() - t0
    print("\n" + "  ".join(f"{k}: {v:.1f}s" for k, v in timings.items()))
    print(f"demo finished in {total:.1f} s; report: {report} (interactive: {report.with_name('report.html')})")
    return report


def demo_aliases(cfg, reg) -> dict[str, str]:  # noqa: ANN001 - GridConfig, Registry imported lazily
    """Point the aliases the README's examples use at this run's checkpoints (lower-case domain
    names; the default row, seed-0 replicate):

    * ``DOMAIN-PARADIGM-STAGE``: the trained checkpoint of that cell (``books-emb-p2``);
    * ``DOMAIN-best``: the trained last-stage checkpoint with the highest test Recall@10 on its
      domain (ties: the first paradigm of ``paradigms``).
    """
    trained = reg.query(kind="trained", variant="default")
    if trained.empty:
        return {}
    seeds = trained["seed"].dropna()
    first = int(seeds.min()) if not seeds.empty else None
    out = {}
    for r in trained.sort_values("created").itertuples():
        if first is not None and r.seed == r.seed and int(r.seed) != first:
            continue
        if r.paradigm in cfg.paradigms and r.period in cfg.train.stages:
            out[f"{str(r.domain).lower()}-{r.paradigm}-{r.period}"] = r.id
    t2 = cfg.train.stages[-1]
    res = reg.results(split=cfg.eval.split, group="all", metric="recall@10", kind="trained", period=t2,
                      variant="default")
    res = res[res["paradigm"].isin(cfg.paradigms)] if not res.empty else res
    if first is not None and not res.empty:
        res = res[res["seed"] == first]
    order = {p: i for i, p in enumerate(cfg.paradigms)}
    for dom, rows in (res.groupby("domain") if not res.empty else []):
        rows = rows.assign(_o=rows["paradigm"].map(order)).sort_values(["value", "_o"], ascending=[False, True])
        out[f"{str(dom).lower()}-best"] = rows.iloc[0]["id"]
    return {name: reg.alias(name, cid) for name, cid in out.items()}


# `mmgrid demo --rolling`: grids/rolling.yaml cut short (four incremental quarters, two domains, small stages)
ROLLING_OVERRIDES = [
    "world.n_domains=2",
    "world.scale=0.5",
    "data.lm_text_docs=1000",
    "base.lm_epochs=1",
    "train.stages=[pretrain, q1, q2, q3, q4]",
    "train.epochs={pretrain: 2, q1: 1, q2: 1, q3: 1, q4: 1}",
    "train.max_examples=300",
    "eval.activity_phase=q4",
    "eval.max_users=100",
    "eval.groups=[all]",
    "sweeps.temporal.step=0.5",
]


def run_rolling_demo(out: str | None = None, overrides: list[str] | None = None) -> Path:
    """The short rolling deployment run; returns the path of the written report.md."""
    # lazy: as run_demo
    from mmgrid.config import load_grid
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.registry.api import Registry
    from mmgrid.render.report import write_report
    from mmgrid.render.report_rolling import rolling_text
    from mmgrid.sweep.rolling import run_rolling
    from mmgrid.train.build import build_grid
    from mmgrid.validate import validate_grid

    out_dir = Path(out or "runs/rolling-demo")
    paths = [f"data.root={out_dir / 'world'}", f"prepared={out_dir / 'prepared'}", f"registry={out_dir / 'registry'}"]
    cfg = load_grid("rolling", ROLLING_OVERRIDES + paths + list(overrides or []))
    validate_grid(cfg)
    save_run(cfg, out_dir, "demo")
    timings: dict[str, float] = {}
    with _step("world", timings):
        assert cfg.world is not None
        write_world(cfg.data.root, cfg.world)
    with _step("prepare", timings):
        prepared = prepare(cfg)
    with _step("build", timings):
        build_grid(cfg)
    reg = Registry.open(cfg.registry_root)
    with _step("rolling deployment", timings):
        print(rolling_text(run_rolling(cfg, reg, prepared)))
    with _step("report", timings):
        report = write_report(cfg, reg, prepared, out_dir, diagnostics=False)
    print("\n" + "  ".join(f"{k}: {v:.1f}s" for k, v in timings.items()))
    print(f"rolling demo finished; report: {report} (section 'Deployment over time')")
    return report


def _demo(args: argparse.Namespace) -> int:
    if getattr(args, "rolling", False):
        run_rolling_demo(args.out, args.overrides)
        return 0
    run_demo(args.quick, args.out, args.config, args.overrides)
    sys.stdout.flush()
    return 0
