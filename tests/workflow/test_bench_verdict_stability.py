"""bench/verdict_stability.py: the demo world's verdicts under other training seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workflow.conftest import REPO, load_bench


def _bench():
    return load_bench("verdict_stability")


def test_verdicts_follow_the_report_rules_by_hand() -> None:
    """rho holds when its interval lies below 0; "lambda* differs" when some pair of all-users intervals is
    disjoint; Table 2 when the difference's interval lies above 0; Figure 5's not-1 as the replicate judged it."""
    v = _bench().verdicts
    res = {"t4_rho": [-0.9, -1.0, -0.3, 5], "f5_not1": {"holds": True, "max_dev": 0.5},
           "lambda_star": {"A": {"all": [0.2, 0.1, 0.3, 50]}, "B": {"all": [0.9, 0.8, 1.0, 50]}},
           "t2_popular": [0.01, 0.004, 0.016, 0.5, 100, 1]}
    assert all(v(res).values()) and len(v(res)) == 4
    res = {"t4_rho": [-0.5, -1.0, 0.2, 5], "f5_not1": {"holds": False, "max_dev": 0.1},
           "lambda_star": {"A": {"all": [0.2, 0.1, 0.85, 50]}, "B": {"all": [0.9, 0.8, 1.0, 50]}},
           "t2_popular": [0.01, -0.001, 0.016, 0.5, 100, 1]}
    assert not any(v(res).values())


def test_leave_one_out_coverage_by_hand() -> None:
    """Three seed sets of one domain: each set's interval is judged against the argmax of the other two sets'
    averaged curves. Set 0 ([0.5, 0.5]) and set 2 ([0, 1]) cover 0.5; set 1 ([1, 1]) does not."""
    L = [0.0, 0.5, 1.0]
    res = [{"curves": {"A": {"non_active": {"lambdas": L, "mean": m}}}, "lambda_star": {"A": {"non_active": x}}}
           for m, x in [([0, 1, 0], [0.5, 0.5, 0.5, 9]), ([0, 1, 0.5], [1.0, 1.0, 1.0, 9]),
                        ([0.2, 1, 0], [0.5, 0.0, 1.0, 9])]]
    text = _bench().leave_one_out_coverage(res, ["A"])
    assert "| A | 2 of 3 | 0.50 / 0.50 |" in text and "2/3" in text


@pytest.mark.slow
def test_a_tiny_run_compares_each_seed_set_with_the_demo_seeds(tmp_path: Path) -> None:
    """Two one-seed sets on a tiny world: the baseline row has the grid's seed, the agreement counts lie in
    [0, 1], and the baseline's recipe is the calibrate grid-world recipe (one cache for both)."""
    from mmgrid.config import load_grid
    from mmgrid.sweep.calibration.study import calibrate_job

    over = ["world.n_domains=3", "world.scale=0.3", "data.lm_text_docs=600", "base.lm_epochs=1",
            "train.epochs={pretrain: 1, p1: 1, p2: 1}", "train.max_examples=64", "train.seeds=[0]",
            "eval.max_users=60", "sweeps.temporal.step=0.5"]
    env = {**os.environ, "MMGRID_BENCH_NO_RECORD": "1"}
    out = subprocess.run([sys.executable, str(REPO / "bench" / "verdict_stability.py"), "--sets", "1", "--workers",
                          "1", "--out", str(tmp_path), *over], env=env, capture_output=True, text=True, timeout=900,
                         check=True).stdout
    rows = [ln for ln in out.splitlines() if ln.startswith("| [")]
    assert [r.split("|")[1].strip() for r in rows] == ["[0]", "[1]"]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["seed_sets"] == [[0], [1]] and all(0 <= n <= 1 for n in summary["agree"].values())
    cfg = load_grid("demo", over)
    assert Path(calibrate_job(cfg, None, cfg.world.seed, tmp_path).kwargs["result_path"]).exists()
    assert len(list((tmp_path / "replicates").glob("*.json"))) == 2
