"""Training examples/s and evaluated users/s per paradigm: this checkout vs main at cd8b5a3.

For each paradigm (text, semid, emb, sasrec) one cell is built and evaluated with the same
config (the demo grid; ``--quick``: the ``mmgrid demo --quick`` overrides), the same
epochs and batch size: the tiny base, then the grid's stages in order on the first domain,
then the test-window evaluation (``eval.max_users``). Each code path runs in its own
subprocess (``bench/train_eval_cell.py``) with ``PYTHONPATH`` set to its checkout; the
baseline is a temporary ``git worktree`` of ``--baseline`` (default cd8b5a3), removed at the
end. Examples are the data layer's examples (the stage's capped example count x epochs),
not tokens.

Prints, per paradigm: training examples/s, evaluated users/s (warm: the second evaluation
of the same model; cold: the first, paying one-time loads such as the sentence embedder),
their ratios current / baseline, each cell's wall time, both paths' metrics side by side,
the spread (min..max, std) of the metrics over ``--seeds`` training seeds of the current
code, to judge "same within noise", and the wall time and training examples/s of the demo's
whole build (the tiny base and every stage of every row, one training seed) with the baseline,
with the current code in one process, and with the current code in a worker per CPU
(``exec.workers: 0``, what ``mmgrid demo`` runs). Seed 0 of both paths runs ``--repeats``
times (default 3), alternating, and the best rate of each is reported: on this project's
2-core VM the same code's CPU-time rate moves by up to 40 % between runs minutes apart (the
baseline's sasrec training measured 1740 to 3050 examples/CPU-s in one afternoon), so a single
pair of runs can move a ratio by that much. ``--quick`` evaluates 100 users (a warm call of
emb or sasrec takes 5-10 ms); the full config evaluates every test user of the domain, as the
demo does.
A "goals" block compares the CPU-time ratios with the speed goals (>= 2x training
examples/s, >= 3x warm evaluated users/s). Asserts nothing.

Usage::

    python bench/train_eval.py --quick            # a few minutes on 2 cores
    python bench/train_eval.py                    # the full demo config (much longer)
    python bench/train_eval.py --quick --paradigms sasrec emb --seeds 1
    python bench/train_eval.py --quick --from-json run.json   # re-print a run saved with --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CELL = Path(__file__).resolve().parent / "train_eval_cell.py"
PARADIGMS = ["text", "semid", "emb", "sasrec"]
METRICS = ["recall@10", "ndcg@10", "recall@20", "ndcg@20"]
BASELINE = "cd8b5a3"  # the default baseline code path (--baseline)


@contextlib.contextmanager
def baseline_tree(commit: str, path: Path):
    """A detached ``git worktree`` of ``commit`` at ``path`` for the block's duration, removed after."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True)


def run_cell(code_root: Path, label: str, out: Path, seed: int, paradigms: list[str], full: bool,
             overrides: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code_root), BENCH_CODE=label, MMGRID_QUIET="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, str(CELL), str(out), str(seed), *paradigms, *(["--full"] if full else []), "--",
           *overrides]
    print(f"  running {label} seed {seed} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=str(code_root), env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{label} (seed {seed}) failed:\n{proc.stderr[-4000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH_JSON "))
    return json.loads(line[len("BENCH_JSON "):])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the quick demo config (a few minutes)")
    ap.add_argument("--baseline", default=BASELINE, help="git commit of the baseline code path")
    ap.add_argument("--paradigms", nargs="+", default=PARADIGMS)
    ap.add_argument("--seeds", type=int, default=3, help="training seeds of the current code (spread)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="alternating runs of both paths at seed 0; the best rate of each is reported")
    ap.add_argument("--no-demo-build", dest="demo_build", action="store_false",
                    help="skip timing the demo's whole build with both paths")
    ap.add_argument("--json", default=None, help="also write all raw results to this file")
    ap.add_argument("--from-json", default=None,
                    help="print the report of an earlier run's --json file instead of running")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides for both paths")
    args = ap.parse_args(argv)
    if args.from_json:
        raw = json.loads(Path(args.from_json).read_text())
        args.paradigms = [p for p in args.paradigms if p in raw["current"][0]["cells"]]
        print(report(best(raw["baseline"]), [best(raw["current_seed0"])] + raw["current"][1:], args))
        print(build_line(raw.get("demo_build", {}), args.baseline))
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="mmgrid-bench-"))
    with baseline_tree(args.baseline, tmp / "baseline") as base_tree:
        # seed 0 of both paths, alternating, --repeats times (the machine may be shared: the best
        # rate of each path is reported), then the other training seeds of the current code
        olds, curs = [], []
        for r in range(max(1, args.repeats)):
            olds.append(run_cell(base_tree, args.baseline, tmp / f"old{r}", 0, args.paradigms, not args.quick,
                                 args.overrides))
            curs.append(run_cell(ROOT, "current", tmp / f"new0-{r}", 0, args.paradigms, not args.quick,
                                 args.overrides))
        old, cur0 = best(olds), best(curs)
        new = [cur0] + [run_cell(ROOT, "current", tmp / f"new{s}", s, args.paradigms, not args.quick, args.overrides)
                        for s in range(1, max(1, args.seeds))]
        builds = {}
        if args.demo_build:
            # the current demo grid trains 3 seeds in a worker pool: time it on the baseline's one seed,
            # in one process (the per-process speed-up) and with a worker per CPU (what the demo runs)
            one = ["train.seeds=[0]"]
            runs = ((args.baseline, base_tree, []), ("current", ROOT, one + ["exec.workers=1"]),
                    ("current, workers", ROOT, one + ["exec.workers=0"]))
            builds = {label: run_cell(root, label, tmp / f"build-{label.replace(', ', '-')}", 0, ["demo-build"],
                                      not args.quick, args.overrides + extra) for label, root, extra in runs}
    print(report(old, new, args))
    print(build_line(builds, args.baseline))
    if args.json:
        Path(args.json).write_text(json.dumps({"baseline": olds, "current_seed0": curs, "current": new,
                                               "demo_build": builds}, indent=1))
    return 0


def build_line(builds: dict, baseline: str) -> str:
    """The demo build's wall time, and training examples/s over the whole build, per path (empty without them).

    Examples/s over a build = every stored stage's examples x epochs / the build's wall time: the rate at
    which the study trains, the tiny base and job overheads included."""
    if not builds:
        return ""
    o = builds[baseline]
    lines = [f"\ndemo build, one training seed ({o['stages']} stages + the tiny base), wall time and training "
             f"examples/s over the whole build:"]
    for label, b in builds.items():
        rate = b.get("examples", 0.0) / max(b["build_s"], 1e-9)
        ratio = "" if label == baseline else (f" ({o['build_s'] / b['build_s']:.2f}x faster; examples "
                                              f"{b.get('examples', 0):.0f} vs {o.get('examples', 0):.0f})")
        lines.append(f"  {label:<18} workers={b.get('workers', 1)}: {b['build_s']:7.1f} s, {rate:7.1f} examples/s"
                     + ratio)
    return "\n".join(lines)


def best(runs: list[dict]) -> dict:
    """One result per code path from repeated runs of the same seed: the highest rates and the
    shortest wall times of each cell (metrics are those of the first run; repeats must agree)."""
    out = json.loads(json.dumps(runs[0]))
    for r in runs[1:]:
        for p, c in r["cells"].items():
            o = out["cells"][p]
            if c["metrics"] != o["metrics"]:
                o["repeat_metrics_differ"] = True
            for k in ("train_ex_per_s", "eval_users_per_s", "eval_users_per_s_cold", "train_ex_per_cpu_s",
                      "eval_users_per_cpu_s", "eval_users_per_cpu_s_cold"):
                o[k] = max(o[k], c[k])
            for k in ("train_s", "eval_cold_s", "eval_warm_s", "cell_s"):
                o[k] = min(o[k], c[k])
        for k in ("imports_s", "base_s", "data_s"):
            out[k] = min(out[k], r[k])
    return out


def _goal(ratio: float, goal: float) -> str:
    return "met" if ratio >= goal else f"short: {ratio / goal:.0%} of {goal:g}x"


def _f(x: float, w: int = 8, p: int = 1) -> str:
    return f"{x:{w}.{p}f}"


def report(old: dict, new: list[dict], args: argparse.Namespace) -> str:
    cur = new[0]  # seed 0: the same seed as the baseline
    lines = [f"config: demo{' --quick' if args.quick else ''} {' '.join(args.overrides)}; domain {cur['domain']}; "
             f"torch threads {cur['threads']}; baseline {args.baseline}",
             f"fixed costs (s): imports {old['imports_s']:.1f} -> {cur['imports_s']:.1f}, "
             f"base {old['base_s']:.1f} -> {cur['base_s']:.1f}", "",
             "by CPU time of the process (one torch thread: robust to a shared machine's load):",
             "paradigm | train ex/CPU-s base -> cur (x) | eval users/CPU-s warm base -> cur (x) | cold base -> cur (x)"]
    for p in args.paradigms:
        o, c = old["cells"][p], cur["cells"][p]
        lines.append(f"{p:8s} | {_f(o['train_ex_per_cpu_s'], 7, 0)} -> {_f(c['train_ex_per_cpu_s'], 7, 0)} "
                     f"({c['train_ex_per_cpu_s'] / o['train_ex_per_cpu_s']:4.2f}x) | "
                     f"{_f(o['eval_users_per_cpu_s'], 7, 0)} -> {_f(c['eval_users_per_cpu_s'], 7, 0)} "
                     f"({c['eval_users_per_cpu_s'] / o['eval_users_per_cpu_s']:4.2f}x) | "
                     f"{_f(o['eval_users_per_cpu_s_cold'], 6, 0)} -> {_f(c['eval_users_per_cpu_s_cold'], 6, 0)} "
                     f"({c['eval_users_per_cpu_s_cold'] / o['eval_users_per_cpu_s_cold']:4.2f}x)")
    lines += ["", "goals (training >= 2x examples/s, evaluation >= 3x users/s; CPU-time ratios, warm):"]
    for p in args.paradigms:
        o, c = old["cells"][p], cur["cells"][p]
        rt = c["train_ex_per_cpu_s"] / o["train_ex_per_cpu_s"]
        re_ = c["eval_users_per_cpu_s"] / o["eval_users_per_cpu_s"]
        lines.append(f"{p:8s} | train {rt:4.2f}x {_goal(rt, 2.0)} | eval {re_:4.2f}x {_goal(re_, 3.0)}")
    lines += ["", "the same by wall-clock time (the machine's other load counts in):",
              "paradigm | train ex/s base -> cur (x) | eval users/s warm base -> cur (x) | cold base -> cur (x) | "
              "cell s base -> cur"]
    for p in args.paradigms:
        o, c = old["cells"][p], cur["cells"][p]
        rt = c["train_ex_per_s"] / o["train_ex_per_s"]
        re_ = c["eval_users_per_s"] / o["eval_users_per_s"]
        rc = c["eval_users_per_s_cold"] / o["eval_users_per_s_cold"]
        lines.append(f"{p:8s} | {_f(o['train_ex_per_s'], 7, 0)} -> {_f(c['train_ex_per_s'], 7, 0)} ({rt:4.2f}x) | "
                     f"{_f(o['eval_users_per_s'], 7, 0)} -> {_f(c['eval_users_per_s'], 7, 0)} ({re_:4.2f}x) | "
                     f"{_f(o['eval_users_per_s_cold'], 6, 0)} -> {_f(c['eval_users_per_s_cold'], 6, 0)} ({rc:4.2f}x) | "
                     f"{o['cell_s']:.1f} -> {c['cell_s']:.1f}")
    lines += ["", f"metrics (all users): baseline seed 0 | current seed 0 | current over {len(new)} seed(s): "
              "min..max (std)"]
    for p in args.paradigms:
        for m in METRICS:
            if m not in old["cells"][p]["metrics"]:
                continue
            vals = [r["cells"][p]["metrics"][m] for r in new]
            std = statistics.pstdev(vals) if len(vals) > 1 else 0.0
            a, b = old["cells"][p]["metrics"][m], cur["cells"][p]["metrics"][m]
            mean = statistics.fmean(vals)
            flag = "same" if a == b else ("within seed range" if min(vals) <= a <= max(vals) else
                                          f"outside seed range, {abs(a - mean) / std:.1f} std from the mean"
                                          if std > 0 else "differs")
            lines.append(f"{p:8s} {m:10s} {a:.4f} | {b:.4f} | {min(vals):.4f}..{max(vals):.4f} ({std:.4f})  {flag}")
    return "\n".join(lines)


if __name__ == "__main__":
    from record import recorded  # bench/record.py: writes bench/results/train_eval.md

    with recorded("train_eval"):
        rc = main()
    raise SystemExit(rc)
