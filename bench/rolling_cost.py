"""Cost of the time axis: building a grid of N = 2, 4, 8 incremental periods (and its rolling deployment study).

Each N gets its own registry over the same prepared data (after a warm-up build of one period, so that no N
pays the process's one-off start-up costs; each registry trains its own tiny base, the same fixed cost for
every N): a tiny rolling_six world (two domains, monthly periods from 2022-01 on, the history before as
pretraining), the emb paradigm, one seed, small stages. A new period trains one stage per (paradigm, domain),
each fine-tuned from the previous one, so the cost per period should stay flat. Printed per N: the checkpoints
trained, the build's wall time, the training seconds per period (the incremental stages' own train logs,
summed over both domains, divided by N), the registry's bytes (every file under it) and the rolling study's
wall time without the accuracy matrix (its merges over the sequence grow with t; the matrix adds N x N
evaluations per strategy and is left out here). The ratios compare the training seconds per period at N = 8
with the baseline, those at N = 2, measured in the same run (flat: about 1), and the bytes and build seconds
added per period from 4 to 8 with those added from 2 to 4. Wall times on a shared machine move with its load
(printed before and after); the checkpoints trained and the registry bytes do not.

Usage: ``python bench/rolling_cost.py [--out runs/bench/rolling_cost] [--periods 2 4 8]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

MONTHS = ["2022-01-01", "2022-02-01", "2022-03-01", "2022-04-01", "2022-05-01", "2022-06-01", "2022-07-01",
          "2022-08-01", "2022-09-01", "2022-10-01"]


def overrides(out: Path, n: int, max_n: int) -> list[str]:
    phases = {"pretrain": [None, MONTHS[0]]}
    for i in range(max_n + 1):  # the periods and the window after the last
        phases[f"m{i + 1}"] = [MONTHS[i], MONTHS[i + 1]]
    ph = "{" + ", ".join(f"{k}: [{'null' if a is None else repr(a)}, {b!r}]" for k, (a, b) in phases.items()) + "}"
    stages = ["pretrain"] + [f"m{i + 1}" for i in range(n)]
    epochs = "{" + ", ".join(f"{s}: 1" for s in stages) + "}"
    return ["world.n_domains=2", "world.scale=1.0", "data.lm_text_docs=600", "base.lm_epochs=1",
            f"data.phases={ph}", f"train.stages=[{', '.join(stages)}]", f"train.epochs={epochs}",
            "train.max_examples=150", f"eval.activity_phase={stages[-1]}", "eval.max_users=60", "eval.groups=[all]",
            "sweeps.temporal.step=0.5", f"data.root={out / 'world'}", f"prepared={out / 'prepared'}",
            f"registry={out / f'registry-{n}'}"]


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/bench/rolling_cost")
    ap.add_argument("--periods", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--record", default="rolling_cost")
    args = ap.parse_args()
    from mmgrid.config import load_grid
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world
    from mmgrid.registry.api import Registry
    from mmgrid.sweep.rolling import RollingOptions, available, evaluate_rolling
    from mmgrid.train.build import build_grid

    out = Path(args.out)
    max_n = max(args.periods)
    cfg = load_grid("rolling", overrides(out, max_n, max_n))
    write_world(cfg.data.root, cfg.world)
    prepared = prepare(cfg)
    # warm-up: the first build in a process pays one-off start-up costs (imports, first kernels), no period's
    warm = load_grid("rolling", overrides(out, 1, max_n)[:-1] + [f"registry={out / 'registry-warm'}"])
    build_grid(warm, progress=False)
    print(f"load average before: {os.getloadavg()}")
    rows = []
    for n in sorted(args.periods):
        cfg = load_grid("rolling", overrides(out, n, max_n))
        shutil.rmtree(cfg.registry, ignore_errors=True)
        t0 = time.perf_counter()
        built = build_grid(cfg, progress=False)
        build_s = time.perf_counter() - t0
        trained = len(built.trained)
        nbytes = tree_bytes(Path(cfg.registry))
        reg = Registry.open(cfg.registry)
        q = reg.query(kind="trained")
        stage_s = [float((reg.get(c).meta or {}).get("train_log", {}).get("seconds", float("nan")))
                   for c, period in zip(q["id"], q["period"]) if period != "pretrain"]
        t0 = time.perf_counter()
        evaluate_rolling(cfg, reg, prepared, RollingOptions(matrix=False))
        roll_s = time.perf_counter() - t0
        rows.append((n, build_s, nbytes, roll_s, sum(stage_s) / n))
        print(f"N={n}: {trained} checkpoints trained (2 domains x {n + 1} stages), build {build_s:.1f} s, "
              f"registry {nbytes / 2**20:.2f} MiB, rolling study {roll_s:.1f} s ({len(available())} strategies)")
    print("\n| N periods | build (s) | training s per period (2 domains) | registry (MiB) | rolling study (s) |\n"
          "|---|---|---|---|---|")
    for n, b, nb, r, per in rows:
        print(f"| {n} | {b:.1f} | {per:.2f} | {nb / 2**20:.2f} | {r:.1f} |")
    if len(rows) >= 3:
        (n0, b0, y0, r0, s0), (n1, b1, y1, r1, s1), (n2, b2, y2, r2, s2) = rows[:3]
        print(f"\ntraining seconds per period (each stage's own train log, both domains): {s0:.2f} at N={n0} (the "
              f"baseline) vs {s2:.2f} at N={n2}: ratio {s2 / s0:.2f}x")
        per_a, per_b = (b1 - b0) / (n1 - n0), (b2 - b1) / (n2 - n1)
        bytes_a, bytes_b = (y1 - y0) / (n1 - n0), (y2 - y1) / (n2 - n1)
        print(f"\nbuild seconds per added period: {per_a:.2f} ({n0}->{n1}, the baseline) vs {per_b:.2f} ({n1}->{n2}): "
              f"ratio {per_b / per_a:.2f}x")
        print(f"registry bytes per added period: {bytes_a / 2**20:.3f} MiB vs {bytes_b / 2**20:.3f} MiB: "
              f"ratio {bytes_b / bytes_a:.2f}x")
        print(f"rolling study seconds per added period: {(r1 - r0) / (n1 - n0):.2f} vs {(r2 - r1) / (n2 - n1):.2f}")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record import run_recorded  # bench/record.py: writes bench/results/rolling_cost.md

    run_recorded(main, "rolling_cost")
