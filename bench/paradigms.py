"""Recall@10 / NDCG@10 of every paradigm beside most-popular and SASRec, per world preset.

For each world preset (``default``, ``dense_short_text`` and ``amazon_table1``; all three unless
``--preset`` names some) and each training budget (``train.max_examples``; ``--budget 1500 6000``
for the demo's and 4x), builds the demo grid's default variant (tiny base, pretrain -> p1 -> p2 at
the demo's 3 / 2 / 2 epochs) for each asked paradigm on the first ``--domains`` domains, once per
training seed, through the library (``mmgrid.train.build.build_grid`` into a registry under
``--out``), then ranks every example of the evaluation window (or, with ``--eval-users N``, a fixed,
seeded sample of N a domain) with each p2 checkpoint: the same examples for every seed and
paradigm, so differences are paired.

Per paradigm it prints, pooled over the domains:

- Recall@10 and NDCG@10: the mean over evaluated users (a user's value is the mean over their
  sampled examples; a user of two domains counts twice) and seeds, with a 95% percentile-bootstrap
  interval over users and seeds (``mmgrid.stats.mean_ci``);
- the paired per-user difference in Recall@10 against most-popular (counts over the training
  phases, each user's history left out, as ``mmgrid eval``) with its 95% interval: the first target is its lower bound > 0;
- the ratio of its mean Recall@10 to SASRec's, the paired differences ``R@10 - SASRec`` and
  ``R@10 - 0.8 x SASRec`` with their intervals (SemEmb's target: ratio >= 1 with the first
  interval not entirely below 0; SemID's: >= 0.8 x SASRec);
- for an ``--arm`` (the paradigm with some knobs changed, e.g.
  ``--arm emb-nobucket=emb:bucket_window=0``): the paired difference to the paradigm's own row
  (same users, same seeds), which is how docs/paradigms.md's SemEmb option table was measured;
- for a ``--rank-arm`` (knobs that change only the ranking, e.g. the text paradigm's grounding:
  ``--rank-arm mm=text:grounding_scale=minmax``): the same, on the paradigm's default checkpoints
  (same ids, never retrained) loaded with those knobs; for ``text`` every rank arm grounds the beams
  the default checkpoint generated once (cached under ``--out/beams``), so an arm costs grounding only;
- build seconds (every stage of every domain, summed over seeds; 0 when cached in the registry)
  and evaluation seconds (ranking, summed over seeds and domains).

``--valid`` carves a validation window out of the training phases: p2 ends at ``--valid-start``
(default 2022-12-01) and ``valid`` is [valid-start, 2023-01-01); the test window is not even
prepared, so tuning never looks at it. Without ``--valid`` the test window is evaluated.

Results (the table, and every per-user value as JSON) are saved under ``--out`` (printed at the
end); the printed tables are also the record ``bench/results/paradigms.md`` (``--record NAME``:
``bench/results/NAME.md``). A paradigm's result is cached there by its checkpoint ids, so adding a paradigm or a seed
re-runs only what is new; ``--fresh`` ignores the cache.

Usage::

    python bench/paradigms.py                                              # all presets, demo budget, seeds 0 1 2
    python bench/paradigms.py --preset dense_short_text --valid
    python bench/paradigms.py --preset amazon_table1 --paradigms emb sasrec --arm emb-nobucket=emb:bucket_window=0
    python bench/paradigms.py --preset amazon_table1 --valid --paradigms text --rank-arm g0=text:popularity_gamma=0
    python bench/paradigms.py --preset default --budget 6000 --paradigms semid sasrec
    python bench/paradigms.py --preset dense_short_text --paradigms semid -- paradigm_params.semid.codes=fused

Cost on 2 cores: ``--domains 2`` with the demo budget is about one to a few
minutes per paradigm and seed (text, the slowest, generates titles; amazon_table1's two large
domains cost the most); 4x the budget is ~4x the build.
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

import numpy as np

PARADIGMS = ["text", "semid", "emb", "sasrec"]
K = 10


def parse_arms(specs: list[str]) -> dict[str, tuple[str, list[str]]]:
    """``--arm LABEL=PARADIGM:KEY=VALUE,KEY=VALUE`` -> ``{LABEL: (PARADIGM, ["paradigm_params.P.KEY=VALUE", ...])}``.

    An arm is one more row: the paradigm with some of its knobs changed (an A/B against the
    paradigm's defaults, paired on the same users and seeds)."""
    arms: dict[str, tuple[str, list[str]]] = {}
    for spec in specs:
        label, sep, rest = spec.partition("=")
        par, sep2, knobs = rest.partition(":")
        if not sep or not label or not par or label in PARADIGMS or label in arms:
            raise SystemExit(f"--arm {spec!r}: expected LABEL=PARADIGM:KEY=VALUE[,KEY=VALUE] with a new label "
                             "(e.g. emb-nobucket=emb:bucket_window=0)")
        over = [f"paradigm_params.{par}.{kv}" for kv in knobs.split(",") if kv] if sep2 else []
        arms[label] = (par, over)
    return arms


def parse_rank_arms(specs: list[str], taken: set[str]) -> dict[str, tuple[str, dict]]:
    """``--rank-arm LABEL=PARADIGM:KEY=VALUE,...`` -> ``{LABEL: (PARADIGM, {KEY: value})}`` (values read as YAML).

    A rank arm changes knobs that only the ranking reads: it is evaluated on the paradigm's default
    checkpoints, loaded with these knobs (they are not part of the grid, so the checkpoint ids are
    the default row's)."""
    import yaml

    arms: dict[str, tuple[str, dict]] = {}
    for spec in specs:
        label, sep, rest = spec.partition("=")
        par, sep2, knobs = rest.partition(":")
        if not sep or not sep2 or not label or not par or label in PARADIGMS or label in taken or label in arms:
            raise SystemExit(f"--rank-arm {spec!r}: expected LABEL=PARADIGM:KEY=VALUE[,KEY=VALUE] with a new label "
                             "(e.g. mm=text:grounding_scale=minmax)")
        over = {}
        for kv in knobs.split(","):
            key, eq, value = kv.partition("=")
            if not eq or not key:
                raise SystemExit(f"--rank-arm {spec!r}: {kv!r} is not KEY=VALUE")
            over[key] = yaml.safe_load(value)
        arms[label] = (par, over)
    return arms


def grid_config(args: argparse.Namespace, seed: int, paradigm: str, extra: list[str] = ()):
    """The demo grid (default variant only) for this preset, budget, seed and paradigm."""
    from mmgrid.cli.demo import demo_config

    mode = "valid" if args.valid else "test"
    out = Path(args.out) / args.preset
    common = [f"train.max_examples={args.budget}", f"train.seed={seed}", "eval.retention=false", f"eval.ks=[{K}]",
              "eval.groups=[all]", f"prepared={out / ('prepared-' + mode)}", f"registry={out / ('registry-' + mode)}"]
    if getattr(args, "grid", None):
        from mmgrid.config import load_grid

        # a grid on real data (e.g. grids/ml100k.yaml): its own data section, tiny base and phases; one seed's
        # replicate only (`train.seed=0` alone would keep the grid's `train.seeds` and build every seed)
        cfg = load_grid(args.grid, [f"train.seeds=[{seed}]", *common, *args.overrides, *extra])
    else:
        over = [f"world.preset={args.preset}", f"world.n_domains={args.domains}", *common, *args.overrides, *extra]
        cfg, _ = demo_config(False, str(out), overrides=over)
    cfg.variants = [v for v in cfg.variants if v.name == "default"]
    cfg.paradigms = [paradigm]
    if args.valid:
        phases = dict(cfg.data.phases)
        if "test" not in phases or "p2" not in phases:
            raise SystemExit("--valid needs the demo's phases (p2 then test)")
        p2_start, p2_end = phases["p2"]
        if args.valid_start is None:
            args.valid_start = "2022-12-01"
        cfg.data.phases = {k: v for k, v in phases.items() if k not in ("p2", "test")}
        cfg.data.phases |= {"p2": [p2_start, args.valid_start], "valid": [args.valid_start, p2_end]}
        cfg.eval.split = "valid"
    return cfg


def per_user(users: np.ndarray, hits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Users in order of first appearance and each one's mean of ``hits``."""
    uniq, inv = np.unique(users, return_inverse=True)
    return uniq, np.bincount(inv, weights=hits) / np.bincount(inv)


def hits(ranked: np.ndarray, targets: np.ndarray) -> dict[str, list[float]]:
    """Each example's Recall@K and NDCG@K (one target: 1 / log2(rank + 2) where it is in the top K)."""
    from mmgrid.eval.metrics import target_ranks

    r = target_ranks(ranked[:, :K], targets)
    return {"recall": (r >= 0).astype(float).tolist(),
            "ndcg": np.where(r >= 0, 1.0 / np.log2(np.maximum(r, 0) + 2.0), 0.0).tolist()}


def evaluate_cell(cfg, paradigm: str, eval_users: int) -> dict:
    """Build (or reuse) the grid of one paradigm and seed, then rank the sampled evaluation examples."""
    from mmgrid.eval.popular import popular_ranking
    from mmgrid.eval.ranking import Evaluator
    from mmgrid.paradigms import get_paradigm
    from mmgrid.runtime.checkpoints import load_checkpoint
    from mmgrid.runtime.context import open_prepared, open_registry
    from mmgrid.train.base_lm import ensure_base
    from mmgrid.train.build import build_grid
    from mmgrid.validate import validate_grid

    validate_grid(cfg)
    prepared, registry = open_prepared(cfg.prepared), open_registry(cfg.registry)
    ensure_base(cfg.base, prepared, registry, seed=cfg.train.seed)  # not counted in the paradigm's build time
    t0 = time.perf_counter()
    res = build_grid(cfg, progress=False)
    build_s = time.perf_counter() - t0 if res.trained else 0.0
    par, params = get_paradigm(paradigm), dict(cfg.paradigm_params.get(paradigm, {}))
    out = {"ids": {}, "build_s": build_s, "eval_s": 0.0, "domains": {}}
    for (p, domain), cid in res.final_ids().items():
        dom = prepared.domain(domain)
        # seed 0 for the sample: every training seed and paradigm is evaluated on the same examples
        ev = Evaluator(par, dom, split=cfg.eval.split, ks=[K], groups=["all"], max_users=eval_users or None, seed=0)
        model = par.load(load_checkpoint(registry, cid), dom, params)
        model.eval()
        t0 = time.perf_counter()
        ranked = ev.rank(model)
        out["eval_s"] += time.perf_counter() - t0
        # the grid's baseline rule (eval.popular_exclude_history): each user's history items left out, as
        # the paradigms leave them out
        pop = popular_ranking(dom.popularity(list(cfg.train.stages)), K,
                              ev.histories if cfg.eval.popular_exclude_history else None)
        d = {"users": ev.users.tolist()}
        for name, rk in (("model", ranked), ("popular", np.broadcast_to(pop, (ev.n, pop.shape[-1])))):
            d[name] = hits(rk, ev.targets)
        out["ids"][domain] = cid
        out["domains"][domain] = d
    return out


def evaluate_rank_arms(cfg, paradigm: str, eval_users: int, arms: dict[str, dict], beams_dir: Path,
                       beams_key: str) -> dict[str, dict]:
    """The default checkpoints of one paradigm and seed, ranked once per rank arm (knobs in ``arms``).

    ``text``: the beams are generated once per domain in the batches :class:`Evaluator` and
    ``TextParadigm.rank`` use (so a rank arm at the default knobs gives the default row's ranking),
    cached as JSON under ``beams_dir``, and each arm grounds them (``rank_generated``)."""
    from mmgrid.eval.ranking import Evaluator
    from mmgrid.paradigms import get_paradigm
    from mmgrid.runtime.checkpoints import load_checkpoint
    from mmgrid.runtime.context import open_prepared, open_registry
    from mmgrid.train.build import build_grid

    prepared, registry = open_prepared(cfg.prepared), open_registry(cfg.registry)
    res = build_grid(cfg, progress=False)  # the default row's checkpoints: cached
    par, params = get_paradigm(paradigm), dict(cfg.paradigm_params.get(paradigm, {}))
    cells = {label: {"ids": {}, "build_s": 0.0, "eval_s": 0.0, "domains": {}} for label in arms}
    for (p, domain), cid in res.final_ids().items():
        dom = prepared.domain(domain)
        ev = Evaluator(par, dom, split=cfg.eval.split, ks=[K], groups=["all"], max_users=eval_users or None, seed=0)
        k = min(K, dom.n_items)
        beams = None
        if paradigm == "text":
            model = par.load(load_checkpoint(registry, cid), dom, params)
            model.eval()
            path = beams_dir / f"{beams_key}-{domain}.json"
            beams = cached_beams(par, model, ev, path)
        for label, over in arms.items():
            t0 = time.perf_counter()
            if beams is not None:
                from mmgrid.paradigms.text import TextKnobs, grounding_vectors

                vecs = grounding_vectors(model, TextKnobs.resolve({**model.mmgrid_text.params.to_dict(), **over}))
                ranked = np.zeros((ev.n, k), dtype=np.int64)
                for b in beams:
                    hist = [ev.histories[i] for i in b["rows"]]
                    ranked[b["rows"]] = par.rank_generated(model, dom, hist, k, b["texts"], np.asarray(b["scores"]),
                                                           overrides=over, model_items=vecs)
            else:
                model = par.load(load_checkpoint(registry, cid), dom, {**params, **over})
                model.eval()
                ranked = ev.rank(model)
            cell = cells[label]
            cell["eval_s"] += time.perf_counter() - t0
            cell["ids"][domain] = cid
            cell["domains"][domain] = {"users": ev.users.tolist(), "model": hits(ranked, ev.targets)}
    return cells


def cached_beams(par, model, ev, path: Path) -> list[dict]:
    """The text model's beams for every example of ``ev``, generated in the batches :class:`Evaluator`
    and ``TextParadigm.rank`` use (so grounding them gives the paradigm's own ranking), cached as JSON at
    ``path``: ``[{"rows": example indices, "texts": [[beam, ...], ...], "scores": [[...], ...]}, ...]``."""
    if path.exists():
        return json.loads(path.read_text())
    beams = []
    bs = int(model.mmgrid_text.params.rank_batch)
    for s in range(0, ev.n, ev.batch_size):
        rows = ev.by_length[s:s + ev.batch_size]
        for c in range(0, len(rows), bs):
            chunk = rows[c:c + bs]
            texts, scores = par.generate(model, [ev.histories[i] for i in chunk])
            beams.append({"rows": chunk.tolist(), "texts": texts, "scores": scores.tolist()})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(beams))
    return beams


def pooled(cells: list[dict], who: str, metric: str) -> np.ndarray:
    """[n_seeds, n_users] per-user means of ``metric``, users of every domain side by side."""
    rows = []
    for cell in cells:
        row = []
        for domain in sorted(cell["domains"]):
            d = cell["domains"][domain]
            row.append(per_user(np.asarray(d["users"]), np.asarray(d[who][metric]))[1])
        rows.append(np.concatenate(row))
    return np.stack(rows)


def table(results: dict[str, list[dict]], args: argparse.Namespace, arms: dict | None = None) -> str:
    """The markdown table of one preset and budget: a row per paradigm (and per ``--arm``)."""
    from mmgrid.stats import mean_ci

    arms = arms or {}

    def ci(a: np.ndarray) -> str:
        m, lo, hi = mean_ci(a)
        return f"{m:.4f} [{lo:.4f}, {hi:.4f}]"

    first = next(r for r in results.values() if "popular" in next(iter(r[0]["domains"].values())))
    pop_r, pop_n = pooled(first, "popular", "recall")[:1], pooled(first, "popular", "ndcg")[:1]
    sas = pooled(results["sasrec"], "model", "recall") if "sasrec" in results else None
    n_users = pop_r.shape[1]
    lines = [f"preset {args.preset}, {'valid' if args.valid else 'test'} window, budget train.max_examples="
             f"{args.budget}, seeds {args.seeds}, {args.domains} domain(s), {n_users} evaluated users "
             + (f"(<= {args.eval_users} examples a domain)" if args.eval_users else "(every example of the window)")
             + "; 95% bootstrap intervals over users and seeds "
             "(differences paired per user and seed)",
             "", "| paradigm | R@10 | N@10 | R@10 - popular | ratio to SASRec | R@10 - SASRec | R@10 - 0.8 SASRec "
             "| R@10 - its default | build s | eval s |",
             "|---|---|---|---|---|---|---|---|---|---|",
             f"| most-popular | {ci(pop_r)} | {ci(pop_n)} | | "
             + (f"{pop_r.mean() / sas.mean():.2f} | {ci(pop_r - sas)} |" if sas is not None else "| |")
             + " | | | |"]
    for p, cells in results.items():
        r, n = pooled(cells, "model", "recall"), pooled(cells, "model", "ndcg")
        ratio = f"{r.mean() / sas.mean():.2f}" if sas is not None else "-"
        vs = ci(r - sas) if sas is not None and p != "sasrec" else ""
        vs08 = ci(r - 0.8 * sas) if sas is not None and p != "sasrec" else ""
        base = arms.get(p, (None,))[0]
        vsdef = ci(r - pooled(results[base], "model", "recall")) if base in results else ""
        label = f"{p} ({', '.join(o.split('.', 2)[2] for o in arms[p][1])})" if p in arms else p
        if p in arms and len(arms[p]) > 2:
            label = label[:-1] + "; ranking only)"
        lines.append(f"| {label} | {ci(r)} | {ci(n)} | {ci(r - pop_r)} | {ratio} | {vs} | {vs08} | {vsdef} | "
                     f"{sum(c['build_s'] for c in cells):.0f} | {sum(c['eval_s'] for c in cells):.1f} |")
    lines += ["", "R@10 per domain (mean over users and seeds): " + "; ".join(
        f"{dom}: " + ", ".join(
            [f"popular {np.mean(per_user(np.asarray(first[0]['domains'][dom]['users']), np.asarray(first[0]['domains'][dom]['popular']['recall']))[1]):.3f}"]
            + [f"{p} {np.mean([per_user(np.asarray(c['domains'][dom]['users']), np.asarray(c['domains'][dom]['model']['recall']))[1].mean() for c in cells]):.3f}"
               for p, cells in results.items()])
        for dom in sorted(first[0]["domains"]))]  # fmt: skip
    return "\n".join(lines)


#: The real-data targets (``--targets``): each generative paradigm's Recall@10 against most-popular (lower bound
#: > 0) and against a multiple of SASRec's, and Table 2's order (MMGRid: HLLM >= LC-Rec > BIGRec).
RATIO_TARGETS = {"text": 0.6, "semid": 0.9, "emb": 1.0}
ORDER_TARGETS = [("emb", "semid", ">="), ("semid", "text", ">")]


def parse_rows(specs: list[str]) -> dict[str, str]:
    """``--as PARADIGM=LABEL``: the row (a paradigm or an --arm label) that stands for PARADIGM in the targets."""
    out = {}
    for spec in specs:
        par, eq, label = spec.partition("=")
        if not eq or par not in RATIO_TARGETS or not label:
            raise SystemExit(f"--as {spec!r}: expected PARADIGM=ROW with PARADIGM one of {sorted(RATIO_TARGETS)}")
        out[par] = label
    return out


def targets_table(results: dict[str, list[dict]], seeds: list[int], rows: dict[str, str] | None = None) -> str:
    """Every target per seed and pooled: the paired per-user difference with its 95% bootstrap interval
    (over users for one seed; over users and seeds pooled) and whether it is met.

    A ratio target ``R >= c x SASRec`` is met when the mean ratio is at least ``c`` (the interval of
    ``R - c x SASRec`` says how sure that is); ``R > popular`` and a strict order ``A > B`` need the
    interval's lower bound above 0; ``A >= B`` is met when the mean difference is >= 0 or its interval
    contains 0."""
    from mmgrid.stats import mean_ci

    rows = {p: (rows or {}).get(p, p) for p in RATIO_TARGETS}
    if "sasrec" not in results:
        return "(targets need the sasrec row)"
    first = next(iter(results.values()))
    pop = pooled(first, "popular", "recall")[:1]
    sas = pooled(results["sasrec"], "model", "recall")
    have = {p: pooled(results[r], "model", "recall") for p, r in rows.items() if r in results}
    checks = []  # (label, per-seed-and-pooled function of a seed slice, kind)
    for p, r in have.items():
        checks.append((f"{rows[p]} > most-popular", lambda s, r=r: r[s] - pop, "lo>0"))
        checks.append((f"{rows[p]} >= {RATIO_TARGETS[p]} x SASRec", lambda s, r=r, c=RATIO_TARGETS[p]: (r[s], c), "ratio"))
    for a, b, op in ORDER_TARGETS:
        if a in have and b in have:
            checks.append((f"{rows[a]} {op} {rows[b]}", lambda s, x=have[a], y=have[b]: x[s] - y[s],
                           "lo>0" if op == ">" else "mean>=0|ci"))
    slices = [(f"seed {seed}", slice(i, i + 1)) for i, seed in enumerate(seeds)] + [("pooled", slice(None))]
    lines = ["| target | " + " | ".join(n for n, _ in slices) + " |", "|---" * (len(slices) + 1) + "|"]
    for label, fn, kind in checks:
        cells = []
        for _, sl in slices:
            if kind == "ratio":
                r, c = fn(sl)
                ratio = r.mean() / sas[sl].mean()
                m, lo, hi = mean_ci(r - c * sas[sl])
                ok = ratio >= c
                cells.append(f"{'met' if ok else 'MISSED'}: {ratio:.2f}x; R - {c} SASRec {m:+.4f} [{lo:+.4f}, {hi:+.4f}]")
            else:
                m, lo, hi = mean_ci(fn(sl))
                ok = lo > 0 if kind == "lo>0" else (m >= 0 or lo <= 0 <= hi)
                cells.append(f"{'met' if ok else 'MISSED'}: {m:+.4f} [{lo:+.4f}, {hi:+.4f}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


PRESETS = ["default", "dense_short_text", "amazon_table1"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", nargs="+", default=PRESETS, choices=PRESETS,
                    help="world presets, one table each (default: all three; amazon_table1: MMGRid's Amazon "
                         "statistics, its first two domains are the largest, Health and Sports)")
    ap.add_argument("--paradigms", nargs="*", default=PARADIGMS, choices=PARADIGMS,
                    help="paradigm rows (default all four; none: only the --arm rows)")
    ap.add_argument("--arm", action="append", default=[], metavar="LABEL=PARADIGM:KEY=VALUE[,KEY=VALUE]",
                    help="one more row: PARADIGM with these paradigm_params changed, paired against its default "
                         "row (e.g. --arm emb-nobucket=emb:bucket_window=0); repeatable")
    ap.add_argument("--rank-arm", action="append", default=[], metavar="LABEL=PARADIGM:KEY=VALUE[,KEY=VALUE]",
                    help="one more row whose knobs change only the ranking (e.g. the text grounding: "
                         "--rank-arm mm=text:grounding_scale=minmax): the default checkpoints loaded with these "
                         "knobs (text: the default beams, generated once), paired against the default row; repeatable")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds (>= 3 for the targets)")
    ap.add_argument("--budget", nargs="+", type=int, default=[1500],
                    help="train.max_examples, one table each (demo 1500; 4x: 6000)")
    ap.add_argument("--domains", type=int, default=2, help="world.n_domains (the first N of the preset)")
    ap.add_argument("--eval-users", type=int, default=0,
                    help="evaluated examples per domain: a seeded sample of this many (0, the default: every example "
                         "of the window, as the targets ask: intervals over all its users)")
    ap.add_argument("--valid", action="store_true", help="evaluate on a window carved from p2, never on test")
    ap.add_argument("--valid-start", default=None,
                    help="first day of the validation window (p2 ends there; default 2022-12-01, the demo's p2)")
    ap.add_argument("--grid", default=None, metavar="YAML",
                    help="a grid on real data instead of a world preset (e.g. grids/ml100k.yaml, prepared from its "
                         "data.root: see docs/data.md); its table is labelled with the grid's name")
    ap.add_argument("--out", default="runs/bench-paradigms", help="world, registries and results go here")
    ap.add_argument("--tag", default="", help="name of this run's results file (default: from the options)")
    ap.add_argument("--record", default="paradigms",
                    help="the record's name: bench/results/NAME.md (default: paradigms, the test-window record)")
    ap.add_argument("--targets", action="store_true",
                    help="add the real-data targets table (each generative paradigm above most-popular, text >= "
                         "0.6x, semid >= 0.9x, emb >= 1.0x SASRec, emb >= semid > text), per seed and pooled")
    ap.add_argument("--as", dest="as_rows", action="append", default=[], metavar="PARADIGM=ROW",
                    help="with --targets: the row (an --arm or --rank-arm label) that stands for PARADIGM, e.g. "
                         "--as emb=emb-id; repeatable")
    ap.add_argument("--cached-only", action="store_true",
                    help="build and evaluate nothing: tabulate the cells already cached under --out (a row missing "
                         "a seed leaves that seed out of every row, so rows stay paired)")
    ap.add_argument("--fresh", action="store_true", help="ignore cached results (checkpoints are still reused)")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE grid overrides (e.g. paradigm_params.semid.codes=fused)")
    args = ap.parse_args(argv)
    arms = parse_arms(args.arm)
    rank_arms = parse_rank_arms(args.rank_arm, set(arms))

    from mmgrid.runtime.progress import set_quiet

    set_quiet(True)
    if args.grid:
        from mmgrid.config import load_grid

        g = load_grid(args.grid)
        args.preset, args.domains = [g.name], len(g.data.domains)
        if args.budget == [1500]:
            args.budget = [g.train.max_examples]
    presets, budgets = list(args.preset), list(args.budget)
    for preset in presets:
        for budget in budgets:
            args.preset, args.budget = preset, budget
            run_one(args, arms, rank_arms)
    return 0


def run_one(args: argparse.Namespace, arms: dict[str, tuple[str, list[str]]],
            rank_arms: dict[str, tuple[str, dict]] | None = None) -> None:
    """One preset and budget: build or reuse every cell, print and save the table."""
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world

    out = Path(args.out)
    cache_dir = out / "cells"
    cache_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    missing: list[str] = []  # --cached-only: the cells not in the cache
    prepared_done = False
    rows = [(p, p, []) for p in args.paradigms] + [(label, par, over) for label, (par, over) in arms.items()]
    t_start = time.perf_counter()
    for label, p, extra in rows:
        for seed in args.seeds:
            cfg = grid_config(args, seed, p, extra)
            if not prepared_done:
                if cfg.world is not None and not (Path(cfg.data.root) / "truth.json").exists():
                    write_world(cfg.data.root, cfg.world)
                prepare(cfg, log=lambda m: None)
                prepared_done = True
            key = _cell_key(cfg, p, args)
            path = cache_dir / f"{key}.json"
            if path.exists() and not args.fresh:
                cell = json.loads(path.read_text())
            elif getattr(args, "cached_only", False):
                missing.append(f"{label} seed {seed}")
                continue
            else:
                print(f"  {args.preset} {label} seed {seed} budget {args.budget} "
                      f"({time.perf_counter() - t_start:.0f} s) ...", file=sys.stderr, flush=True)
                cell = evaluate_cell(cfg, p, args.eval_users)
                path.write_text(json.dumps(cell))
            results.setdefault(label, []).append(cell)
    rank_arms = rank_arms or {}
    for seed in args.seeds:
        for par in sorted({p for p, _ in rank_arms.values()}):
            cfg = grid_config(args, seed, par)
            key = _cell_key(cfg, par, args)
            paths = {label: cache_dir / f"{key}-rank-{stable_hash(over)[:12]}.json"
                     for label, (p, over) in rank_arms.items() if p == par}
            todo = {label: rank_arms[label][1] for label, path in paths.items() if args.fresh or not path.exists()}
            if todo:
                print(f"  {args.preset} rank arms {', '.join(todo)} seed {seed} budget {args.budget} "
                      f"({time.perf_counter() - t_start:.0f} s) ...", file=sys.stderr, flush=True)
                (out / "beams").mkdir(exist_ok=True)
                for label, cell in evaluate_rank_arms(cfg, par, args.eval_users, todo, out / "beams", key).items():
                    paths[label].write_text(json.dumps(cell))
            for label, path in paths.items():
                results.setdefault(label, []).append(json.loads(path.read_text()))
    shown = {**arms, **{label: (p, [f"paradigm_params.{p}.{k}={v}" for k, v in over.items()], "rank")
                        for label, (p, over) in rank_arms.items()}}
    if missing:  # a row's seeds must line up with SASRec's: keep the seeds every row has
        have = [sd for sd in args.seeds if all(f"{label} seed {sd}" not in missing for label in results)]
        print(f"--cached-only: not in the cache: {', '.join(missing)}", file=sys.stderr)
        results = {label: [c for sd, c in zip([sd for sd in args.seeds if f"{label} seed {sd}" not in missing], cells)
                           if sd in have] for label, cells in results.items()}
        results = {label: cells for label, cells in results.items() if cells}
        args.seeds = have
    text = table(results, args, shown)
    if getattr(args, "targets", False):
        text += "\n\nTargets (paired per-user differences, 95% bootstrap intervals; per seed over users, pooled over " \
                "users and seeds):\n\n" + targets_table(results, list(args.seeds), parse_rows(args.as_rows))
    print(text + "\n")
    tag = args.tag or f"{args.preset}-{'valid' if args.valid else 'test'}-b{args.budget}-s{'_'.join(map(str, args.seeds))}"
    (out / f"{tag}.md").write_text(f"$ python bench/paradigms.py {' '.join(sys.argv[1:])}\n\n{text}\n")
    (out / f"{tag}.json").write_text(json.dumps({"args": vars(args), "results": results}))
    print(f"saved {out / (tag + '.md')} and {out / (tag + '.json')}\n")


def stable_hash(obj) -> str:
    from mmgrid.configtools import stable_hash as h

    return h(obj)


def _cell_key(cfg, paradigm: str, args: argparse.Namespace) -> str:
    """The cache key of one cell: the checkpoint ids it depends on are not known before the build, so
    the key hashes what decides them (the grid's config, the paradigm and the evaluation sample)."""
    from mmgrid.configtools import stable_hash, to_dict
    from mmgrid.runtime.plan import _train_version

    d = to_dict(cfg)
    # only this paradigm's knobs: another paradigm's --arm must not invalidate this one's cells
    d["paradigm_params"] = {paradigm: dict(d.get("paradigm_params", {}).get(paradigm, {}))}
    return stable_hash({"cfg": d, "paradigm": paradigm, "eval_users": args.eval_users, "k": K,
                        **_train_version(paradigm)})[:16]


if __name__ == "__main__":
    sys.path.append(str(HERE))  # last, so that it shadows nothing
    from record import run_recorded  # bench/record.py: writes bench/results/paradigms.md (--record NAME: NAME.md)

    run_recorded(main, "paradigms")
