"""One bench cell per paradigm, run by ``bench/train_eval.py`` in a subprocess (with either code path).

Prints one JSON line (prefixed ``BENCH_JSON``) with, per paradigm: training examples/s,
evaluated users/s (first call, which pays one-time loads such as the sentence embedder,
and a second, warm call), wall times and metrics. Written to import from both the current
layout and the one of commit cd8b5a3 (modules moved between them), so the same driver
measures both with the same config.

Usage (normally via the driver)::

    PYTHONPATH=<checkout> python bench/train_eval_cell.py OUT_DIR SEED PARADIGM... [--full] [-- KEY=VALUE ...]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

if sys.path and sys.path[0].rstrip("/").endswith("bench"):
    sys.path.pop(0)  # bench/ holds merge.py, registry.py...: never shadow a module name


def _imports():
    """The functions the cell needs, from whichever layout PYTHONPATH's checkout has."""
    ns = {}
    try:
        from mmgrid.data.world_files import write_world
    except ImportError:  # cd8b5a3
        from mmgrid.data.world import write_world
    try:
        from mmgrid.data.pipeline import prepare
    except ImportError:
        from mmgrid.data.prepare import prepare
    try:
        from mmgrid.runtime.context import open_prepared, open_registry
        from mmgrid.runtime.device import derive_seed, seed_everything, set_threads
    except ImportError:
        from mmgrid.train.context import open_prepared, open_registry
        from mmgrid.train.device import derive_seed, seed_everything, set_threads
    try:
        from mmgrid.train.base_lm import ensure_base as get_base
    except ImportError:
        from mmgrid.models.base import load_base as get_base
    try:
        from mmgrid.runtime.progress import set_quiet

        set_quiet(True)
    except ImportError:
        pass
    try:
        from mmgrid.cli.demo import demo_config
    except ImportError:  # cd8b5a3: mmgrid/cli.py was one module and the demo's config lived in mmgrid/demo.py
        from mmgrid.demo import demo_config
    from mmgrid.eval.ranking import Evaluator
    from mmgrid.paradigms import get_paradigm
    from mmgrid.train.loop import train_stage

    ns.update(locals())
    return ns


def _trained_examples(registry: str) -> float:
    """Training examples of every stored stage (examples x epochs, from each manifest's train log),
    read from the manifest files so that both code paths are counted the same way."""
    n = 0.0
    for path in Path(registry).glob("manifests/*/*.json"):
        log = (json.loads(path.read_text()).get("meta") or {}).get("train_log") or {}
        n += float(log.get("examples", 0)) * len(log.get("epoch_losses", []))
    return n


def main(argv: list[str]) -> int:
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    full = "--full" in argv
    argv = [a for a in argv if a != "--full"]
    out, seed, paradigms = argv[0], int(argv[1]), argv[2:]
    t_imp = time.perf_counter()
    import torch

    f = _imports()
    t_imp = time.perf_counter() - t_imp
    cfg, _ = f["demo_config"](not full, out, overrides=[f"train.seed={seed}", *overrides])
    f["set_threads"](cfg.train.threads)
    t0 = time.perf_counter()
    f["write_world"](cfg.data.root, cfg.world)
    f["prepare"](cfg)
    if paradigms == ["demo-build"]:  # the demo's whole build (tiny base + every stage), timed
        from mmgrid.train.build import build_grid

        t_data = time.perf_counter() - t0
        t0 = time.perf_counter()
        p0 = time.process_time()
        res = build_grid(cfg, progress=False)
        build_s = time.perf_counter() - t0
        build_cpu = time.process_time() - p0  # the driver's own CPU (worker processes are not counted)
        print("BENCH_JSON " + json.dumps({"code": os.environ.get("BENCH_CODE", "?"), "imports_s": t_imp,
                                         "data_s": t_data, "build_s": build_s, "build_cpu_s": build_cpu,
                                         "examples": _trained_examples(cfg.registry),
                                         "workers": getattr(getattr(cfg, "exec", None), "workers", 1),
                                         "stages": len(res.stages)}), flush=True)
        return 0
    prepared = f["open_prepared"](cfg.prepared)
    registry = f["open_registry"](cfg.registry)
    t_data = time.perf_counter() - t0
    t0 = time.perf_counter()
    base, _ = f["get_base"](cfg.base, prepared, registry, seed=cfg.train.seed)
    t_base = time.perf_counter() - t0
    domain = prepared.domains[0]
    dom = prepared.domain(domain)
    t, e = cfg.train, cfg.eval
    result = {"code": os.environ.get("BENCH_CODE", "?"), "seed": seed, "domain": domain, "imports_s": t_imp,
              "data_s": t_data, "base_s": t_base, "threads": torch.get_num_threads(), "cells": {}}
    for name in paradigms:
        par = f["get_paradigm"](name)
        params = dict(cfg.paradigm_params.get(name, {}))
        c0 = time.perf_counter()
        bseed = f["derive_seed"](t.seed, name, domain, "build")
        f["seed_everything"](bseed)
        model = par.build(base, dom, params, bseed)
        n_ex = train_s = train_cpu = 0.0
        stages = {}
        for stage in t.stages:
            examples = par.examples(model, dom, stage)
            s0, p0 = time.perf_counter(), time.process_time()
            log = f["train_stage"](par, model, examples, epochs=t.epochs[stage], lr=t.lr, batch_size=t.batch_size,
                                   seed=f["derive_seed"](t.seed, name, domain, stage), weight_decay=t.weight_decay,
                                   max_examples=t.max_examples, where=f"{name}/{domain}/{stage}", progress=False,
                                   device=t.device, dtype=t.dtype)
            dt = time.perf_counter() - s0
            n_ex += log.examples * len(log.epoch_losses)
            train_s += dt
            train_cpu += time.process_time() - p0
            stages[stage] = {"examples": log.examples, "epochs": len(log.epoch_losses), "seconds": dt,
                             "losses": log.epoch_losses}
        ev = f["Evaluator"](par, dom, split=e.split, ks=e.ks, groups=e.groups, activity_phase=e.activity_phase,
                            max_users=e.max_users, seed=t.seed)
        s0, p0 = time.perf_counter(), time.process_time()
        res = ev.evaluate(model)
        eval_cold, eval_cold_cpu = time.perf_counter() - s0, time.process_time() - p0
        s0, p0 = time.perf_counter(), time.process_time()
        res2 = ev.evaluate(model)
        eval_warm, eval_warm_cpu = time.perf_counter() - s0, time.process_time() - p0
        result["cells"][name] = {
            "train_examples": n_ex, "train_s": train_s, "train_ex_per_s": n_ex / max(train_s, 1e-9),
            "train_cpu_s": train_cpu, "train_ex_per_cpu_s": n_ex / max(train_cpu, 1e-9),
            "eval_users_per_cpu_s": ev.n / max(eval_warm_cpu, 1e-9),
            "eval_users_per_cpu_s_cold": ev.n / max(eval_cold_cpu, 1e-9),
            "eval_users": ev.n, "eval_cold_s": eval_cold, "eval_warm_s": eval_warm,
            "eval_users_per_s_cold": ev.n / max(eval_cold, 1e-9), "eval_users_per_s": ev.n / max(eval_warm, 1e-9),
            "cell_s": time.perf_counter() - c0, "stages": stages,
            "metrics": {k: v for k, v in res["all"].items()}, "warm_equal": res == res2,
        }
    print("BENCH_JSON " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
