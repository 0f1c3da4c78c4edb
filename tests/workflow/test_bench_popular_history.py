"""bench/popular_history.py: most-popular with and without each user's history, on a calibrate null world."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_leaving_out_the_history_never_costs_and_the_history_holds_popular_items(tmp_path: Path) -> None:
    """A history item is never the target, so leaving it out can only move the target up: each domain's
    Recall@10 and NDCG@10 with the history left out are at least the shared list's; and the shared top 10
    does hold history items (else the two would be equal and the benchmark would measure nothing)."""
    env = {**os.environ, "MMGRID_BENCH_NO_RECORD": "1"}
    out = subprocess.run([sys.executable, str(REPO / "bench" / "popular_history.py"), "--out", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    rows = [ln.split("|")[1:-1] for ln in out.splitlines() if ln.startswith("| ") and not ln.startswith("| domain")]
    assert len(rows) == 5
    for r in rows:
        n_shared, n_own, diff, r_shared, r_own, in_hist = (float(x) for x in r[2:])
        assert n_own >= n_shared and r_own >= r_shared
        assert diff == pytest.approx(n_own - n_shared, abs=1e-4)
        assert 0 < in_hist <= 10
    assert any(float(r[4]) > 0 for r in rows)
    assert not (REPO / "bench" / "results" / "popular_history.md").read_text().count(str(tmp_path))
