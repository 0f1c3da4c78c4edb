"""The calibration study's full run on the demo world and budget, recorded.

    python bench/calibration.py                        # mmgrid calibrate demo, R = 20 per size, sizes 0 and 1
    python bench/calibration.py --out runs/calibrate   # reuse (and fill) that folder's replicate cache
    python bench/calibration.py --workers 2 sweeps.calibrate.replicates=10
    python bench/calibration.py --record calibration_r8 sweeps.calibrate.replicates=8   # another record
    python bench/calibration.py --population --record population_amazon_table1 \
        world.preset=amazon_table1 world.n_domains=6       # a world's population values only

Runs ``mmgrid calibrate demo --out OUT`` (docs/calibration.md) and writes
``bench/results/calibration.md`` (``--record NAME``: ``bench/results/NAME.md``): the machine, its load, the command, the study's table
(type-I error, power, coverage, bias, minimum detectable effect, each with its Monte Carlo
standard error) and what the study cost: the mean seconds a replicate took inside its job and
the wall time of the replicates this run computed (cached replicates cost nothing: a rerun on a
filled ``--out`` only re-reads them). The baseline the study is judged against is its own null
world (planted size 0) in the same run: every rate of "holds" at size 0 is a type-I error
where the population value is the null.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's mmgrid, not whichever one is installed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/calibrate", help="the study's folder (its replicate cache is reused)")
    ap.add_argument("--workers", default="0", help="exec.workers (0: one per CPU)")
    ap.add_argument("--record", default="calibration",
                    help="the record's name: bench/results/NAME.md and NAME_power_curve.png (default: calibration)")
    ap.add_argument("--note", default="", help="a sentence printed first (and so recorded), e.g. how the --out "
                                               "folder's cached runs were computed")
    ap.add_argument("--population", action="store_true",
                    help="only the population values of the grid's own world (mmgrid calibrate --population)")
    ap.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the demo grid")
    args = ap.parse_args(argv)
    if args.note:
        print(f"Note: {args.note}\n")
    from mmgrid.cli import main as mmgrid_main

    if args.population:
        from mmgrid.config import load_grid
        from mmgrid.sweep.calibration.population import population_key

        print(f"population key {population_key(load_grid('demo', args.overrides))} (the shipped table's key for "
              "this world and budget)")
        return mmgrid_main(["calibrate", "demo", "--population", f"exec.workers={args.workers}", *args.overrides])

    cached = len(list((Path(args.out) / "replicates").glob("*.json")))
    t0 = time.perf_counter()
    rc = mmgrid_main(["calibrate", "demo", "--out", args.out, f"exec.workers={args.workers}", *args.overrides])
    wall = time.perf_counter() - t0
    if rc != 0:
        return rc
    data = json.loads((Path(args.out) / "calibration.json").read_text())
    n_runs = sum(len(v["replicates"]) + len(v["population"]) + len(v.get("own_world", []))
                 for v in data["grid"]["runs"].values()) + int(
        data.get("grid_world") is not None and data["grid_world"].get("is_replicate") is None)  # own run, else a replicate
    print(f"\n{n_runs} runs ({cached} cached before this run); {wall:.0f} s wall in this run; "
          f"{data['seconds_per_replicate']:.0f} s per replicate inside its job (mean)")
    print(f"grid {data['grid']['name']}, recipe {data['grid']['recipe']}\n")
    md = (Path(args.out) / "calibration.md").read_text()
    png = Path(args.out) / "power_curve.png"
    if png.is_file() and os.environ.get("MMGRID_BENCH_NO_RECORD") != "1":
        shutil.copyfile(png, HERE / "results" / f"{args.record}_power_curve.png")
        md = md.replace("](power_curve.png)", f"]({args.record}_power_curve.png)")
    print(md)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from record import run_recorded  # bench/record.py: writes bench/results/calibration.md (--record NAME: NAME.md)

    run_recorded(main, "calibration")
