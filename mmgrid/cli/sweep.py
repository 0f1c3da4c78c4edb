"""CLI sub-commands of the studies (:mod:`mmgrid.sweep`): ``sweep temporal|cross-domain|continual|rolling``,
``predict-lambda``, ``report`` and ``export mlflow``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.cli.context import open_registry, open_study, run_changes, save_run
from mmgrid.cliargs import REGISTRY_HELP, RUN_FILE, add_overrides, add_registry
from mmgrid.errors import ConfigError
from mmgrid.exec.args import add_executor_args, executor_from_args
from mmgrid.exec.base import LocalExecutor

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.data.dataset import PreparedDataset

# lazy: every handler imports the study it runs inside itself, so that `mmgrid --help` (which imports
# this module to register its commands) does not pay for torch (~3.5 s), pandas (~0.8 s), scipy and
# scikit-learn (measured with `python -X importtime -m mmgrid --help`; docs/architecture.md).


def register(sub: argparse._SubParsersAction) -> None:
    """Add this concern's sub-commands to the `mmgrid` parser."""
    sw = sub.add_parser("sweep", help="merge studies: temporal lambda sweeps, cross-domain merges")
    ssub = sw.add_subparsers(dest="study", metavar="STUDY")
    t = ssub.add_parser("temporal", help="theta_t1 + lambda (theta_t2 - theta_t1) per domain (MMGRid Eq. 10)")
    _add_source(t)
    add_overrides(t)
    add_executor_args(t)
    t.set_defaults(func=_temporal)
    c = ssub.add_parser("cross-domain", help="pairs x methods x bases x alpha (MMGRid Eq. 7-8)")
    _add_source(c)
    add_overrides(c)
    add_executor_args(c)
    c.set_defaults(func=_cross_domain)
    k = ssub.add_parser("continual", help="lambda scaling vs continual merging (MagMax, OPCM, DOP, TA, TIES) "
                                          "over pretrain -> t1 -> t2, paired tests vs lambda = 1")
    _add_source(k)
    k.add_argument("--group", default="all",
                   help="user group of the printed table (all, active, non_active)")
    add_overrides(k)
    add_executor_args(k)
    k.set_defaults(func=_continual)
    ro = ssub.add_parser(
        "rolling", help="rolling deployment: after every period each strategy deploys a model on the next window "
                        "from the past only (latest, lambda* from the past, fusers, EMA, MagMax, OPCM, DOP)",
        description="For a grid of N incremental periods (train.stages, each fine-tuned from the previous one), "
                    "deploy after every period t a model on the next window of data.phases, built from the "
                    "checkpoints and windows up to t only: latest (lambda = 1), Eq. 10 at lambda* measured on "
                    "the last window seen, at the mean of the past lambda*, the temporal fusers and EMA (where "
                    "registered), MagMax, OPCM and DOP over the sequence. Every evaluation is recorded with its "
                    "recipe and per-user values (a re-run evaluates only what is missing); prints NDCG@10 per "
                    "window and pooled with 95%% intervals, paired differences to latest with Holm, BWT / FWT / "
                    "forgetting from each strategy's accuracy matrix, and the verdicts. Needs at least a first "
                    "stage and two incremental periods, and a phase after the last stage.")
    _add_source(ro)
    ro.add_argument("--strategy", action="append", default=None, metavar="NAME",
                    help="run only these strategies (repeatable; default: every one whose method is registered)")
    ro.add_argument("--no-matrix", action="store_true",
                    help="evaluate each deployment on its own window only (no accuracy matrix, no BWT/FWT)")
    ro.add_argument("--metric", default=None, help="metric of the printed table (default sweeps.temporal.metric)")
    add_overrides(ro)
    ro.set_defaults(func=_rolling)
    sw.set_defaults(func=lambda a: (sw.print_help(), 0)[1])

    p = sub.add_parser("predict-lambda", help="leave-one-out regression of lambda* on domain statistics (Eq. 11)")
    _add_source(p)
    p.add_argument("--stats", action="append", default=[], metavar="NAME=VALUE",
                   help="statistics of a new domain (e.g. --stats avg_gap_days=300 --stats p_active=0.4): "
                        "answer which lambda to use for it")
    p.add_argument("--level", type=float, default=None,
                   help="coverage of the prediction interval (default sweeps.predict_lambda.level, 0.9)")
    p.add_argument("--no-eval", action="store_true", help="do not evaluate the lambda_hat* models (Table 3)")
    add_overrides(p)
    p.set_defaults(func=_predict)

    r = sub.add_parser("report", help="write DIR/report.md (and with --html DIR/report.html) with the paper's tables "
                                      "and figures",
                       description="Compute every study's results from the registry, then write report.md with its "
                                   "PNG figures (and, with --html, one self-contained interactive report.html). "
                                   "All files are written at once or not at all: a failing section or a full disk "
                                   "leaves the previous report. Exit status 2 when a section failed.")
    _add_source(r)
    r.add_argument("--out", required=True,
                   help="output folder; the report's resolved grid is saved there too (mmgrid-run.yaml), so a "
                        "follow-up can name this folder. A folder that already holds a saved run of another grid "
                        "(the run folder itself, with KEY=VALUE overrides) is refused: a report never rewrites a "
                        "run's saved grid; give the report a folder of its own")
    r.add_argument("--no-diagnostics", action="store_true", help="skip Figure 2 and the task-vector diagnostics")
    r.add_argument("--html", action="store_true",
                   help="also write report.html: the grid as heatmaps with each cell's checkpoint card, the studies "
                        "with their intervals (one file, no network needed to view it)")
    r.add_argument("--keep-going", action="store_true",
                   help="when a section fails, write the others with the failed one marked (still exits 2)")
    r.add_argument("--calibration", metavar="DIR", default=None,
                   help="a `mmgrid calibrate` --out folder: its type-I error, power, coverage and MDE per finding "
                        "become a section of the report (default: the run folder's calibrate/ beside --out, where "
                        "there is one)")
    add_overrides(r)
    r.set_defaults(func=_report)
    _register_export(sub)


SOURCE_HELP = ("a run folder (as `mmgrid demo --out` or `mmgrid build` leave, with mmgrid-run.yaml) or its "
               "registry, a grid YAML, or a packaged grid name such as demo; default: the run of --registry "
               "(or $MMGRID_REGISTRY, or the current folder's run)")


def _add_source(p: argparse.ArgumentParser) -> None:
    """The grid a study runs on: a run folder (its saved config, plus only the overrides given),
    its registry, or a grid YAML; and ``--registry`` (the one rule of :mod:`mmgrid.cliargs`)."""
    p.add_argument("config", nargs="?", default=None, metavar="RUN|CONFIG", help=SOURCE_HELP)
    p.add_argument("--registry", metavar="PATH", default=None, help=REGISTRY_HELP)


def _executor(args: argparse.Namespace, cfg: Any) -> Any:
    """None (run here, in order) for the local executor; else the executor the flags/grid ask for."""
    ex = executor_from_args(args, cfg)
    return None if isinstance(ex, LocalExecutor) else ex


def _temporal(args: argparse.Namespace) -> int:
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.sweep.evidence import robust_stars, temporal_curves
    from mmgrid.sweep.lambda_model import extend_temporal
    from mmgrid.sweep.study_results import lam_text
    from mmgrid.sweep.selection import lambda_stars
    from mmgrid.sweep.temporal import run_temporal, temporal_results

    cfg, reg, prepared = open_study(args)
    df = run_temporal(cfg, reg, prepared, executor=_executor(args, cfg))
    if not extend_temporal(cfg, reg, prepared).empty:  # sweeps.temporal.extend_steps: lambda* on an edge
        df = temporal_results(reg, paradigm=cfg.sweeps.temporal.paradigm, variant=cfg.sweeps.temporal.variant)
    t = cfg.sweeps.temporal
    curves = temporal_curves(reg, t.paradigm, t.variant, t.metric)
    if curves:  # the report's lambda*: seed-averaged curve, 95% interval, (edge) flag
        rs = robust_stars(curves, t.smooth)
        rs["cell"] = [lam_text(r.lambda_star, r.ci_low, r.ci_high, r.on_edge) for r in rs.itertuples()]
        stars = rs.pivot(index="domain", columns="group", values="cell")
    else:
        stars = lambda_stars(df, t.metric).pivot(index="domain", columns="group", values="lambda_star")
    print(f"temporal sweep: {df['lambda'].nunique()} lambdas x {df['domain'].nunique()} domains recorded in {reg.root}")
    print(f"lambda* ({t.metric}, [95% interval], as in report.md):")
    print(stars.to_string(float_format=lambda v: f"{v:.2f}"))
    return 0


def _continual(args: argparse.Namespace) -> int:
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.eval.ranking import GROUPS
    from mmgrid.render.continual import render
    from mmgrid.sweep.continual import run_continual

    if args.group not in GROUPS:  # before any work: the table would be empty after it
        raise ConfigError(f"mmgrid sweep continual --group {args.group!r}: not a user group; choose from "
                          f"{', '.join(GROUPS)}.")
    cfg, reg, prepared = open_study(args)
    print(render(run_continual(cfg, reg, prepared, executor=_executor(args, cfg)), group=args.group))
    return 0


def _rolling(args: argparse.Namespace) -> int:
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.render.report_rolling import rolling_text
    from mmgrid.sweep.rolling import RollingOptions, available, run_rolling, timeline

    cfg, reg, prepared = open_study(args)
    timeline(cfg)  # a grid too short to roll fails here, before any work
    todo = available()
    if args.strategy:
        names = [s.name for s in todo]
        bad = [n for n in args.strategy if n not in names]
        if bad:
            raise ConfigError(f"sweep rolling --strategy: {bad} are not strategies with a registered method; "
                              f"choose from {names}.")
        todo = [s for s in todo if s.name in args.strategy or s.name == "latest"]
    study = run_rolling(cfg, reg, prepared, RollingOptions(strategies=todo, matrix=not args.no_matrix))
    print(rolling_text(study, args.metric))
    return 0


def _cross_domain(args: argparse.Namespace) -> int:
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.sweep.crossdomain import relative_change, run_cross_domain

    cfg, reg, prepared = open_study(args)
    df = run_cross_domain(cfg, reg, prepared, executor=_executor(args, cfg))
    metric = cfg.sweeps.cross_domain.metric
    rel = relative_change(df, metric=metric)
    n = rel["recipe_hash"].nunique() if not rel.empty else 0
    print(f"cross-domain: {n} merged models evaluated on both domains, recorded in {reg.root}")
    if not rel.empty:
        summary = rel.groupby(["paradigm", "method", "base_kind"])["rel_change"].mean() * 100
        print(f"mean % change of {metric} against each domain's own t2 checkpoint:")
        print(summary.to_string(float_format=lambda v: f"{v:+.2f}"))
    return 0


def _parse_stats(items: list[str]) -> dict[str, float]:
    out = {}
    for it in items:
        name, sep, value = it.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise ConfigError(f"--stats {it!r}: expected NAME=NUMBER, e.g. --stats avg_gap_days=300.")
    return out


def _predict(args: argparse.Namespace) -> int:
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.sweep.lambda_model import answer_new_domain, association, check_new_domain_stats, predict_lambda
    from mmgrid.sweep.tables import regression_summary, table4

    # lazy: as the imports above (mmgrid.config loads yaml)
    from mmgrid.config.sweeps import PredictLambdaConfig
    from mmgrid.configtools import check_flag

    check_flag("--level", args.level, PredictLambdaConfig, "level", "sweeps.predict_lambda.level")
    new = _parse_stats(args.stats)
    check_new_domain_stats(new, None)  # values: before anything is opened
    cfg, reg, prepared = open_study(args)
    check_new_domain_stats(new, list(cfg.sweeps.predict_lambda.features))
    pred = predict_lambda(cfg, reg, prepared, evaluate=not args.no_eval and not new)
    print(table4(pred, stars=pred.stars)[0].to_string(float_format=lambda v: f"{v:.3f}"))
    print()
    print(regression_summary(pred).to_string(float_format=lambda v: f"{v:.4g}"))
    sp = association(pred)
    ci = f" [{sp.ci_low:.2f}, {sp.ci_high:.2f}]" if sp.ci_low == sp.ci_low else " (no interval: no per-user values)"
    print(f"Spearman rho({pred.features[0]}, lambda*) = {sp.rho:.3f}{ci} (95% interval: users resampled within each "
          f"domain and seeds), exact permutation p = {sp.pvalue:.3g}: lambda* {pred.direction} as it rises")
    for note in pred.notes:
        print(f"note: {note}")
    if new:
        ans = answer_new_domain(pred, new, args.level if args.level is not None else cfg.sweeps.predict_lambda.level)
        print(f"new domain: lambda*_pred = {ans.lambda_pred:.3f}; use lambda_hat* = {ans.lambda_hat:.3f} "
              f"({ans.level:.0%} prediction interval {ans.low:.3f} .. {ans.high:.3f}, s.e. {ans.se:.3f}, "
              f"fitted on {ans.n_domains} domains)")
    elif pred.evaluated is not None:
        print(f"evaluated lambda_hat* models of {pred.evaluated['domain'].nunique()} domains (study lambda_hat)")
    return 0


def _report(args: argparse.Namespace) -> int:
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.render.report import ReportIncomplete, write_report

    cfg, reg, prepared = open_study(args)
    changed = run_changes(cfg, args.out)
    if changed:  # before anything is computed or written: a report never rewrites a saved run
        raise ConfigError(
            f"mmgrid report: --out {args.out} holds a saved run ({RUN_FILE}) whose grid differs from this report's ("
            + "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
            + "); a report never rewrites a run's saved grid, so later studies there keep using it. Write the report "
            f"to a folder of its own (e.g. --out {Path(args.out) / 'reports' / 'NAME'}: it gets its own {RUN_FILE}, "
            "recording these overrides), or drop the overrides; nothing was written.")
    try:
        path = write_report(cfg, reg, prepared, args.out, diagnostics=not args.no_diagnostics, html=args.html,
                            keep_going=args.keep_going, calibration=args.calibration)
    except ReportIncomplete:
        _save_report_run(cfg, args.out)  # the sections that were written still name their run
        raise
    _save_report_run(cfg, args.out)
    print(f"report written to {path}" + (f" and {path.with_name('report.html')}" if args.html else ""))
    return 0


def _save_report_run(cfg: GridConfig, out: str) -> None:
    """The report folder names its run (`mmgrid sweep temporal DIR` and the like take it): its
    ``mmgrid-run.yaml`` is written when it has none; one already there holds this same grid
    (:func:`_report` refused any other before writing) and is left as it is."""
    if not (Path(out) / RUN_FILE).is_file():
        save_run(cfg, out, "report")


def _register_export(sub: argparse._SubParsersAction) -> None:
    """``mmgrid export mlflow``."""
    ex = sub.add_parser("export", help="export the grid to other tools (mlflow)")
    esub = ex.add_subparsers(dest="target", metavar="TARGET")
    m = esub.add_parser("mlflow", help="every checkpoint and study as MLflow runs (pip install 'mmgrid[mlflow]')",
                        description="Write every checkpoint of the registry as an MLflow run (coordinates and seed as "
                                    "tags, training/merge parameters as params, results with ci_low/ci_high as "
                                    "metrics, lineage as parent runs and tags) and every study as a parent run of "
                                    "the merges it evaluated. Running it again adds only what is new. Browse a local "
                                    "store offline: mlflow ui --backend-store-uri sqlite:///mlflow.db")
    add_registry(m, legacy_root=True)
    m.add_argument("--tracking-uri", required=True,
                   help="MLflow tracking URI, e.g. sqlite:///mlflow.db (a local file: no network)")
    m.add_argument("--experiment", default="mmgrid", help="experiment name (created if missing; default mmgrid)")
    m.set_defaults(func=_export_mlflow)
    ex.set_defaults(func=lambda a: (ex.print_help(), 0)[1])


def _export_mlflow(args: argparse.Namespace) -> int:
    # lazy: see the note at the top of this module (start-up cost of `mmgrid --help`)
    from mmgrid.render.mlflow_export import export_mlflow

    reg = open_registry(args, "export mlflow")
    s = export_mlflow(reg, args.tracking_uri, args.experiment)
    print(f"mlflow export to {args.tracking_uri} (experiment {args.experiment!r}, id {s.experiment_id}): "
          f"{s.runs_created} runs created, {s.runs_found} found again; {s.metrics_logged} metrics, "
          f"{s.params_logged} params, {s.tags_logged} tags logged in {s.seconds:.1f} s")
    return 0
