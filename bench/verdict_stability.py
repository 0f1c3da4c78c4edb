"""How far a change of training seeds moves the demo's verdicts: a bound on what another machine can move.

Machines of one kind differ in the last bits of float results; through training those bits act as a
small change of the training noise. A change of training seeds is a larger change of the same noise
(new initialisations, new batch orders, a new shared pretrain), on the same world. This benchmark runs
the demo's own world (its ``world.seed`` and ``world.plant``) through the calibrate replicate pipeline
(docs/calibration.md: world -> prepare -> build emb -> evaluate -> temporal sweep, judged with the
report's rules) once with the demo's training seeds (the baseline, in the same run) and once per other
seed set ``[3k, 3k+1, 3k+2]``, and prints each run's estimates and verdicts and how often each verdict
agrees with the baseline's. A verdict that survives new training seeds on the same world is not one a
machine's last bits can flip; one that flips here is one to read with its calibrated power.

Usage::

    python bench/verdict_stability.py --out runs/stability             # 6 more seed sets, 2 workers
    python bench/verdict_stability.py --sets 2 --out /tmp/st world.scale=0.3 train.max_examples=64

Runs are cached by recipe under ``OUT/replicates/`` (a replicate of ``mmgrid calibrate`` with the same
world, seeds and budget is the same file). Cost: one replicate per seed set, about 170 s each with two
side by side on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and sys.path[0].rstrip("/").endswith("bench"):
    sys.path.pop(0)  # bench/ holds merge.py, registry.py...: never shadow a module name
sys.path.insert(0, str(HERE.parent))  # this checkout's mmgrid, not whichever one is installed


def verdicts(res: dict) -> dict[str, bool]:
    """The report's verdicts ("holds") of one replicate result, as ``mmgrid calibrate`` judges them."""
    from mmgrid.sweep.calibration.measures import all_users_intervals, interval_holds, some_pair_disjoint

    out = {}
    if res.get("t4_rho"):
        out["rho < 0 (Table 4)"] = interval_holds("t4_rho", res["t4_rho"])
    if res.get("f5_not1"):
        out["lambda = 1 not the best (Figure 5)"] = bool(res["f5_not1"]["holds"])
    out["lambda* differs between domains (Figure 5)"] = some_pair_disjoint(all_users_intervals(res))
    if res.get("t2_popular"):
        out["emb beats most-popular (Table 2)"] = interval_holds("t2_popular", res["t2_popular"])
    return out


def leave_one_out_coverage(results: list[dict], domains: list[str]) -> str:
    """Each seed set's non-active lambda* interval against this world's lambda* over the *other* sets' seeds (the
    argmax of their averaged curves, ties to 1): the interval's coverage of the world's value over training
    noise, with the same test users. That target still carries 1/(K - 1) of one set's seed noise (K sets)."""
    import numpy as np

    from mmgrid.stats.power import mcse_rate
    from mmgrid.sweep.calibration.replicate import as_float
    from mmgrid.sweep.selection import select_lambda_star

    lines = ["Each seed set's non-active lambda* interval against the world's lambda* over the other sets' seeds "
             f"(argmax of their averaged curves; {len(results) - 1} sets, {len(results) - 1}x the seeds):", "",
             "| domain | covered | target per left-out set (min / max) |", "|---|---|---|"]
    hits = []
    for d in domains:
        cs = [(r.get("curves") or {}).get(d, {}).get("non_active") for r in results]
        xs = [(r.get("lambda_star") or {}).get(d, {}).get("non_active") for r in results]
        if not all(cs) or not all(xs):
            continue
        got, targets = [], []
        for k, x in enumerate(xs):
            others = np.mean([c["mean"] for j, c in enumerate(cs) if j != k], axis=0)
            t = select_lambda_star(cs[k]["lambdas"], [float(v) for v in others])
            targets.append(t)
            got.append(as_float(x[1]) - 1e-9 <= t <= as_float(x[2]) + 1e-9)
        hits += got
        lines.append(f"| {d} | {sum(got)} of {len(got)} | {min(targets):.2f} / {max(targets):.2f} |")
    if hits:
        lines.append(f"| all | {mcse_rate(hits).text()} | - |")
    return "\n".join(lines)


def main() -> int:
    from mmgrid.config import load_grid
    from mmgrid.exec.args import executor_from_config
    from mmgrid.runtime.gather import gather
    from mmgrid.sweep.calibration.replicate import as_float
    from mmgrid.sweep.calibration.study import calibrate_job

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=6, help="seed sets besides the demo's own (default 6)")
    ap.add_argument("--workers", type=int, default=2, help="replicates run side by side (default 2)")
    ap.add_argument("--out", default="runs/bench-verdict-stability", help="the replicates' cache folder")
    ap.add_argument("--note", default="", help="a sentence printed first (and so recorded), e.g. how the --out "
                                               "folder's cached runs were computed")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the demo grid (every run gets them)")
    args = ap.parse_args()
    if args.note:
        print(f"Note: {args.note}\n")
    base = load_grid("demo", args.overrides)
    n = len(base.train.seed_list)
    sets = [list(base.train.seed_list)] + [[n * k + i for i in range(n)] for k in range(1, args.sets + 1)]
    out = Path(args.out).resolve()
    cfgs = [load_grid("demo", [*args.overrides, f"train.seeds=[{', '.join(map(str, s))}]", f"train.seed={s[0]}",
                               f"exec.workers={args.workers}"]) for s in sets]
    jobs = [calibrate_job(cfg, None, cfg.world.seed, out) for cfg in cfgs]
    print(f"demo world (world seed {base.world.seed}, its own world.plant) through the calibrate replicate pipeline; "
          f"baseline: the demo's seeds {sets[0]}; {len(sets) - 1} other seed set(s); cache {out / 'replicates'}\n")
    t0 = time.perf_counter()
    ex = executor_from_config(cfgs[0])  # exec.workers as asked (every set's exec section is the same)
    try:
        results = gather([ex.submit(j) for j in jobs], None, "seed sets", unit="run", enabled=True)
    finally:
        ex.shutdown()
    wall = time.perf_counter() - t0
    rows = [(s, r, verdicts(r)) for s, r in zip(sets, results)]
    names = list(rows[0][2])
    doms = sorted(rows[0][1].get("lambda_star") or {})
    print("| seeds | rho [95%] | " + " | ".join(f"{d} non-active lambda*" for d in doms) + " | Table 2 difference | "
          + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(doms) + "---|" + "---|" * len(names))
    for s, r, v in rows:
        rho = r.get("t4_rho") or [None] * 3
        lam = [(r["lambda_star"].get(d) or {}).get("non_active") for d in doms]
        t2 = r.get("t2_popular") or [None] * 3
        print(f"| {s} | {as_float(rho[0]):+.2f} [{as_float(rho[1]):+.2f}, {as_float(rho[2]):+.2f}] | "
              + " | ".join(f"{as_float(x[0]):.2f} [{as_float(x[1]):.2f}, {as_float(x[2]):.2f}]" if x else "-"
                           for x in lam)
              + f" | {as_float(t2[0]):+.4f} [{as_float(t2[1]):+.4f}, {as_float(t2[2]):+.4f}] | "
              + " | ".join("holds" if v.get(k) else "inconclusive" for k in names) + " |")
    print(f"\nAgreement with the baseline's verdict over the {len(sets) - 1} other seed set(s):\n")
    print("| finding | baseline | other seed sets agreeing |")
    print("|---|---|---|")
    for k in names:
        same = sum(v.get(k) == rows[0][2][k] for _, _, v in rows[1:])
        print(f"| {k} | {'holds' if rows[0][2][k] else 'inconclusive'} | {same} of {len(rows) - 1} |")
    if len(rows) >= 3:
        print("\n" + leave_one_out_coverage(results, doms))
    secs = [r.get("seconds") for r in results if r.get("seconds")]
    print(f"\n{wall:.0f} s wall in this run (cached runs cost nothing); "
          f"{sum(secs) / max(len(secs), 1):.0f} s per replicate inside its job (mean)")
    print(json.dumps({"seed_sets": sets, "agree": {k: sum(v.get(k) == rows[0][2][k] for _, _, v in rows[1:])
                                                   for k in names}}))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from record import run_recorded  # bench/record.py: writes bench/results/verdict_stability.md

    run_recorded(main, "verdict_stability")
