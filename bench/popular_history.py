"""What most-popular loses by ranking each user's own history, on a calibrate world (no training).

Prepared data holds one interaction per (user, item), so a history item is never the test target, and
every paradigm skips them (``exclude_history``). This benchmark writes one calibrate replicate's world
(``mmgrid calibrate``'s world seed and planted size), prepares it, and evaluates most-popular both ways on
the test window of every domain: the shared top-K (``eval.popular_exclude_history: false``) and the
top-K with each user's history left out (the default), with how many of the shared top 10 lie in the
user's history. It is the measurement behind docs/calibration.md's "What the null world zeroes".

Usage::

    python bench/popular_history.py                      # the null world (size 0), world seed 1000
    python bench/popular_history.py --size 1 --world-seed 1000 --out /tmp/pophist

Cost: seconds (a world and its preparation; nothing is trained).
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


def main() -> int:
    from mmgrid.config import grid_from_dict, load_grid
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.eval.grid import grid_evaluator
    from mmgrid.eval.popular import popular_ranking
    from mmgrid.runtime.progress import set_quiet
    from mmgrid.sweep.calibration.replicate import replicate_grid

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=float, default=0.0, help="planted size (0: the null world of every finding)")
    ap.add_argument("--world-seed", type=int, default=1000, help="world seed (calibrate's first replicate: 1000)")
    ap.add_argument("--out", default="runs/bench-popular-history", help="world and prepared data go here")
    ap.add_argument("--record", default="popular_history", help="bench/results/NAME.md")
    args = ap.parse_args()
    set_quiet(True)
    cfg = grid_from_dict(replicate_grid(load_grid("demo"), args.size, args.world_seed, Path(args.out).resolve()),
                         where="bench/popular_history.py")
    if not (Path(cfg.data.root) / "truth.json").exists():
        write_world(cfg.data.root, cfg.world)
    prepared = prepare(cfg, log=lambda m: None)
    phases = list(cfg.eval.popular_phases or cfg.train.stages)
    print(f"demo grid, planted size {args.size:g}, world seed {args.world_seed}, test window, every example; "
          f"counts over {phases}\n")
    print("| domain | examples | N@10 shared | N@10 history left out | difference | R@10 shared | "
          "R@10 history left out | shared top 10 in the history (mean) |")
    print("|---|---|---|---|---|---|---|---|")
    for d in sorted(prepared.domains):
        dom = prepared.domain(d)
        ev = grid_evaluator(None, dom, cfg)
        counts = dom.popularity(phases)
        k = max(cfg.eval.ks)
        shared, own = ev.evaluate_ranked(popular_ranking(counts, k)), ev.evaluate_ranked(
            popular_ranking(counts, k, ev.histories))
        top10 = set(popular_ranking(counts, 10).tolist())
        in_hist = float(np.mean([len(top10 & set(h)) for h in ev.histories]))
        a, b = shared["all"], own["all"]
        print(f"| {d} | {ev.n} | {a['ndcg@10']:.4f} | {b['ndcg@10']:.4f} | {b['ndcg@10'] - a['ndcg@10']:+.4f} | "
              f"{a['recall@10']:.4f} | {b['recall@10']:.4f} | {in_hist:.2f} |")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from record import run_recorded  # bench/record.py: writes bench/results/popular_history.md (--record NAME: NAME.md)

    run_recorded(main, "popular_history")
