"""`mmgrid demo` timed as a user runs it: each step's wall time, the process's wall time and peak
memory against the README's budget, and what it printed of its report (each finding's verdict, the
continual-merging rows).

The demo runs in a child process (``python -m mmgrid demo``, this checkout's code), so its peak
memory (``getrusage(RUSAGE_CHILDREN)``) is its own. ``--out`` must be a new folder: a finished run
there would be a cache hit, not a measurement.

    python bench/demo.py --out runs/bench-demo               # the full demo (5-8 minutes on 2 cores)
    python bench/demo.py --quick --out runs/bench-demo-quick # the quick one (about a minute)
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = {False: 8 * 60, True: 60}  # the README: "5-8 minutes on 2 cores"; --quick: "about a minute"


def report_step(stdout: str) -> str:
    """What the demo printed from its last step on (``== report``: each finding's verdict with its interval,
    and the continual-merging rows of Table 3), without progress lines; '' where it printed no such step."""
    at = stdout.rfind("== report\n")
    if at < 0:
        return ""
    keep = [ln for ln in stdout[at:].splitlines()[1:] if not re.search(r"ETA|step/s|it/s", ln)]
    return "\n".join(ln for ln in keep if not ln.startswith("demo finished")).strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="a new folder for the demo's run")
    ap.add_argument("--quick", action="store_true", help="mmgrid demo --quick")
    ap.add_argument("--record", default="demo", help="bench/results/NAME.md")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"bench/demo.py: {out} is not empty; a finished run there would be a cache hit. Give a new --out.",
              file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "mmgrid", "demo", *(["--quick"] if args.quick else []), "--out", str(out)]
    print(f"{'mmgrid demo --quick' if args.quick else 'mmgrid demo'}, this checkout's code, a child process")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6  # KiB on Linux
    if proc.returncode:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        print(f"bench/demo.py: the demo failed (exit {proc.returncode})", file=sys.stderr)
        return proc.returncode
    steps = [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith("world:")]
    budget = BUDGET_S[args.quick]
    print(f"steps: {steps[-1] if steps else '(the demo printed no step line)'}")
    print(f"process: {wall:.1f} s wall ({wall / budget:.2f} of the README's {budget // 60}-minute budget), "
          f"peak memory {peak_gb:.2f} GB")
    print("\nWhat it printed in its report step:\n\n" + (report_step(proc.stdout) or "(no report step)"))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from record import run_recorded  # bench/record.py: writes bench/results/demo.md (--record NAME: NAME.md)

    run_recorded(main, "demo")
