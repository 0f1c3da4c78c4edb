"""Benchmark: ``mmgrid prepare`` vs a straightforward pandas implementation of the same steps.

Both sides read the same synthetic world (gzipped Amazon 2023 JSON lines, >= 2M reviews by
default), keep reviews of titled items, dedupe (user, item) keeping the earliest, keep the phase
windows, run the iterative 5-core, assign phases and build histories of at most 20 earlier items,
and write the examples to parquet. Each side runs in its own subprocess so that its peak memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) is its own.

    python bench/data_prep.py                 # scale 75 (~2M reviews)
    python bench/data_prep.py --scale 10      # a quick run

Prints rows per second and peak memory of each side and the ratios (target: >= 5x faster at
<= 1/3 of the peak memory).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

PHASES = {"pretrain": (None, "2022-07-01"), "p1": ("2022-07-01", "2022-10-01"),
          "p2": ("2022-10-01", "2023-01-01"), "test": ("2023-01-01", "2023-04-01")}  # fmt: skip
K, H = 5, 20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def run_mmgrid(world: Path, out: Path) -> dict:
    from mmgrid.config import GridConfig
    from mmgrid.config import DataConfig
    from mmgrid.data.pipeline import prepare

    cfg = GridConfig(name="bench", data=DataConfig(root=str(world), kcore=K, max_history=H), prepared=str(out))
    t = time.perf_counter()
    ds = prepare(cfg, log=lambda m: None)
    secs = time.perf_counter() - t
    rows = sum(v["reviews"] for v in ds.manifest["rows"].values())
    ex = sum(sum(v["examples_by_phase"].values()) for v in ds.manifest["rows"].values())
    return {"seconds": secs, "reviews": rows, "examples": ex, "peak_mb": _peak_mb()}


def run_pandas(world: Path, out: Path) -> dict:
    import pandas as pd

    t = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    rows = ex_total = 0
    bounds = {k: (pd.Timestamp(a, tz="UTC").value // 10**6 if a else None, pd.Timestamp(b, tz="UTC").value // 10**6)
              for k, (a, b) in PHASES.items()}  # fmt: skip
    for rev_path in sorted((world / "raw" / "review_categories").glob("*.jsonl.gz")):
        name = rev_path.name.split(".")[0]
        reviews = pd.read_json(rev_path, lines=True, compression="gzip", convert_dates=False)
        meta = pd.read_json(world / "raw" / "meta_categories" / f"meta_{name}.jsonl.gz", lines=True, compression="gzip",
                            convert_dates=False)
        rows += len(reviews)
        titled = meta[meta["title"].fillna("").str.strip() != ""]["parent_asin"]
        df = reviews[reviews["parent_asin"].isin(titled)][["user_id", "parent_asin", "timestamp"]]
        df = df.sort_values("timestamp").drop_duplicates(["user_id", "parent_asin"], keep="first")
        df["phase"] = None
        for ph, (a, b) in bounds.items():
            m = (df["timestamp"] < b) & ((df["timestamp"] >= a) if a is not None else True)
            df.loc[m, "phase"] = ph
        df = df[df["phase"].notna()]
        while True:  # iterative k-core
            n = len(df)
            df = df[df.groupby("user_id")["user_id"].transform("size") >= K]
            df = df[df.groupby("parent_asin")["parent_asin"].transform("size") >= K]
            if len(df) == n:
                break
        df = df.sort_values(["user_id", "timestamp", "parent_asin"])
        examples = []
        for user, g in df.groupby("user_id", sort=False):
            items, ts, phases = g["parent_asin"].tolist(), g["timestamp"].tolist(), g["phase"].tolist()
            for i in range(len(items)):
                hist = [items[j] for j in range(i) if ts[j] < ts[i]][-H:]
                if hist:
                    examples.append((phases[i], user, items[i], hist, ts[i]))
        ex = pd.DataFrame(examples, columns=["phase", "user_id", "target", "history", "timestamp"])
        ex.to_parquet(out / f"{name}.examples.parquet")
        df.to_parquet(out / f"{name}.interactions.parquet")
        ex_total += len(ex)
    return {"seconds": time.perf_counter() - t, "reviews": rows, "examples": ex_total, "peak_mb": _peak_mb()}


def _child(side: str, world: Path, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", side, "--world", str(world), "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{side} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=75.0, help="world scale (75: about 2M reviews)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default="runs/bench", help="where the world and outputs go")
    ap.add_argument("--child", choices=["mmgrid", "pandas"], help=argparse.SUPPRESS)
    ap.add_argument("--world", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        fn = run_mmgrid if args.child == "mmgrid" else run_pandas
        print(json.dumps(fn(Path(args.world), Path(args.out))))
        return
    base = Path(args.dir)
    world = base / f"world_s{args.scale:g}_seed{args.seed}"
    if not (world / "truth.json").exists():
        from mmgrid.config import WorldConfig
        from mmgrid.data.world_files import write_world

        t = time.perf_counter()
        write_world(world, WorldConfig(seed=args.seed, scale=args.scale))
        print(f"world written in {time.perf_counter() - t:.1f} s: {world}")
    results = {}
    for side in ("mmgrid", "pandas"):
        out = base / f"out_{side}"
        shutil.rmtree(out, ignore_errors=True)
        results[side] = r = _child(side, world, out)
        print(f"{side:>7}: {r['reviews']:,} reviews -> {r['examples']:,} examples in {r['seconds']:.1f} s = "
              f"{r['reviews'] / r['seconds']:,.0f} rows/s; peak memory {r['peak_mb']:,.0f} MB")  # fmt: skip
    m, p = results["mmgrid"], results["pandas"]
    speed = p["seconds"] / m["seconds"]
    mem = m["peak_mb"] / p["peak_mb"]
    print(f"speed-up mmgrid vs pandas: {speed:.1f}x (target >= 5x); peak memory ratio: {mem:.2f} (target <= 0.33)")
    if m["examples"] != p["examples"]:
        print(f"note: example counts differ ({m['examples']} vs {p['examples']})")


if __name__ == "__main__":
    from record import recorded  # bench/record.py: writes bench/results/data_prep.md

    with recorded("data_prep"):
        main()
