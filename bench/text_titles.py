"""What the text paradigm generates on a grid: are its beams catalog titles, the target's title, a title of the
history, and how often does grounding without popularity find the target?

Reads the beams that ``bench/paradigms.py --rank-arm ...`` cached for the text paradigm's default checkpoints
(``--out/beams/<cell>-<domain>.json``, one per seed) and the grid's prepared domain, and prints per beam file:

- exact: the share of first beams equal to some catalog title (after stripping spaces);
- target: the share of first beams equal to the target's title; any beam equal to it;
- history: the share of first beams equal to a title of that user's history (copying);
- distinct: how many distinct first beams there are, and the share of examples whose first beam is
  one of the ten most frequent first beams (a model that repeats a few popular titles);
- popular: the share of first beams that are the title of one of the 10 most popular items of p2.

Usage::

    python bench/text_titles.py --grid grids/ml100k.yaml --beams runs/bench-ml/beams
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and sys.path[0].rstrip("/").endswith("bench"):
    sys.path.pop(0)
sys.path.insert(0, str(HERE.parent))

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", required=True, help="the grid whose prepared data the beams were generated on")
    ap.add_argument("--beams", required=True, help="bench/paradigms.py's --out/beams folder")
    ap.add_argument("--split", default="test")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE grid overrides (e.g. prepared=...)")
    args = ap.parse_args(argv)
    from mmgrid.config import load_grid
    from mmgrid.data.dataset import load_prepared
    from mmgrid.eval.ranking import Evaluator
    from mmgrid.paradigms import get_paradigm

    cfg = load_grid(args.grid, args.overrides)
    ds = load_prepared(cfg.prepared)
    for path in sorted(Path(args.beams).glob("*.json")):
        domain = path.stem.rsplit("-", 1)[-1] if path.stem.count("-") == 1 else path.stem.split("-", 1)[1]
        if domain not in ds.domains:
            continue
        dom = ds.domain(domain)
        ev = Evaluator(get_paradigm("text"), dom, split=args.split, ks=[10], groups=["all"], seed=0)
        titles = [t.strip() for t in dom.item_titles]
        catalog = set(titles)
        pop = dom.popularity(["p2"])
        top_pop = {titles[i] for i in np.argsort(-pop)[:10]}
        first, exact, target, anyb, hist = [], 0, 0, 0, 0
        n = 0
        for b in json.loads(path.read_text()):
            for row, beams in zip(b["rows"], b["texts"]):
                t0 = beams[0].strip()
                first.append(t0)
                tgt = titles[int(ev.targets[row])]
                exact += t0 in catalog
                target += t0 == tgt
                anyb += any(x.strip() == tgt for x in beams)
                hist += t0 in {titles[i] for i in ev.histories[row]}
                n += 1
        counts = collections.Counter(first)
        top10 = sum(c for _, c in counts.most_common(10))
        print(f"{path.name}: {n} examples; first beam a catalog title {exact / n:.3f}, the target's title "
              f"{target / n:.4f} (any beam {anyb / n:.4f}), a history title {hist / n:.3f}; {len(counts)} distinct "
              f"first beams, the 10 most frequent cover {top10 / n:.3f}; first beam among p2's 10 most popular "
              f"titles {sum(c for t, c in counts.items() if t in top_pop) / n:.3f}")
        print("   most frequent first beams: " + "; ".join(f"{t!r} {c}" for t, c in counts.most_common(5)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
