"""``mmgrid compare RUN_A RUN_B``: the same cells of two runs, paired per user (:mod:`mmgrid.sweep.compare.runs`)."""

from __future__ import annotations

import argparse

FILTER_HELP = {"kind": "only checkpoints of this kind (trained, merged, base...)",
               "paradigm": "only this paradigm (text, semid, emb, sasrec, popular)",
               "domain": "only this domain", "period": "only this period (p1, p2...)",
               "variant": "only this variant (default, ...)",
               "study": "only this study's rows (temporal, cross_domain, continual...); none: only the checkpoints' "
                        "own evaluations"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``compare`` to the `mmgrid` parser."""
    p = sub.add_parser(
        "compare", help="compare the same cells of two runs, paired per user, with intervals and Holm",
        description="Pair every evaluated cell of RUN_A with the same cell of RUN_B (study, kind, paradigm, domain, "
        "period, variant and the study's own coordinates as recorded with each evaluation, for one split, user group "
        "and metric; training seeds matched), and print A - B per cell: the mean difference of the per-user values "
        "with its percentile-bootstrap interval (users and seeds resampled), a paired sign-flip p, and Holm's "
        "correction over the cells. Cells that cannot be paired are listed with the reason (in one run only, the "
        "metric in one run only, no seed in common, no per-user values, different users). Where a run holds several "
        "evaluations of a cell and seed, the newest is used. Exit status 1 when no cell can be paired.",
        epilog="example: mmgrid compare runs/lr-1e-3 runs/lr-3e-3 --metric ndcg@10 --kind trained --period p2")
    p.add_argument("run_a", metavar="RUN_A", help="a run folder (with mmgrid-run.yaml) or a registry folder")
    p.add_argument("run_b", metavar="RUN_B", help="the other run, compared as A - B")
    p.add_argument("--metric", default="ndcg@10", help="the metric compared (default ndcg@10)")
    p.add_argument("--split", default="test", help="the evaluation split (default test)")
    p.add_argument("--group", default="all", choices=["all", "active", "non_active"], help="the user group (default all)")
    for k, h in FILTER_HELP.items():
        p.add_argument(f"--{k}", default=None, help=h)
    p.add_argument("--level", type=float, default=0.95, help="the intervals' coverage (default 0.95)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap replicates per cell (default 2000)")
    p.set_defaults(func=_compare)


def _compare(args: argparse.Namespace) -> int:
    # lazy: pandas and scipy (~1-2 s) stay out of `mmgrid --help`
    from mmgrid.query import Grid
    from mmgrid.render.compare import comparison_text
    from mmgrid.sweep.compare.runs import CompareSpec, compare_runs

    spec = CompareSpec(args.metric, args.split, args.group,
                       {k: getattr(args, k) for k in FILTER_HELP if getattr(args, k) is not None},
                       args.level, args.resamples)
    a, b = Grid.open(args.run_a), Grid.open(args.run_b)
    result = compare_runs(a.registry, b.registry, spec, labels=(args.run_a, args.run_b))
    print(comparison_text(result))
    return 0 if not result.rows.empty else 1
