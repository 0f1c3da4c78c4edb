"""Profile one cell per paradigm of the quick demo grid: training (one stage) and evaluation.

Usage::

    python bench/profile_cell.py [--out runs/profile] [--paradigms text semid emb sasrec] [--stage pretrain]

Writes the quick demo's world and prepared data under ``--out`` (once), then for each
paradigm: builds the model from the tiny base, makes the stage's examples, trains one
stage under cProfile, and evaluates it on the test window under cProfile. Prints, per
paradigm, wall times of the phases and the share of the profiled time spent in the
functions that matter (collate, forward, backward, optimizer, beam search, grounding,
item embeddings, ranking) plus the padding share of the training batches. Nothing is
stored in a registry other than the base.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRAIN_KEYS = {
    "collate": ("collate",),
    "forward (loss)": ("loss",),
    "backward": ("run_backward", "_engine_run_backward"),
    "optimizer": ("adamw", "_single_tensor_adamw", "_multi_tensor_adamw"),
    "to_device": ("to_device",),
    "regularizer": ("on_step_end", "penalty"),
}
EVAL_KEYS = {
    "generate / beam search": ("generate", "beam_search", "trie_beam_search_with_order"),
    "grounding (text)": ("_ground",),
    "text embedding (encode)": ("encode",),
    "item embeddings": ("item_embeddings", "all_item_embeddings", "embed_items"),
    "popularity": ("popularity_adjust", "popularity"),
    "top-k ranking": ("topk_items",),
    "metrics": ("evaluate_ranked",),
}


def _cum(stats: pstats.Stats, names: tuple[str, ...]) -> float:
    """Cumulative time of the outermost calls of functions with these names (not double counted
    for recursion: the max over matching entries of one name, summed over names)."""
    total = 0.0
    for name in names:
        best = 0.0
        for (_, _, fn), (_, _, _, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
            if fn == name:
                best = max(best, ct)
        total += best
    return total


def _shares(prof: cProfile.Profile, keys: dict[str, tuple[str, ...]]) -> tuple[float, dict[str, float]]:
    s = pstats.Stats(prof, stream=io.StringIO())
    total = max(s.total_tt, 1e-9)  # type: ignore[attr-defined]
    return total, {k: _cum(s, v) / total for k, v in keys.items()}


def _top(prof: cProfile.Profile, n: int = 12) -> str:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(n)
    return "\n".join(line for line in buf.getvalue().splitlines() if line.strip())[-3000:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/profile")
    ap.add_argument("--record", default="profile_cell", help="bench/results/NAME.md")
    ap.add_argument("--paradigms", nargs="+", default=["text", "semid", "emb", "sasrec"])
    ap.add_argument("--stage", default="pretrain")
    ap.add_argument("--domain", default=None)
    ap.add_argument("--top", type=int, default=0, help="also print the top-N functions by own time")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    t_imp = time.perf_counter()
    import torch

    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.cli.demo import demo_config
    from mmgrid.eval.grid import grid_evaluator
    from mmgrid.paradigms import get_paradigm
    from mmgrid.runtime.context import open_prepared, open_registry
    from mmgrid.runtime.device import derive_seed, seed_everything, set_threads
    from mmgrid.train.base_lm import ensure_base
    from mmgrid.train.loop import train_stage
    t_imp = time.perf_counter() - t_imp

    cfg, out = demo_config(True, args.out, overrides=args.overrides)
    set_threads(cfg.train.threads)
    t0 = time.perf_counter()
    if not Path(cfg.prepared).exists():
        write_world(cfg.data.root, cfg.world)
        prepare(cfg)
    prepared = open_prepared(cfg.prepared)
    registry = open_registry(cfg.registry)
    t_data = time.perf_counter() - t0
    t0 = time.perf_counter()
    base, _ = ensure_base(cfg.base, prepared, registry, seed=cfg.train.seed, progress=False)
    t_base = time.perf_counter() - t0
    domain = args.domain or prepared.domains[0]
    dom = prepared.domain(domain)
    print(f"imports {t_imp:.2f}s, data {t_data:.2f}s, base (train or load) {t_base:.2f}s; torch threads "
          f"{torch.get_num_threads()}; domain {domain}, stage {args.stage}")
    t = cfg.train
    for name in args.paradigms:
        par = get_paradigm(name)
        params = dict(cfg.paradigm_params.get(name, {}))
        seed = derive_seed(t.seed, name, domain, "build")
        seed_everything(seed)
        t0 = time.perf_counter()
        model = par.build(base, dom, params, seed)
        t_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        examples = par.examples(model, dom, args.stage)
        t_ex = time.perf_counter() - t0
        pad = _padding(par, model, examples, t.batch_size)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        log = train_stage(par, model, examples, epochs=t.epochs[args.stage], lr=t.lr, batch_size=t.batch_size,
                          seed=derive_seed(t.seed, name, domain, args.stage), weight_decay=t.weight_decay,
                          max_examples=t.max_examples, progress=False, device=t.device, dtype=t.dtype)
        prof.disable()
        t_train = time.perf_counter() - t0
        total, sh = _shares(prof, TRAIN_KEYS)
        t0 = time.perf_counter()
        ckpt = par.save(model)
        t_save = time.perf_counter() - t0
        print(f"\n## {name}: build {t_build:.2f}s, examples {t_ex:.2f}s ({len(examples)}), save {t_save:.2f}s")
        print(f"  train: {t_train:.2f}s for {log.examples} examples x {len(log.epoch_losses)} epochs "
              f"({log.examples * len(log.epoch_losses) / max(t_train, 1e-9):.0f} ex/s), padding share {pad:.0%}")
        print("   " + ", ".join(f"{k} {v:.0%}" for k, v in sh.items()))
        if args.top:
            print(_top(prof, args.top))
        del ckpt
        ev = grid_evaluator(par, dom, cfg)
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        res = ev.evaluate(model)
        prof.disable()
        t_eval = time.perf_counter() - t0
        total, sh = _shares(prof, EVAL_KEYS)
        print(f"  eval: {t_eval:.2f}s for {ev.n} users ({ev.n / max(t_eval, 1e-9):.0f} users/s), "
              f"R@10 {res['all']['recall@10']:.4f}")
        print("   " + ", ".join(f"{k} {v:.0%}" for k, v in sh.items() if v > 0.005))
        if args.top:
            print(_top(prof, args.top))
    return 0


def _padding(par, model, examples, batch_size: int) -> float:
    """Share of padded positions in the stage's batches (attention_mask where present), batched as
    the training loop batches them (shuffled; length-bucketed where the paradigm asks)."""
    import torch

    from mmgrid.train.loop import length_buckets

    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(len(examples), generator=gen).tolist()
    if int(getattr(par, "bucket_window", 0) or 0) > 1:
        order = length_buckets(order, [par.example_length(e) for e in examples], batch_size,
                               int(par.bucket_window), gen)
    examples = [examples[i] for i in order]
    pad = tot = 0
    for s in range(0, len(examples), batch_size):
        b = par.collate(model, examples[s:s + batch_size])
        m = b.get("attention_mask")
        if m is None:
            for key in ("seq", "items", "input"):
                if key in b and b[key].dim() == 2:
                    m = (b[key] != 0).long()
                    break
        if m is None or not isinstance(m, torch.Tensor):
            return float("nan")
        pad += int((m == 0).sum())
        tot += m.numel()
    return pad / max(tot, 1)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record import run_recorded  # bench/record.py: writes bench/results/profile_cell.md (--record NAME: NAME.md)

    run_recorded(main, "profile_cell")
