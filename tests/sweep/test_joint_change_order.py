"""Figure 4's joint-change intervals do not depend on the order in which the cross-domain records were
written (a worker pool finishes pairs in any order; the report must print the same intervals)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mmgrid.sweep.evidence import joint_change_errors


class _PerUser:
    """Per-user values by record key: merged rows and each domain's own t2 ('single') row."""

    def __init__(self, frames: dict[str, pd.DataFrame]) -> None:
        self.frames = frames

    def matrix(self, rows, metric):
        fs = [self.frames[r["key"]] for r in rows]
        return fs[0]["user_idx"].to_numpy(), np.stack([f[metric].to_numpy() for f in fs])


def test_joint_change_interval_is_the_same_for_any_record_order() -> None:
    rng = np.random.default_rng(0)
    rows, frames = [], {}
    for d in ("A", "B", "C"):  # each domain's own checkpoint
        key = f"single-{d}"
        rows.append({"key": key, "paradigm": "p", "domain": d, "eval_domain": d, "method": "single",
                     "base_kind": "none", "alpha": np.nan})
        frames[key] = pd.DataFrame({"user_idx": np.arange(40), "ndcg@10": rng.random(40)})
    for pair in ("A+B", "A+C", "B+C"):
        for d in pair.split("+"):
            key = f"{pair}-{d}"
            rows.append({"key": key, "paradigm": "p", "domain": pair, "eval_domain": d, "method": "average",
                         "base_kind": "none", "alpha": 0.5})
            frames[key] = pd.DataFrame({"user_idx": np.arange(40), "ndcg@10": rng.random(40)})
    cells = pd.DataFrame(rows)
    pu = _PerUser(frames)
    first = joint_change_errors(cells, pu, "ndcg@10", n_resamples=200)
    shuffled = cells.sample(frac=1.0, random_state=3).reset_index(drop=True)
    again = joint_change_errors(shuffled, pu, "ndcg@10", n_resamples=200)
    assert len(first) == 1 and first["low"].iloc[0] < first["value"].iloc[0] < first["high"].iloc[0]
    pd.testing.assert_frame_equal(first, again)
