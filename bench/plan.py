"""Does ``mmgrid plan`` predict the demo's stage times? Predicted against measured, per stage.

On the quick demo (``mmgrid demo --quick``'s grid: 2 domains, 2 training seeds, 256 examples a
stage, one epoch each; 58 stages and the tiny base) in a temporary folder, one job at a time in
this process (``exec.workers=1``), one torch thread:

1. the synthetic world is written and prepared;
2. ``mmgrid plan``'s cost model predicts every stage's training time from this machine's
   throughput, measured afresh (``measured(refresh=True)``: a few AdamW steps of the tiny base);
3. the grid is built, and each stage's measured training time is read back from its checkpoint's
   manifest (``meta.train_log.seconds``: the training loop, as the plan's estimate covers it);
4. the table: per (paradigm, stage, variant) the mean predicted and measured seconds and their
   ratio, how many of the 58 stages are within 2x, and the whole build's wall time (which adds
   loading, building and storing each stage: not in the estimate) against the predicted sum.

Usage::

    python bench/plan.py            # ~1-3 min on a 2-core machine

Target: each stage's prediction within 2x of its measured time.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUICK = [  # mmgrid.demo.QUICK_OVERRIDES' training part
    "world.n_domains=2", "world.scale=0.5", "data.lm_text_docs=1500", "base.lm_epochs=1",
    "train.epochs={pretrain: 1, p1: 1, p2: 1}", "train.max_examples=256", "train.seeds=[0, 1]",
    "exec.workers=1", "train.threads=1",
]


def main() -> int:
    from mmgrid.config import load_grid
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.registry.api import Registry
    from mmgrid.runtime.cost import cost_plan, plan_inputs
    from mmgrid.runtime.throughput import measured
    from mmgrid.train.build import build_grid

    tmp = tempfile.TemporaryDirectory(prefix="mmgrid-bench-plan-")
    root = Path(tmp.name)
    cfg = load_grid("demo", QUICK + [f"data.root={root / 'world'}", f"prepared={root / 'prepared'}",
                                     f"registry={root / 'registry'}"])
    write_world(cfg.data.root, cfg.world)
    prepare(cfg, log=lambda *_a, **_k: None)
    t0 = time.perf_counter()
    tp = measured(cfg.train.threads, refresh=True)
    calib = time.perf_counter() - t0
    plan = cost_plan(plan_inputs(cfg, tp))
    print(f"throughput: {tp.source} (measured in {calib:.1f} s)")
    predicted = {(j["variant"], j["paradigm"], j["domain"], j["stage"], j["seed"]): j["estimate_seconds"]
                 for r in plan.rows if r.kind == "stage" for j in r.jobs}
    base_pred = next(r.seconds for r in plan.rows if r.kind == "base")

    t0 = time.perf_counter()
    res = build_grid(cfg, progress=False)
    wall = time.perf_counter() - t0
    reg = Registry.open(cfg.registry)
    rows: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    within = 0
    for s in res.stages:
        m = reg.get(s.id)
        got = float(m.meta["train_log"]["seconds"])
        want = predicted[(s.variant, s.paradigm, s.domain, s.stage, s.seed)]
        rows[(s.paradigm, s.stage, s.variant)].append((want, got))
        within += int(0.5 <= want / got <= 2.0)
    print(f"\nquick demo: {len(res.stages)} stages + the tiny base, built in {wall:.1f} s "
          f"(one job at a time, one torch thread)\n")
    print(f"{'paradigm stage [variant]':34s} {'n':>3s} {'predicted s':>12s} {'measured s':>11s} {'pred/meas':>10s}")
    worst = []
    for (par, stage, var), pairs in sorted(rows.items()):
        p = sum(a for a, _ in pairs) / len(pairs)
        g = sum(b for _, b in pairs) / len(pairs)
        worst += [a / b for a, b in pairs]
        name = f"{par} {stage}" + ("" if var == "default" else f" [{var}]")
        print(f"{name:34s} {len(pairs):3d} {p:12.2f} {g:11.2f} {p / g:10.2f}")
    loop = sum(b for pairs in rows.values() for _, b in pairs)
    pred = sum(a for pairs in rows.values() for a, _ in pairs)
    print(f"\nstages within 2x of their measured training time: {within} of {len(res.stages)}; "
          f"ratio predicted/measured per stage: min {min(worst):.2f}, max {max(worst):.2f}")
    print(f"sum of the stages' training loops: predicted {pred:.1f} s, measured {loop:.1f} s ({pred / loop:.2f}x)")
    print(f"whole build (base, and loading, building and storing each stage as well): predicted {pred + base_pred:.1f} s "
          f"of training, measured {wall:.1f} s wall")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MMGRID_QUIET", "1")
    from record import run_recorded  # bench/record.py: writes bench/results/plan.md

    run_recorded(main, "plan")
