"""How much a compiler takes off the paths that missed the speed goals (emb training, emb/sasrec ranking).

On the demo world's first domain (the full demo config; ``--quick``: the quick one), one torch thread:

1. **emb's training step** (the item LLM over the whole catalog forward and backward, the user LLM,
   InfoNCE, the fused AdamW step) on the stage's first batch: eager milliseconds per step. With
   ``--compile`` the same step with ``torch.compile`` (inductor) on ``EmbModel.encode_items``, the
   catalog pass that holds ~90 % of the step: the cold compile's seconds (a fresh inductor cache in
   the work folder) and the eager/compiled ratio. Inductor fuses the elementwise operators (norms,
   rotary, SiLU, residuals) into few kernels and drops the Python and dispatch between them, so
   the ratio estimates what rewriting those operators by hand in eager PyTorch could take off.
2. **Warm evaluation of emb and sasrec** (the ``Evaluator``'s second call on the same untrained
   model: the timed call of ``bench/train_eval.py``): milliseconds per call and users/s; with
   ``--compile`` the same with the history encoder compiled (``dynamic=True``: the length groups
   give each call its own widths).

Each timing is the best of ``--repeats`` runs of ``--steps`` calls (this VM's rate moves by up to
40 % between runs; the best run is the least disturbed). Prints tables; asserts nothing.

Usage::

    python bench/step_floor.py                 # full config, ~1 min
    python bench/step_floor.py --compile       # + torch.compile (~2 min more: cold compiles; needs a C++ compiler)
    python bench/step_floor.py --quick
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def best_ms(fn, steps: int, repeats: int) -> float:
    """Best mean milliseconds per call over ``repeats`` runs of ``steps`` calls (after 3 warm-up calls)."""
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        best = min(best, (time.perf_counter() - t0) / steps * 1000)
    return best


def time_compiled(obj, attr: str, fn, dynamic: bool, steps: int, repeats: int) -> tuple[float, float, float]:
    """``obj.attr`` replaced by ``torch.compile(obj.attr)`` while ``fn`` is timed, then restored.

    Returns ``(compile_s, compiled_ms, eager_again_ms)``: the first call's seconds (the compile),
    the best compiled ms per call, and the best eager ms per call measured right after (the
    machine's drift between the two timings)."""
    import torch

    eager_fn = getattr(obj, attr)
    t0 = time.perf_counter()
    setattr(obj, attr, torch.compile(eager_fn, dynamic=dynamic))
    try:
        fn()
        compile_s = time.perf_counter() - t0
        compiled = best_ms(fn, steps, repeats)
    finally:
        setattr(obj, attr, eager_fn)
    return compile_s, compiled, best_ms(fn, steps, repeats)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the quick demo config instead of the full one")
    ap.add_argument("--compile", action="store_true", help="also time the step with torch.compile (inductor)")
    ap.add_argument("--steps", type=int, default=20, help="calls per timed run")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs; the best is reported")
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args(argv)
    tmp = tempfile.TemporaryDirectory() if args.out is None else None
    work = Path(args.out or tmp.name)
    if args.compile:  # a cold compile, as a fresh process on a fresh machine pays it (read when torch loads)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")

    import torch

    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.cli.demo import demo_config
    from mmgrid.eval.grid import grid_evaluator
    from mmgrid.paradigms import get_paradigm
    from mmgrid.runtime.context import open_prepared, open_registry
    from mmgrid.runtime.device import derive_seed, seed_everything, set_threads
    from mmgrid.runtime.progress import set_quiet
    from mmgrid.train.base_lm import ensure_base
    from mmgrid.train.loop import adamw

    set_quiet(True)
    cfg, _ = demo_config(args.quick, str(work))
    set_threads(1)
    write_world(cfg.data.root, cfg.world)
    prepare(cfg)
    prepared, registry = open_prepared(cfg.prepared), open_registry(cfg.registry)
    base, _ = ensure_base(cfg.base, prepared, registry, seed=cfg.train.seed, progress=False)
    domain = prepared.domains[0]
    dom = prepared.domain(domain)
    t = cfg.train
    print(f"config: demo{' --quick' if args.quick else ''}; domain {domain}; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}; best of {args.repeats} x {args.steps} calls")

    # 1. emb's training step
    par = get_paradigm("emb")
    seed = derive_seed(t.seed, "emb", domain, "build")
    seed_everything(seed)
    model = par.build(base, dom, dict(cfg.paradigm_params.get("emb", {})), seed)
    stage = t.stages[0]
    batch = par.collate(model, par.examples(model, dom, stage)[: t.batch_size])
    model.train()
    opt = adamw([p for p in model.parameters() if p.requires_grad], t.lr, t.weight_decay,
                fused=bool(getattr(par, "fused_optimizer", False)))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        par.loss(model, batch).backward()
        opt.step()

    items, width = int(batch["items"].numel()), int(model.item_lengths[batch["items"]].max())
    print(f"\nemb training step: batch {t.batch_size}, catalog {items} items x {width} tokens, "
          f"base hidden {model.item_llm.config.hidden_size}, {model.item_llm.config.num_hidden_layers} layers")
    eager = best_ms(step, args.steps, args.repeats)
    print(f"  {'eager':34s} {eager:8.2f} ms")
    if args.compile:
        compile_s, compiled, eager2 = time_compiled(model, "encode_items", step, False, args.steps, args.repeats)
        print(f"  {'torch.compile(encode_items)':34s} {compiled:8.2f} ms | compile {compile_s:.1f} s; eager again "
              f"{eager2:.2f} ms; eager/compiled {min(eager, eager2) / compiled:.2f}x; break-even after "
              f"{compile_s * 1000 / max(min(eager, eager2) - compiled, 1e-9):.0f} steps")

    # 2. warm evaluation
    print(f"\nwarm evaluation ({'eval.max_users ' + str(cfg.eval.max_users) if cfg.eval.max_users else 'every user'} "
          "of the test window; an untrained model ranks as fast as a trained one)")
    for name, attr in (("emb", "encode_users"), ("sasrec", "users")):
        par = get_paradigm(name)
        seed = derive_seed(t.seed, name, domain, "build")
        seed_everything(seed)
        model = par.build(base, dom, dict(cfg.paradigm_params.get(name, {})), seed).eval()
        ev = grid_evaluator(par, dom, cfg)
        ev.evaluate(model)  # cold call: item embeddings, caches

        def call() -> None:
            ev.evaluate(model)

        ms = best_ms(call, args.steps, args.repeats)
        print(f"  {name + ' (' + str(ev.n) + ' users), eager':34s} {ms:8.2f} ms | {ev.n / ms * 1000:.0f} users/s")
        if args.compile:  # the history encoder compiled (shapes vary with the length groups: dynamic)
            compile_s, compiled, eager2 = time_compiled(model, attr, call, True, args.steps, args.repeats)
            print(f"  {'torch.compile(' + attr + ')':34s} {compiled:8.2f} ms | compile {compile_s:.1f} s; "
                  f"eager again {eager2:.2f} ms; eager/compiled {min(ms, eager2) / compiled:.2f}x")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    from record import recorded  # bench/record.py: writes bench/results/step_floor.md

    with recorded("step_floor"):
        rc = main()
    raise SystemExit(rc)
