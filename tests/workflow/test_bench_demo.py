"""bench/demo.py: the demo timed as a user runs it (its parsing and its refusals; the run itself is bench/run_all.sh's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.workflow.conftest import REPO, load_bench


def test_findings_is_the_reports_findings_section_only() -> None:
    demo = load_bench("demo")
    report = ("# mmgrid report\n\nintro\n\n## Findings\n\n- rho < 0: **holds**\n- lambda* differs: inconclusive\n\n"
              "## Table 2: baselines\n\n| a | b |\n")
    assert demo.findings(report) == "- rho < 0: **holds**\n- lambda* differs: inconclusive"
    assert demo.findings("# a report\n\n## Table 2\n") == ""


def test_a_folder_that_is_not_empty_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "report.md").write_text("an earlier run\n")
    env = {**os.environ, "MMGRID_BENCH_NO_RECORD": "1"}
    p = subprocess.run([sys.executable, str(REPO / "bench" / "demo.py"), "--quick", "--out", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "is not empty" in p.stderr and "Give a new --out" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["report.md"]  # nothing written
