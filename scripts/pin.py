"""Record what a demo run computed, to compare two code versions (behaviour pin).

    python scripts/pin.py RUN_DIR > pin.json          # RUN_DIR = a `mmgrid demo --out` folder
    python scripts/pin.py --diff before.json after.json [--loose]

The record holds every checkpoint id with its coordinates, every recorded result (its
recipe's input ids, method, metric and value) and the report's lines with the run's paths,
dates and timings blanked. Two runs of the same code on one machine give equal records.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def record(run: Path) -> dict:
    from mmgrid import Registry

    reg = Registry.open(run / "registry")
    ckpts = reg.query()
    cols = [c for c in ("id", "paradigm", "domain", "period", "variant", "kind") if c in ckpts.columns]
    ckpt_rows = sorted(json.dumps([str(r[c]) for c in cols]) for _, r in ckpts.iterrows())
    res = reg.results()
    # `key` is a random uuid per record; the rest is what the run computed
    keep = [c for c in res.columns if c not in ("key", "created", "time", "timestamp", "duration_s", "seconds")]
    res_rows = sorted(json.dumps({c: (repr(r[c]) if isinstance(r[c], float) else str(r[c])) for c in keep},
                                 sort_keys=True) for _, r in res.iterrows())
    report = (run / "report.md").read_text().splitlines()
    blank = [(re.compile(str(run.resolve())), "RUN"), (re.compile(str(run)), "RUN"),
             (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?\S*"), "DATE"),
             (re.compile(r"\(\d+(\.\d+)? s\)"), "(T s)")]
    lines = []
    for line in report:
        for pat, rep in blank:
            line = pat.sub(rep, line)
        lines.append(line)
    return {"checkpoints": ckpt_rows, "results": res_rows, "report": as_sets(lines)}


ID_LIST = re.compile(r"^- (.+?): ((`[0-9a-f]{16}`(, )?)+)(.*)$")


def as_sets(lines: list[str]) -> list[str]:
    """The report's lines with each id list of the lineage appendix (``- row: `id`, `id` ...``, a set of
    registry ids) in sorted order, and each block of such lines sorted."""
    out: list[str] = []
    block: list[str] = []
    for line in lines + [""]:
        m = ID_LIST.match(line)
        if m:
            ids = sorted(re.findall(r"`[0-9a-f]{16}`", m.group(2)))
            block.append(f"- {m.group(1)}: {', '.join(ids)}{m.group(5)}")
            continue
        out += sorted(block)
        block = []
        out.append(line)
    return out[:-1]


def loosen(rec: dict) -> dict:
    """The record with every checkpoint id replaced by its coordinates and hashes of paths blanked.

    Ids, the prepared data's fingerprint and the grid hash depend on the run's folder (the grid
    records ``data.root`` and the output paths), so two runs in different folders compare only
    this way; two runs in the same folder compare strictly.
    """
    names = {}
    for row in rec["checkpoints"]:
        cid, *coords = json.loads(row)
        names[cid] = "<" + "/".join(coords) + ">"
    pat = re.compile("|".join(map(re.escape, sorted(names, key=len, reverse=True)))) if names else None
    sub = (lambda t: pat.sub(lambda m: names[m.group(0)], t)) if pat else (lambda t: t)
    hashes = re.compile(r"(fingerprint|grid hash|recipe_hash\": \"|key\": \")[ `]*[0-9a-f]{16,32}")
    out = {}
    for key in ("checkpoints", "results", "report"):
        out[key] = [hashes.sub(r"\1 H", sub(x)) for x in rec[key]]
    out["report"] = [re.sub(r"`[0-9a-f]{16}`", "`H`", x) for x in out["report"]]  # recipe hashes
    return out


def diff(a: dict, b: dict) -> int:
    if "--loose" in sys.argv:
        a, b = loosen(a), loosen(b)
    bad = 0
    for key in ("checkpoints", "results", "report"):
        sa, sb = a[key], b[key]
        if key == "report":
            import difflib
            d = list(difflib.unified_diff(sa, sb, "before", "after", lineterm="", n=0))
            print(f"{key}: {len(sa)} vs {len(sb)} lines, {'identical' if not d else 'DIFFERENT'}")
            for line in d[:60]:
                print("   ", line)
            bad += bool(d)
            continue
        only_a, only_b = sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa))
        print(f"{key}: {len(sa)} vs {len(sb)}; only before {len(only_a)}, only after {len(only_b)}")
        for row in (only_a[:5] + only_b[:5]):
            print("   ", row[:300])
        bad += bool(only_a or only_b)
    print("IDENTICAL" if not bad else "DIFFERENT")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "--diff":
        sys.exit(diff(json.loads(Path(sys.argv[2]).read_text()), json.loads(Path(sys.argv[3]).read_text())))
    json.dump(record(Path(sys.argv[1])), sys.stdout, indent=1)
