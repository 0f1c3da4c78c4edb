"""Does ``mmgrid plan`` predict the demo's stage times? Predicted against measured, per stage.

On the quick demo (``mmgrid demo --quick``'s grid: 2 domains, 2 training seeds, 256 examples a
stage, one epoch each; 58 stages and the tiny base) in a temporary folder, one job at a time in
this process (``exec.workers=1``), one torch thread:

1. the synthetic world is written and prepared;
2. ``mmgrid plan``'s cost model predicts every stage's training time from this machine's
   throughput, measured afresh (``measured(refresh=True)``: a few AdamW steps of the tiny base);
3. the grid is built; each stage's training loop (what the plan's estimate covers) is timed in CPU
   time of this process (the plan's throughput is CPU time too, so the machine's other load does
   not enter the comparison), and its wall-clock time is read back from its checkpoint's manifest
   (``meta.train_log.seconds``);
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

QUICK = [  # mmgrid.cli.demo.QUICK_OVERRIDES' training part
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

    import mmgrid.train.stage as stage_mod

    cpu: dict[str, float] = {}
    inner = stage_mod.train_stage

    def timed(task, model, examples, settings, **kw):  # the training loop of one stage, in CPU time
        c0 = time.process_time()
        log = inner(task, model, examples, settings, **kw)
        cpu[kw.get("where", "?")] = time.process_time() - c0
        return log

    stage_mod.train_stage = timed
    t0 = time.perf_counter()
    res = build_grid(cfg, progress=False)
    stage_mod.train_stage = inner
    wall = time.perf_counter() - t0
    reg = Registry.open(cfg.registry)
    # planned again with the built base (its trained vocabulary; what `mmgrid plan RUN` uses) and the same throughput
    again = cost_plan(plan_inputs(cfg, tp))
    print(f"planned before the build ({plan.model_source}); again after it with the stored base ({again.model_source})")
    stored = {(j["variant"], j["paradigm"], j["domain"], j["stage"], j["seed"]): j["estimate_seconds"]
              for r in again.rows if r.kind == "stage" for j in r.jobs}
    rows: dict[tuple[str, str, str], list[tuple[float, float, float]]] = defaultdict(list)
    within = within2 = 0
    walls: list[float] = []
    for s in res.stages:
        m = reg.get(s.id)
        where = f"{s.paradigm}/{s.domain}/{s.stage}" + ("" if s.variant == "default" else f" [{s.variant}]") \
            + f" seed={s.seed}"
        got = cpu[where]
        walls.append(float(m.meta["train_log"]["seconds"]))
        key = (s.variant, s.paradigm, s.domain, s.stage, s.seed)
        want, want2 = predicted[key], stored[key]
        rows[(s.paradigm, s.stage, s.variant)].append((want, got, want2))
        within += int(0.5 <= want / got <= 2.0)
        within2 += int(0.5 <= want2 / got <= 2.0)
    print(f"\nquick demo: {len(res.stages)} stages + the tiny base, built in {wall:.1f} s "
          f"(one job at a time, one torch thread)\n")
    print("mean CPU seconds of a stage's training loop; before: planned before the build, stored: with the built "
          "base\n")
    print(f"{'paradigm stage [variant]':34s} {'n':>3s} {'measured':>9s} {'before':>8s} {'ratio':>6s} "
          f"{'stored':>8s} {'ratio':>6s}")
    worst, worst2 = [], []
    for (par, stage, var), trip in sorted(rows.items()):
        p = sum(a for a, _, _ in trip) / len(trip)
        g = sum(b for _, b, _ in trip) / len(trip)
        p2 = sum(c for _, _, c in trip) / len(trip)
        worst += [a / b for a, b, _ in trip]
        worst2 += [c / b for _, b, c in trip]
        name = f"{par} {stage}" + ("" if var == "default" else f" [{var}]")
        print(f"{name:34s} {len(trip):3d} {g:9.2f} {p:8.2f} {p / g:6.2f} {p2:8.2f} {p2 / g:6.2f}")
    loop = sum(b for trip in rows.values() for _, b, _ in trip)
    pred = sum(a for trip in rows.values() for a, _, _ in trip)
    pred2 = sum(c for trip in rows.values() for _, _, c in trip)
    n = len(res.stages)
    print(f"\nstages within 2x of their measured training time: before {within} of {n} (predicted/measured "
          f"{min(worst):.2f}-{max(worst):.2f}); stored {within2} of {n} ({min(worst2):.2f}-{max(worst2):.2f})")
    print(f"sum of the stages' training loops: measured {loop:.1f} CPU s ({sum(walls):.1f} s wall); predicted "
          f"before {pred:.1f} s ({pred / loop:.2f}x), stored {pred2:.1f} s ({pred2 / loop:.2f}x)")
    print(f"whole build (base, and loading, building and storing each stage as well): predicted {pred + base_pred:.1f} s "
          f"of training, measured {wall:.1f} s wall")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MMGRID_QUIET", "1")
    from record import run_recorded  # bench/record.py: writes bench/results/plan.md

    run_recorded(main, "plan")
