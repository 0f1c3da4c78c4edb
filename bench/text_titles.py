"""Where the text paradigm's Recall@10 comes from: the titles it generates, measured per user.

BIGRec-style ranking (mmgrid/paradigms/text.py) has two steps: the LM generates ``num_beams``
titles by beam search, then grounding turns them into a ranking of every item. A hit can come
from generation (the target's own title is one of the beams) or from grounding (the target is a
neighbour of a generated title, or popular). For each preset or grid and training seed this
script builds (or reuses, by id) the text paradigm's p2 checkpoints exactly as
``bench/paradigms.py`` does, generates the beams of every evaluated example once per beam width
(``--beams``), and reports, as per-user means over users and seeds with 95% bootstrap intervals
(``mmgrid.stats.mean_ci``):

- ``valid``: share of beams that are an exact catalog title (the rest are novel strings that
  grounding maps to their nearest titles);
- ``best = target``: share of examples whose best beam is the target's title;
- ``target in beams``: share whose target title is among the beams: the Recall@10 that
  generation alone can reach at that width, whatever grounding does;
- ``R@10``: the grounded ranking's Recall@10 (the paradigm's defaults); ``R@10 where generated``
  and ``R@10 where not``: the same over the examples whose target title is among the beams, and
  over the others;
- ``most-popular R@10``: the same examples ranked by training-phase counts (``mmgrid eval``'s
  baseline), to read ``R@10 where not`` against;
- ``distinct best``: distinct best-beam titles over all examples, against the catalog size
  (a model that writes the same few titles for everyone has collapsed onto popular ones).

The beams of the default width are those ``bench/paradigms.py --rank-arm`` caches (the same
file under ``--out/beams``), so running both shares one generation.

Usage::

    python bench/text_titles.py --grid grids/ml100k.yaml --seeds 0 1 2 --out runs/bench-ml
    python bench/text_titles.py --preset default amazon_table1 --seeds 0 --beams 4 10 --out runs/bench-paradigms

The record is ``bench/results/text_titles.md`` (``--record NAME``: ``bench/results/NAME.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and sys.path[0].rstrip("/").endswith("bench"):
    sys.path.pop(0)
sys.path.insert(0, str(HERE.parent))

import numpy as np

STATS = ["valid", "best_is_target", "target_in_beams", "recall", "recall_found", "recall_missed", "popular"]
LABELS = {"valid": "valid", "best_is_target": "best = target", "target_in_beams": "target in beams",
          "recall": "R@10", "recall_found": "R@10 where generated", "recall_missed": "R@10 where not",
          "popular": "most-popular R@10"}


def seed_stats(args: argparse.Namespace, seed: int, width: int) -> dict[str, dict]:
    """Per domain, the per-example statistics of the module docstring for one seed and beam width
    (the beams generated once and cached as JSON)."""
    import paradigms as P

    from mmgrid.eval.popular import popular_ranking
    from mmgrid.eval.ranking import Evaluator
    from mmgrid.paradigms import get_paradigm
    from mmgrid.runtime.checkpoints import load_checkpoint
    from mmgrid.runtime.context import open_prepared, open_registry
    from mmgrid.train.base_lm import ensure_base
    from mmgrid.train.build import build_grid

    cfg = P.grid_config(args, seed, "text")
    prepared, registry = open_prepared(cfg.prepared), open_registry(cfg.registry)
    ensure_base(cfg.base, prepared, registry, seed=cfg.train.seed)
    res = build_grid(cfg, progress=False)
    par = get_paradigm("text")
    params = dict(cfg.paradigm_params.get("text", {}))
    default_width = int(par.defaults["num_beams"])
    key = P._cell_key(cfg, "text", args)
    out: dict[str, dict] = {}
    for (_, domain), cid in res.final_ids().items():
        dom = prepared.domain(domain)
        over = {} if width == default_width else {"num_beams": width}
        model = par.load(load_checkpoint(registry, cid), dom, {**params, **over})
        model.eval()
        ev = Evaluator(par, dom, split=cfg.eval.split, ks=[P.K], groups=["all"],
                       max_users=args.eval_users or None, seed=0)
        suffix = "" if width == default_width else f"-w{width}"
        path = Path(args.out) / "beams" / f"{key}{suffix}-{domain}.json"  # bench/paradigms.py's name at the default
        t0 = time.perf_counter()
        fresh = not path.exists()
        beams = P.cached_beams(par, model, ev, path)
        if fresh:
            print(f"  {args.preset} text seed {seed} width {width}: generated {ev.n} examples in "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        titles = [t.strip() for t in dom.item_titles]
        catalog, k = set(titles), min(P.K, dom.n_items)
        ranked = np.zeros((ev.n, k), dtype=np.int64)
        texts: list[list[str]] = [[] for _ in range(ev.n)]
        for b in beams:
            hist = [ev.histories[i] for i in b["rows"]]
            ranked[b["rows"]] = par.rank_generated(model, dom, hist, k, b["texts"], np.asarray(b["scores"]))
            for i, row in zip(b["rows"], b["texts"]):
                texts[i] = row
        ex = title_stats(texts, [titles[int(t)] for t in ev.targets], catalog)
        ex["recall"] = np.asarray(P.hits(ranked, ev.targets)["recall"])
        pop = popular_ranking(dom.popularity(list(cfg.train.stages)), P.K,
                              ev.histories if cfg.eval.popular_exclude_history else None)
        ex["popular"] = np.asarray(P.hits(np.broadcast_to(pop, (ev.n, pop.shape[-1])), ev.targets)["recall"])
        out[domain] = {"users": ev.users, **ex, "distinct_best": len({row[0] for row in texts}), "n_items": dom.n_items}
    return out


def title_stats(texts: list[list[str]], targets: list[str], catalog: set[str]) -> dict[str, np.ndarray]:
    """Per example (``texts[i]``: its beams, best first; ``targets[i]``: its target's title): the share
    of its beams that are catalog titles, whether the best beam is the target, and whether any is."""
    return {"valid": np.array([np.mean([t in catalog for t in row]) for row in texts]),
            "best_is_target": np.array([float(row[0] == tg) for row, tg in zip(texts, targets)]),
            "target_in_beams": np.array([float(tg in row) for row, tg in zip(texts, targets)])}


def user_means(users: np.ndarray, values: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """Each user's mean of ``values`` (over the examples in ``where``; NaN for a user with none)."""
    where = np.ones(len(values), dtype=bool) if where is None else where
    uniq, inv = np.unique(users, return_inverse=True)
    num = np.bincount(inv, weights=values * where, minlength=len(uniq))
    den = np.bincount(inv, weights=where.astype(float), minlength=len(uniq))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def table(args: argparse.Namespace, cells: dict[int, dict[int, dict]]) -> str:
    """One row per beam width: every statistic pooled over users, seeds and domains."""
    from mmgrid.stats import mean_ci

    lines = [f"preset {args.preset}, test window, budget train.max_examples={args.budget}, seeds {args.seeds}; "
             "per-user means, 95% bootstrap intervals over users and seeds",
             "", "| beams | " + " | ".join(LABELS[s] for s in STATS) + " | distinct best / items |",
             "|---" * (len(STATS) + 2) + "|"]
    for width, by_seed in cells.items():
        cols = {s: [] for s in STATS}
        distinct = []
        for seed in args.seeds:
            for d in by_seed[seed].values():
                users, found = np.asarray(d["users"]), d["target_in_beams"] > 0
                for s in STATS[:4] + ["popular"]:
                    cols[s].append(user_means(users, d[s]))
                cols["recall_found"].append(user_means(users, d["recall"], found))
                cols["recall_missed"].append(user_means(users, d["recall"], ~found))
                distinct.append(f"{d['distinct_best']} / {d['n_items']}")
        cells_txt = []
        for s in STATS:
            a = np.concatenate(cols[s])
            a = a[np.isfinite(a)]
            if len(a) > 1:
                m, lo, hi = mean_ci(a)
                cells_txt.append(f"{m:.4f} [{lo:.4f}, {hi:.4f}]")
            else:  # one user (or none): no interval
                cells_txt.append(f"{a.mean():.4f} (n={len(a)})" if len(a) else "- (n=0)")
        lines.append(f"| {width} | " + " | ".join(cells_txt) + f" | {', '.join(distinct)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import paradigms as P

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--preset", nargs="+", default=["default"], choices=P.PRESETS)
    ap.add_argument("--grid", default=None, metavar="YAML", help="a grid on real data (e.g. grids/ml100k.yaml)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--beams", nargs="+", type=int, default=[4], help="beam widths to generate with (4: the default)")
    ap.add_argument("--budget", type=int, default=None, help="train.max_examples (default: the grid's, or 1500)")
    ap.add_argument("--domains", type=int, default=2, help="world.n_domains (the first N of a preset)")
    ap.add_argument("--eval-users", type=int, default=0)
    ap.add_argument("--out", default="runs/bench-paradigms", help="the --out of bench/paradigms.py (shared)")
    ap.add_argument("--record", default="text_titles")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE grid overrides")
    args = ap.parse_args(argv)
    args.valid = False
    if any(w < 1 for w in args.beams):
        raise SystemExit(f"--beams {args.beams}: every width must be >= 1")

    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.runtime.progress import set_quiet

    set_quiet(True)
    if args.grid:
        from mmgrid.config import load_grid

        g = load_grid(args.grid)
        presets, args.domains = [g.name], len(g.data.domains)
        args.budget = args.budget or g.train.max_examples
    else:
        presets, args.budget = list(args.preset), args.budget or 1500
    texts = []
    t0 = time.perf_counter()
    for preset in presets:
        args.preset = preset
        cfg = P.grid_config(args, args.seeds[0], "text")
        if cfg.world is not None and not (Path(cfg.data.root) / "truth.json").exists():
            write_world(cfg.data.root, cfg.world)
        prepare(cfg, log=lambda m: None)
        cells = {w: {seed: seed_stats(args, seed, w) for seed in args.seeds} for w in args.beams}
        texts.append(table(args, cells))
    print("\n\n".join(texts) + f"\n\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.path.append(str(HERE))  # last, so that it shadows nothing
    from record import run_recorded  # bench/record.py: writes bench/results/text_titles.md (--record NAME: NAME.md)

    run_recorded(main, "text_titles")
