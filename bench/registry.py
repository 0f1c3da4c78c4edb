"""Benchmark the registry against plain ``save_file``/``load_file`` per checkpoint.

Three ways of storing a 12-checkpoint grid (3 domains x 4 periods) of a ~100M-parameter
decoder-shaped model, in two scenarios:

* ``all-change``: every stage changes every tensor (full fine-tuning);
* ``partial``: stages keep the embedding and the lower half of the layers frozen.

Stores compared (all in the same run, same data):

* ``baseline``: ``save_file(state, dir/<name>.safetensors)`` / ``load_file`` (no hashing,
  no fsync, no dedupe) — what a script would do;
* ``per-ckpt``: one content-addressed blob per checkpoint (serialize, sha256, write temp,
  fsync, rename) — the alternative design;
* ``registry``: ``Registry.put`` / ``Registry.load`` (one blob per tensor, fsync, verified
  first read).

Then query latency on an index of 10,000 checkpoints (target: a filtered query < 10 ms),
against the index-free path (worker mode: scan every manifest).

Usage: ``python bench/registry.py [--params 1e8] [--stages 4] [--domains 3] [--n-index 10000]``.
Loads read from the page cache (the files were just written), so they measure the
software path, not the disk; every load touches every page of its tensors, because
``load_file`` maps files lazily. The baseline neither hashes nor fsyncs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from mmgrid.registry.api import Registry
from mmgrid.registry.store import forget_verified


def model_shapes(n_params: float) -> dict[str, tuple[int, ...]]:
    """A decoder: embedding, 12 layers of attention + MLP + norms; hidden 768, vocab scaled to hit n_params."""
    hidden, layers, inter = 768, 12, 3072
    per_layer = 4 * hidden * hidden + 2 * hidden * inter + 2 * hidden
    vocab = max(1000, int((n_params - layers * per_layer) / hidden)) if n_params > layers * per_layer else 1000
    if n_params < layers * per_layer:  # small runs: shrink the layers instead
        hidden = max(64, int((n_params / (layers * 12)) ** 0.5))
        inter, vocab = 4 * hidden, 1000
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        for p in ("q", "k", "v", "o"):
            shapes[f"model.layers.{i}.self_attn.{p}_proj.weight"] = (hidden, hidden)
        shapes[f"model.layers.{i}.mlp.up_proj.weight"] = (inter, hidden)
        shapes[f"model.layers.{i}.mlp.down_proj.weight"] = (hidden, inter)
        shapes[f"model.layers.{i}.input_layernorm.weight"] = (hidden,)
        shapes[f"model.layers.{i}.post_attention_layernorm.weight"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    return shapes


def trainable(name: str, scenario: str) -> bool:
    if scenario == "all-change":
        return True
    if "layers." not in name:
        return False  # embedding and final norm frozen
    return int(name.split("layers.")[1].split(".")[0]) >= 6  # upper half trains


def make_grid(shapes: dict[str, tuple[int, ...]], scenario: str, domains: int, stages: int):
    """Yield (name, state) for each checkpoint, chains per domain from one shared base."""
    g = torch.Generator().manual_seed(0)
    base = {k: torch.randn(s, generator=g) * 0.02 for k, s in shapes.items()}
    for d in range(domains):
        state = base
        for p in range(stages):
            state = {k: (v + torch.randn(v.shape, generator=g) * 1e-3 if trainable(k, scenario) else v) for k, v in state.items()}
            yield f"d{d}", f"p{p}", state


def touch(state: dict[str, torch.Tensor]) -> None:
    """Read one byte of every 4 KiB page: lazily mmapped tensors (load_file, safe_open) must
    really be read, as eagerly read ones are, before load speeds can be compared."""
    for t in state.values():
        if t.numel():
            t.reshape(-1).view(torch.uint8)[::4096].sum()


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and "index.sqlite" not in f.name)


def per_ckpt_put(root: Path, state: dict[str, torch.Tensor]) -> str:
    data = save(state)
    sha = hashlib.sha256(data).hexdigest()
    path = root / f"{sha}.safetensors"
    if not path.exists():
        tmp = root / f".{sha}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    return sha


def per_ckpt_load(root: Path, sha: str) -> dict[str, torch.Tensor]:
    data = (root / f"{sha}.safetensors").read_bytes()
    if hashlib.sha256(data).hexdigest() != sha:
        raise RuntimeError("corrupt")
    from safetensors.torch import load

    return load(data)


def bench_storage(work: Path, shapes, scenario: str, domains: int, stages: int) -> dict[str, dict[str, float]]:
    n_bytes = sum(torch.Size(s).numel() * 4 for s in shapes.values())
    grid = list(make_grid(shapes, scenario, domains, stages))
    total = n_bytes * len(grid) / 1e6
    out: dict[str, dict[str, float]] = {}

    base_dir = work / "baseline"
    base_dir.mkdir()
    t = time.perf_counter()
    for dom, per, st in grid:
        save_file(st, str(base_dir / f"{dom}-{per}.safetensors"))
    put_s = time.perf_counter() - t
    t = time.perf_counter()
    for dom, per, _ in grid:
        touch(load_file(str(base_dir / f"{dom}-{per}.safetensors")))
    out["baseline"] = {"put_MBps": total / put_s, "load_MBps": total / (time.perf_counter() - t), "disk_MB": dir_bytes(base_dir) / 1e6}
    shutil.rmtree(base_dir)

    pc = work / "per_ckpt"
    pc.mkdir()
    t = time.perf_counter()
    shas = [per_ckpt_put(pc, st) for _, _, st in grid]
    put_s = time.perf_counter() - t
    t = time.perf_counter()
    for sha in shas:
        touch(per_ckpt_load(pc, sha))
    out["per-ckpt"] = {"put_MBps": total / put_s, "load_MBps": total / (time.perf_counter() - t), "disk_MB": dir_bytes(pc) / 1e6}
    shutil.rmtree(pc)

    reg = Registry.open(work / "reg")
    forget_verified()
    t = time.perf_counter()
    ids = [reg.put(st, {"paradigm": "text", "domain": dom, "period": per}, "trained", params={"scenario": scenario}) for dom, per, st in grid]
    put_s = time.perf_counter() - t
    forget_verified()  # measure the verified first read
    t = time.perf_counter()
    for cid in ids:
        touch(reg.load(cid))
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    for cid in ids:
        touch(reg.load(cid))
    again_s = time.perf_counter() - t
    out["registry"] = {"put_MBps": total / put_s, "load_MBps": total / load_s, "reload_MBps": total / again_s,
                       "disk_MB": dir_bytes(reg.root) / 1e6}
    reg.close()
    shutil.rmtree(reg.root)
    out["_"] = {"logical_MB": total}
    return out


def bench_query(work: Path, n: int) -> dict[str, float]:
    reg = Registry.open(work / "qreg", durable=False)  # scratch registry: no fsync while filling
    tiny = {"w": torch.zeros(4)}
    paradigms, domains, periods = ["text", "semid", "emb", "sasrec"], [f"dom{i}" for i in range(10)], ["p0", "p1", "p2", "p3", "p4"]
    variants = max(1, n // (len(paradigms) * len(domains) * len(periods)))
    t = time.perf_counter()
    for v in range(variants):
        for p in paradigms:
            for d in domains:
                for per in periods:
                    reg.put(tiny, {"paradigm": p, "domain": d, "period": per, "variant": f"v{v}", "lam": v / 10}, "trained")
    fill_s = time.perf_counter() - t
    count = len(reg.query())

    def timed(fn, reps: int = 50) -> float:
        fn()
        xs = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            xs.append(time.perf_counter() - t0)
        return statistics.median(xs) * 1e3

    res = {
        "n_checkpoints": count,
        "fill_s": fill_s,
        "filtered_ms": timed(lambda: reg.query(paradigm="text", domain="dom3", period="p2")),
        "filtered_rows": len(reg.query(paradigm="text", domain="dom3", period="p2")),
        "one_cell_ms": timed(lambda: reg.query(paradigm="text", domain="dom3", period="p2", variant="v7")),
        "extra_coord_ms": timed(lambda: reg.query(paradigm="text", lam=0.7)),
        "get_by_coords_ms": timed(lambda: reg.get({"paradigm": "text", "domain": "dom3", "period": "p2", "variant": "v7"})),
        "full_table_ms": timed(lambda: reg.query(), reps=5),
        "sync_nothing_new_ms": timed(lambda: reg.sync()),
    }
    worker = Registry.open(reg.root, index=False)
    t = time.perf_counter()
    worker.query(paradigm="text", domain="dom3", period="p2")
    res["no_index_scan_ms"] = (time.perf_counter() - t) * 1e3
    reg.close()
    shutil.rmtree(reg.root)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=float, default=1e8, help="model size in parameters (default 1e8)")
    ap.add_argument("--domains", type=int, default=3)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--n-index", type=int, default=10_000, help="checkpoints in the query benchmark's index")
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temp folder, removed after)")
    ap.add_argument("--skip-storage", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="mmgrid-bench-", dir=args.workdir))
    try:
        if not args.skip_storage:
            shapes = model_shapes(args.params)
            n = sum(torch.Size(s).numel() for s in shapes.values())
            print(f"model: {n / 1e6:.1f}M params float32, {len(shapes)} tensors; grid {args.domains} x {args.stages} = {args.domains * args.stages} checkpoints")
            for scenario in ("all-change", "partial"):
                out = bench_storage(work, shapes, scenario, args.domains, args.stages)
                logical = out.pop("_")["logical_MB"]
                b = out["baseline"]
                print(f"\n[{scenario}] logical size {logical:.0f} MB")
                print(f"{'store':10s} {'put MB/s':>9s} {'x base':>7s} {'load MB/s':>10s} {'x base':>7s} {'disk MB':>9s} {'x base':>7s}")
                for name, r in out.items():
                    print(f"{name:10s} {r['put_MBps']:9.0f} {r['put_MBps'] / b['put_MBps']:7.2f} {r['load_MBps']:10.0f} "
                          f"{r['load_MBps'] / b['load_MBps']:7.2f} {r['disk_MB']:9.0f} {r['disk_MB'] / b['disk_MB']:7.2f}")
                print(f"registry re-load (blobs already verified in this process): {out['registry']['reload_MBps']:.0f} MB/s "
                      f"({out['registry']['reload_MBps'] / b['load_MBps']:.2f} x base)")
        q = bench_query(work, args.n_index)
        print(f"\n[query] index of {q['n_checkpoints']} checkpoints (filled in {q['fill_s']:.1f} s, no fsync)")
        for k in ("filtered_ms", "one_cell_ms", "extra_coord_ms", "get_by_coords_ms", "full_table_ms", "sync_nothing_new_ms"):
            print(f"  {k:22s} {q[k]:8.2f} ms (median)")
        print(f"  filtered query returns {q['filtered_rows']} rows; target < 10 ms: {'met' if q['filtered_ms'] < 10 else 'MISSED'}")
        print(f"  baseline without the index (scan all manifests, first query of a worker): {q['no_index_scan_ms']:.0f} ms "
              f"= {q['no_index_scan_ms'] / q['filtered_ms']:.0f} x the indexed query")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from record import recorded  # bench/record.py: writes bench/results/registry.md

    with recorded("registry"):
        main()
