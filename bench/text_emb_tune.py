"""Tune and measure the text and emb paradigms against most-popular and SASRec.

One run: for each training seed, the tiny base and each paradigm's cell are trained on
the grid's stages of each domain, then every evaluated example is ranked. Per-user
Recall@10 / NDCG@10 hits are written to ``OUT/hits.npz`` and a table with bootstrap
intervals (``mmgrid.stats.mean_ci`` over users and seeds) and the per-user paired
difference against most-popular is printed.

``--valid`` (the tuning mode) never looks at the test window: the phases become
pretrain [.., 2022-07-01), p1 [07-01, 10-01), p2 [10-01, 12-01) and ``valid``
[12-01, 2023-01-01), the last month of the demo's p2, which is evaluated; the test phase
is not even prepared.

For ``text`` the beams are generated once per model and every grounding variant of
``--text-variants`` (JSON list of paradigm_params overlays that touch grounding only:
beam_combine, beam_candidates, popularity_*, history_*, cooc_*) is scored on the same
beams, so a sweep costs one generation.

Usage::

    python bench/text_emb_tune.py --out /tmp/p16/val --valid --seeds 0 1 2 --paradigms text emb sasrec
    python bench/text_emb_tune.py --out /tmp/p16/test --seeds 0 1 2 -- world.preset=dense_short_text
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

if sys.path and sys.path[0].rstrip("/").endswith("bench"):
    sys.path.pop(0)

import numpy as np

VALID_PHASES = ('data.phases={pretrain: [null, "2022-07-01"], p1: ["2022-07-01", "2022-10-01"], '
                'p2: ["2022-10-01", "2022-12-01"], valid: ["2022-12-01", "2023-01-01"]}')


def per_user(ranked: np.ndarray, targets: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Per-user Recall@k (hit) and NDCG@k of one target per user."""
    top = ranked[:, :k]
    match = top == targets[:, None]
    hit = match.any(1).astype(np.float64)
    pos = np.where(match.any(1), match.argmax(1), -1)
    ndcg = np.where(pos >= 0, 1.0 / np.log2(np.maximum(pos, 0) + 2.0), 0.0)
    return hit, ndcg


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--record", default="text_emb_tune", help="bench/results/NAME.md")
    ap.add_argument("--valid", action="store_true", help="evaluate the validation window carved from p2")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--paradigms", nargs="+", default=["text", "emb", "sasrec"])
    ap.add_argument("--domains", nargs="*", default=None, help="default: every domain")
    ap.add_argument("--max-examples", type=int, default=1500)
    ap.add_argument("--max-users", type=int, default=None)
    ap.add_argument("--text-variants", default="[{}]", help="JSON list of grounding overlays for text")
    ap.add_argument("--gen-beams", type=int, nargs="*", default=None,
                    help="text: num_beams values, each generated once (default: the cell's num_beams)")
    ap.add_argument("--params", default="{}", help="JSON {paradigm: {knob: value}} for the trained cells")
    ap.add_argument("--tag", default="", help="suffix of result keys (several runs into one hits.npz)")
    ap.add_argument("--rescore", action="store_true",
                    help="text: ground the beams stored by an earlier run (OUT/gen) again, without training")
    ap.add_argument("--hits", default="hits.npz", help="results file under OUT (runs sharing OUT use their own)")
    ap.add_argument("--report", action="store_true", help="only print the table of OUT/hits.npz")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    if a.report:
        from mmgrid.stats import mean_ci

        report(dict(np.load(Path(a.out) / a.hits)), mean_ci)
        return 0

    import torch

    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.cli.demo import demo_config
    from mmgrid.eval.ranking import Evaluator
    from mmgrid.paradigms import get_paradigm
    from mmgrid.runtime.context import open_prepared, open_registry
    from mmgrid.runtime.device import derive_seed, seed_everything, set_threads
    from mmgrid.runtime.progress import set_quiet
    from mmgrid.stats import mean_ci
    from mmgrid.train.base_lm import ensure_base
    from mmgrid.train.loop import train_stage

    set_quiet(True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    variants = json.loads(a.text_variants)
    cell_params = json.loads(a.params)
    hits_path = out / a.hits
    store = dict(np.load(hits_path)) if hits_path.exists() else {}
    split = "valid" if a.valid else "test"
    timing: dict[str, float] = {}
    for seed in a.seeds:
        ov = [f"train.seed={seed}", f"train.max_examples={a.max_examples}"]
        if a.valid:
            ov += [VALID_PHASES, "eval.split=valid"]
        cfg, _ = demo_config(False, str(out / "run"), overrides=ov + list(a.overrides))
        set_threads(cfg.train.threads)
        if not (Path(cfg.data.root)).exists():
            write_world(cfg.data.root, cfg.world)
        prepare(cfg)
        prepared = open_prepared(cfg.prepared)
        registry = open_registry(cfg.registry)
        base, _ = ensure_base(cfg.base, prepared, registry, seed=cfg.train.seed)
        t = cfg.train
        for domain in a.domains or prepared.domains:
            dom = prepared.domain(domain)
            ev = Evaluator(None, dom, split=split, ks=[10], groups=["all"], max_users=a.max_users, seed=0)
            store[f"targets/{domain}"] = ev.targets
            pop = dom.popularity(list(t.stages))
            order = np.lexsort((np.arange(len(pop)), -pop))[:10]
            h, n = per_user(np.broadcast_to(order, (ev.n, 10)), ev.targets)
            store[f"popular/{domain}/{seed}/hit"], store[f"popular/{domain}/{seed}/ndcg"] = h, n
            for name in a.paradigms:
                par = get_paradigm(name)
                params = {**dict(cfg.paradigm_params.get(name, {})), **cell_params.get(name, {})}
                bseed = derive_seed(t.seed, name, domain, "build")
                seed_everything(bseed)
                model = par.build(base, dom, params, bseed)
                c0 = time.perf_counter()
                for stage in t.stages:
                    if a.rescore and name == "text":  # the stored beams are ranked again: no training
                        model.mmgrid_text.trained_phases.append(stage)
                        continue
                    train_stage(par, model, par.examples(model, dom, stage), epochs=t.epochs[stage], lr=t.lr,
                                batch_size=t.batch_size, seed=derive_seed(t.seed, name, domain, stage),
                                weight_decay=t.weight_decay, max_examples=t.max_examples,
                                where=f"{name}/{domain}/{stage}", progress=False, device=t.device, dtype=t.dtype)
                timing[f"{name}/{domain}/{seed}/train_s"] = time.perf_counter() - c0
                model.eval()
                c0 = time.perf_counter()
                with torch.no_grad():
                    if name == "text":
                        for beams in a.gen_beams or [None]:
                            g0 = time.perf_counter()
                            if beams is not None:
                                model.mmgrid_text.params = dataclasses.replace(model.mmgrid_text.params, num_beams=beams)
                            gfile = out / "gen" / f"{domain}-{seed}-{beams}{a.tag}.json"
                            if a.rescore:
                                gen = [(t, np.asarray(sc)) for t, sc in json.loads(gfile.read_text())]
                            else:
                                gen = [par.generate(model, ev.histories[s:s + 128]) for s in range(0, ev.n, 128)]
                                gfile.parent.mkdir(exist_ok=True)
                                gfile.write_text(json.dumps([(t, sc.tolist()) for t, sc in gen]))
                            timing[f"{name}/{domain}/{seed}/gen{beams}_s"] = time.perf_counter() - g0
                            for var in variants:
                                ranked = np.concatenate([
                                    par.rank_generated(model, dom, ev.histories[s * 128:(s + 1) * 128], 10,
                                                       texts, scores, overrides=var)
                                    for s, (texts, scores) in enumerate(gen)])
                                h, n = per_user(ranked, ev.targets)
                                v = dict(var, num_beams=beams) if beams is not None else var
                                key = f"text{a.tag}#{json.dumps(v, sort_keys=True)}/{domain}/{seed}"
                                store[key + "/hit"], store[key + "/ndcg"] = h, n
                    else:
                        ranked = ev.rank_with(par, model) if hasattr(ev, "rank_with") else _rank(ev, par, model)
                        h, n = per_user(ranked, ev.targets)
                        key = f"{name}{a.tag}/{domain}/{seed}"
                        store[key + "/hit"], store[key + "/ndcg"] = h, n
                timing[f"{name}/{domain}/{seed}/eval_s"] = time.perf_counter() - c0
                np.savez(hits_path, **store)
                print(f"done {name} {domain} seed {seed} {timing}", flush=True)
                del model
    np.savez(hits_path, **store)
    (out / "timing.json").write_text(json.dumps(timing, indent=1))
    report(store, mean_ci)
    return 0


def _rank(ev, par, model) -> np.ndarray:
    ev.paradigm = par
    return ev.rank(model)[:, :10]


def report(store: dict, mean_ci) -> None:
    """Per method, pooled over domains (users of every domain side by side) and the seeds all of
    its domains have: mean R@10 with its interval, paired R@10 difference vs most-popular (interval),
    ratio to SASRec's mean over the same seeds, N@10, per-domain R@10; best pooled R@10 first."""
    runs: dict[str, dict[str, set[int]]] = {}
    for k in store:
        if k.endswith("/hit"):
            m, dom, seed, _ = k.rsplit("/", 3)
            runs.setdefault(m, {}).setdefault(dom, set()).add(int(seed))
    domains = sorted(runs.get("popular", {}))
    rows = []
    for m, doms in runs.items():
        if sorted(doms) != domains:
            continue
        seeds = sorted(set.intersection(*doms.values()))
        if not seeds:
            continue

        def mat(name: str, what: str = "hit") -> np.ndarray | None:
            try:
                return np.concatenate([np.stack([store[f"{name}/{d}/{s}/{what}"] for s in seeds]) for d in domains], 1)
            except KeyError:
                return None
        h, nd, pop, sas = mat(m), mat(m, "ndcg"), mat("popular"), mat("sasrec")
        r = mean_ci(h)
        d = mean_ci(h - pop)
        per = " ".join(f"{dm}:{np.mean([store[f'{m}/{dm}/{s}/hit'].mean() for s in seeds]):.3f}" for dm in domains)
        ratio = f"{h.mean() / sas.mean():.2f}" if sas is not None else "  - "
        rows.append((r[0], f"{m[:78]:78s} s{seeds} R@10 {r[0]:.4f} [{r[1]:.4f},{r[2]:.4f}] -pop {d[0]:+.4f} "
                           f"[{d[1]:+.4f},{d[2]:+.4f}] /sas {ratio} N@10 {nd.mean():.4f} | {per}"))
    n = sum(len(store[f"targets/{d}"]) for d in domains if f"targets/{d}" in store)
    print(f"domains {domains}, {n} evaluated examples per seed")
    for _, line in sorted(rows, reverse=True):
        print(line)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record import run_recorded  # bench/record.py: writes bench/results/text_emb_tune.md (--record NAME: NAME.md)

    run_recorded(main, "text_emb_tune")
