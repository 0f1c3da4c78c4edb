"""bench/demo.py: the demo timed as a user runs it (its parsing and its refusals; the run itself is bench/run_all.sh's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.workflow.conftest import REPO, load_bench


def test_the_report_step_is_what_the_demo_printed_last_without_progress_lines() -> None:
    demo = load_bench("demo")
    out = ("== build\ntext/Books/p1 seed=0: 100% 36/36 step, 32.80 step/s, elapsed 1.1s, ETA 0.0s\n== report\n"
           "Findings (95% intervals; details in report.md):\n          holds  rho < 0\n"
           "report/html: 50% 1/2, ETA 1s\n  lambda = 1 (theta_t2)        7.52 [6.82, 8.24]       reference\n"
           "   (54.2 s)\n\nworld: 0.3s  build: 194.0s\ndemo finished in 421.5 s; report: runs/demo/report.md\n")
    assert demo.report_step(out) == ("Findings (95% intervals; details in report.md):\n          holds  rho < 0\n"
                                     "  lambda = 1 (theta_t2)        7.52 [6.82, 8.24]       reference\n"
                                     "   (54.2 s)\n\nworld: 0.3s  build: 194.0s")
    assert demo.report_step("== build\nloss 2.1\n") == ""


def test_a_folder_that_is_not_empty_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "report.md").write_text("an earlier run\n")
    env = {**os.environ, "MMGRID_BENCH_NO_RECORD": "1"}
    p = subprocess.run([sys.executable, str(REPO / "bench" / "demo.py"), "--quick", "--out", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "is not empty" in p.stderr and "Give a new --out" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["report.md"]  # nothing written
