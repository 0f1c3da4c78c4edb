"""Evaluations keep their per-user values: the stored means are the per-user means, bit for bit,
the intervals bracket them, and the records point at the per-user file."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "train"))
import train_fakes as F  # noqa: E402

from mmgrid.eval.metrics import ndcg_at_k, per_user_metrics, ranking_metrics, recall_at_k  # noqa: E402
from mmgrid.eval.ranking import EvalResults, Evaluator, record_results  # noqa: E402
from mmgrid.registry.api import Registry  # noqa: E402
from mmgrid.stats import mean_ci  # noqa: E402


def test_per_user_metrics_by_hand() -> None:
    ranked = np.array([[5, 1, 2], [1, 2, 3], [9, 8, 7]])
    targets = np.array([5, 3, 4])  # rank 0, rank 2, absent
    per = per_user_metrics(ranked, targets, (1, 3))
    assert per["recall@1"].tolist() == [1.0, 0.0, 0.0] and per["recall@3"].tolist() == [1.0, 1.0, 0.0]
    assert per["ndcg@1"].tolist() == [1.0, 0.0, 0.0]
    assert per["ndcg@3"].tolist() == [1.0, 0.5, 0.0]  # 1 / log2(2 + 2) = 0.5
    assert recall_at_k(ranked, targets, 3) == 2 / 3 and ndcg_at_k(ranked, targets, 3) == 0.5
    assert ranking_metrics(ranked, targets, (3,)) == {"recall@3": 2 / 3, "ndcg@3": 0.5}


def _random_ranking(ev: Evaluator, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(ev.domain.n_items)[:20] for _ in range(ev.n)])


def test_group_values_are_exactly_the_means_of_the_per_user_values() -> None:
    ev = Evaluator(None, F.make_domain("A"), ks=[5, 10])
    ranked = _random_ranking(ev)
    res = ev.evaluate_ranked(ranked)
    assert isinstance(res, EvalResults) and isinstance(res, dict)
    per = res.per_user
    assert per.users.tolist() == ev.users.tolist() and per.active.tolist() == ev.masks["active"].tolist()
    for group, mask in ev.masks.items():
        # the old computation: ranking metrics on the group's rows alone
        independent = ranking_metrics(ranked[mask], ev.targets[mask], [5, 10])
        for m, value in independent.items():
            assert res[group][m] == value  # bit-equal
            assert float(per.metrics[m][mask].mean()) == value


def test_record_results_stores_per_user_values_and_intervals(tmp_path) -> None:
    reg = Registry.open(tmp_path / "reg")
    cid = reg.put({"w": torch.ones(2)}, {"paradigm": "p", "domain": "A", "period": "p2"}, "trained", seed=0)
    ev = Evaluator(None, F.make_domain("A"), ks=[5, 10])
    res = ev.evaluate_ranked(_random_ranking(ev, 3))
    record_results(reg, cid, "test", res, "A")
    rows = reg.results(id=cid)
    assert set(rows["group"]) == {"all", "active", "non_active"}
    assert rows["per_user"].nunique() == 1  # one file for the evaluation, named by every group's record
    assert (reg.root / rows["per_user"].iloc[0]).is_file()
    for _, row in rows[rows["metric"] != "n"].iterrows():
        df = reg.per_user(row)
        assert len(df) == int(res[row["group"]]["n"])
        values = df[row["metric"]].to_numpy()
        assert values.mean() == row["value"]  # the per-user file reproduces the stored number exactly
        _, lo, hi = mean_ci(values, n_resamples=2000, seed=0, clusters=df["user_idx"].to_numpy())  # whole users
        assert (row["ci_low"], row["ci_high"]) == (lo, hi)
        assert row["ci_low"] <= row["value"] <= row["ci_high"]
        assert row["seed"] == 0
    n_row = rows[rows["metric"] == "n"].iloc[0]
    assert np.isnan(n_row["ci_low"])  # counts have no interval


def test_a_ranking_shared_by_all_users_keeps_per_user_values() -> None:
    ev = Evaluator(None, F.make_domain("A"), ks=[10])
    res = ev.evaluate_ranked(np.arange(20))  # most-popular style: one list for everyone
    assert res.per_user.metrics["recall@10"].shape == (ev.n,)
    assert res["all"]["recall@10"] == float(res.per_user.metrics["recall@10"].mean())
