"""The lambda* interval's user part against known truth: fixed models, the run's users as the population.

A run's lambda* interval (``mmgrid.stats.lambda_star.robust_lambda_star``) resamples test users and
training seeds. This benchmark checks the user part where the truth is known: it holds a finished run's
trained models fixed, takes its test users of a group (default: non-active) as the population, and
draws random subsets of them (``--frac`` of the users, without replacement). Each subset's interval
(the same bootstrap, users and seeds resampled) is judged against the lambda* of *all* the users.
A correct 95% interval covers it in about 95% of subsets, a little more because a subset drawn without
replacement from a finite population varies by (1 - frac) less than an independent sample.

Usage::

    python bench/lambda_star_users.py --registry runs/demo/registry       # a finished `mmgrid demo`
    python bench/lambda_star_users.py --registry R --frac 0.25 --trials 40 --group non_active

Cost: seconds to a minute (bootstrap only; nothing is trained).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and sys.path[0].rstrip("/").endswith("bench"):
    sys.path.pop(0)  # bench/ holds merge.py, registry.py...: never shadow a module name
sys.path.insert(0, str(HERE.parent))  # this checkout's mmgrid, not whichever one is installed

import numpy as np


def subsample_coverage(lambdas, values: np.ndarray, frac: float, trials: int, seed: int = 0,
                       n_resamples: int = 400) -> tuple[float, int]:
    """``(lambda* of all users, how many of ``trials`` user subsets' intervals cover it)``.

    Args:
        lambdas: the swept grid.
        values: per-user metric values ``[n_seeds, n_lambdas, n_users]``.
        frac: the share of users in each subset (drawn without replacement).
        trials: subsets.
    """
    from mmgrid.stats.lambda_star import robust_lambda_star
    from mmgrid.sweep.selection import select_lambda_star

    rng = np.random.default_rng(seed)
    full = select_lambda_star(lambdas, values.mean(axis=(0, 2)))  # robust_lambda_star's point estimate (smooth 1)
    n = values.shape[2]
    k = max(2, int(round(frac * n)))
    hits = 0
    for t in range(trials):
        idx = rng.choice(n, k, replace=False)
        r = robust_lambda_star(lambdas, values[:, :, idx], n_resamples=n_resamples, seed=seed * 1000 + t)
        hits += bool(r.ci_low - 1e-9 <= full <= r.ci_high + 1e-9)
    return float(full), hits


def main() -> int:
    from mmgrid.registry.api import Registry
    from mmgrid.stats.power import mcse_rate
    from mmgrid.sweep import evidence as ev

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", required=True, help="a finished run's registry with its temporal sweep")
    ap.add_argument("--paradigm", default="emb", help="the swept paradigm (sweeps.temporal.paradigm)")
    ap.add_argument("--variant", default="default")
    ap.add_argument("--metric", default="ndcg@10")
    ap.add_argument("--group", default="non_active", help="users group: all, active or non_active")
    ap.add_argument("--frac", type=float, default=0.25, help="share of the users in each subset (default 0.25)")
    ap.add_argument("--trials", type=int, default=40, help="subsets per domain (default 40)")
    args = ap.parse_args()
    if not 0 < args.frac < 1:
        ap.error(f"--frac {args.frac}: give a share strictly between 0 and 1")
    curves = ev.temporal_curves(Registry.open(args.registry), args.paradigm, args.variant, args.metric)
    rows = sorted((d, c) for (d, g), c in curves.items() if g == args.group)
    if not rows:
        print(f"no temporal sweep of {args.paradigm}/{args.variant} for group {args.group} in {args.registry}",
              file=sys.stderr)
        return 2
    print(f"{args.paradigm} temporal sweep, {args.metric}, {args.group} users; subsets of {args.frac:.0%} of each "
          f"domain's users, {args.trials} per domain; the models (every training seed) fixed\n")
    print("| domain | seeds x users | lambda* of all users | subsets covering it |")
    print("|---|---|---|---|")
    hits = []
    for i, (d, c) in enumerate(rows):
        full, h = subsample_coverage(c.lambdas, c.values, args.frac, args.trials, seed=i)
        hits += [True] * h + [False] * (args.trials - h)
        print(f"| {d} | {c.values.shape[0]} x {c.values.shape[2]} | {full:.2f} | {h} of {args.trials} |")
    print(f"| all | - | - | {mcse_rate(np.array(hits)).text()} |")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from record import run_recorded  # bench/record.py: writes bench/results/lambda_star_users.md

    run_recorded(main, "lambda_star_users")
