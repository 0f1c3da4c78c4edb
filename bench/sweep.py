"""Cost of a 21-point temporal sweep: in place vs materialise-and-reload per point.

Both ways evaluate the same theta(lambda) = theta_t1 + lambda (theta_t2 - theta_t1)
(MMGRid Eq. 10) for lambda = 0.00, 0.05, ..., 1.00 on the same domain, in the same run:

* baseline ("materialise"): per point, merge the two registry checkpoints into a state
  dict, write it as a registry checkpoint (safetensors + manifest), load it back,
  rebuild the model with ``paradigm.load`` and evaluate with a fresh evaluator;
* mmgrid ("in place"): read both checkpoints once, build the model and the evaluator
  once, then per point write theta(lambda) into the live tensors and evaluate.

Usage:
    python bench/sweep.py [CONFIG] [KEY=VALUE ...]    # a built grid (default: runs/demo-quick)

With no built grid at that config's registry, it runs ``mmgrid demo --quick``'s build
first (a minute or two). Prints wall times and their ratio; asserts nothing.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path


def _config(argv: list[str]):
    from mmgrid.cli.demo import demo_config

    if argv and not argv[0].count("="):
        from mmgrid.config import load_grid

        return load_grid(argv[0], argv[1:])
    cfg, _ = demo_config(True, None, "demo", argv)
    return cfg


def _ensure_grid(cfg) -> None:
    from mmgrid.registry import Registry

    reg = Registry.open(cfg.registry)
    if not reg.query(paradigm=cfg.sweeps.temporal.paradigm, kind="trained").empty:
        return
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.train.build import build_grid

    print("no built grid found: building the quick demo grid first ...", flush=True)
    if cfg.world is not None:
        write_world(cfg.data.root, cfg.world)
    prepare(cfg)
    build_grid(cfg, progress=False)


def main(argv: list[str]) -> int:
    import torch

    from mmgrid.data.dataset import load_prepared
    from mmgrid.paradigms import get_paradigm
    from mmgrid.registry import Registry
    from mmgrid.runtime.checkpoints import load_checkpoint
    from mmgrid.sweep.evaluation import default_evaluator_factory, paradigm_params
    from mmgrid.sweep.interpolate import InPlaceInterpolator, interpolate_state
    from mmgrid.sweep.selection import lambda_grid
    from mmgrid.sweep.temporal import period_ids, periods

    cfg = _config(argv)
    _ensure_grid(cfg)
    reg, prepared = Registry.open(cfg.registry), load_prepared(cfg.prepared)
    t = cfg.sweeps.temporal
    domain = (t.domains or prepared.domains)[0]
    lambdas = lambda_grid(0.0, 1.0, 0.05)
    name, par, data = t.paradigm, get_paradigm(t.paradigm), prepared.domain(domain)
    params = paradigm_params(cfg, name)
    p1, p2 = period_ids(reg, name, t.variant, domain, periods(cfg))
    torch.set_num_threads(max(1, torch.get_num_threads()))

    # baseline: materialise a checkpoint per point, reload it, rebuild, evaluate
    scratch = Path(tempfile.mkdtemp(prefix="mmgrid-bench-"))
    try:
        sreg = Registry.open(scratch / "reg", durable=False)
        t0 = time.perf_counter()
        base_scores = []
        for lam in lambdas:
            ck1, ck2 = load_checkpoint(reg, p1), load_checkpoint(reg, p2)
            state = interpolate_state(ck1.state, ck2.state, lam)
            meta = {**ck2.meta, "added_rows": {k: [v[0], list(v[1])] for k, v in ck2.added_rows.items()}}
            cid = sreg.put(state, {"paradigm": name, "domain": domain, "period": f"lam{lam:g}"}, "merged",
                           params={"lam": lam}, files=ck2.files, meta=meta)
            model = par.load(load_checkpoint(sreg, cid), data, params)
            evaluate = default_evaluator_factory(cfg, name, par, data, prepared)
            with torch.no_grad():
                base_scores.append(evaluate(model)["all"]["ndcg@10"])
        t_base = time.perf_counter() - t0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    # mmgrid: load once, evaluator once, apply in place
    t0 = time.perf_counter()
    ck1, ck2 = load_checkpoint(reg, p1), load_checkpoint(reg, p2)
    model = par.load(ck2, data, params)
    evaluate = default_evaluator_factory(cfg, name, par, data, prepared)
    interp = InPlaceInterpolator(model, ck1.state, ck2.state)
    ours = []
    with torch.no_grad():
        for lam in lambdas:
            interp.apply(lam)
            ours.append(evaluate(model)["all"]["ndcg@10"])
    t_ours = time.perf_counter() - t0

    diff = max(abs(a - b) for a, b in zip(base_scores, ours))
    print(f"21-point temporal sweep, paradigm {name}, domain {domain}, {len(lambdas)} points, "
          f"{interp.n_changed} tensors moved by lambda")
    print(f"  materialise + reload per point (baseline): {t_base:8.2f} s  ({t_base / len(lambdas) * 1000:.0f} ms/point)")
    print(f"  in place, inputs and evaluator once:       {t_ours:8.2f} s  ({t_ours / len(lambdas) * 1000:.0f} ms/point)")
    print(f"  speed-up: {t_base / t_ours:.2f}x   (max |NDCG@10 difference| between the two: {diff:.2e})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from record import recorded  # bench/record.py: writes bench/results/sweep.md

    with recorded("sweep"):
        rc = main(sys.argv[1:])
    sys.exit(rc)
