"""Recall@K / NDCG@K on hand-computed rankings; the accuracy matrix on a hand-computed 3x3."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrid.eval.matrix import backward_transfer, forgetting, forward_transfer, transfer_summary
from mmgrid.eval.metrics import ndcg_at_k, ranking_metrics, recall_at_k, target_ranks
from mmgrid.eval.popular import popular_counts, popular_ranking, put_popular

# five items ranked for three users; targets at ranks 0, 3 and absent
RANKED = np.array([[4, 2, 0, 1, 3], [0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
TARGETS = np.array([4, 3, 9])


def test_target_ranks() -> None:
    assert target_ranks(RANKED, TARGETS).tolist() == [0, 3, -1]


def test_recall_by_hand() -> None:
    assert recall_at_k(RANKED, TARGETS, 1) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, TARGETS, 3) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, TARGETS, 4) == pytest.approx(2 / 3)


def test_ndcg_by_hand() -> None:
    # user 0: 1/log2(2) = 1; user 1: rank 3 -> 1/log2(5) if K > 3; user 2: 0
    assert ndcg_at_k(RANKED, TARGETS, 3) == pytest.approx(1 / 3)
    assert ndcg_at_k(RANKED, TARGETS, 5) == pytest.approx((1 + 1 / math.log2(5)) / 3)


def test_ranking_metrics_keys_and_empty() -> None:
    m = ranking_metrics(RANKED, TARGETS, [2, 5])
    assert set(m) == {"recall@2", "ndcg@2", "recall@5", "ndcg@5"}
    assert recall_at_k(np.zeros((0, 5), dtype=int), np.zeros(0, dtype=int), 5) == 0.0


# R[i, j]: trained through period i, evaluated on period j
R = np.array([[0.5, 0.1, 0.2], [0.4, 0.6, 0.3], [0.3, 0.5, 0.7]])
B = np.array([0.05, 0.05, 0.1])


def test_accuracy_matrix_measures_by_hand() -> None:
    # BWT = ((0.3 - 0.5) + (0.5 - 0.6)) / 2 = -0.15
    assert backward_transfer(R) == pytest.approx(-0.15)
    # FWT = ((R[0,1] - b1) + (R[1,2] - b2)) / 2 = ((0.1 - 0.05) + (0.3 - 0.1)) / 2 = 0.125
    assert forward_transfer(R, B) == pytest.approx(0.125)
    # forgetting: j=0: max(0.5, 0.4) - 0.3 = 0.2; j=1: max(0.1, 0.6) - 0.5 = 0.1 -> 0.15
    assert forgetting(R) == pytest.approx(0.15)
    s = transfer_summary(R)
    assert math.isnan(s["fwt"]) and s["bwt"] == pytest.approx(-0.15)


def test_matrix_rejects_non_square_and_one_period_is_nan() -> None:
    with pytest.raises(ValueError, match="square"):
        backward_transfer(np.ones((2, 3)))
    assert math.isnan(forgetting(np.ones((1, 1))))


def test_popular_ranking_ties_go_to_lower_index() -> None:
    assert popular_ranking(np.array([3, 5, 5, 0, 1]), 4).tolist() == [1, 2, 0, 4]
    assert popular_ranking(np.array([1, 2]), 10).tolist() == [1, 0]


def test_popular_ranking_leaves_out_each_history_by_hand() -> None:
    counts = np.array([3, 5, 5, 0, 1])  # order: 1, 2, 0, 4, 3
    got = popular_ranking(counts, 3, [[], [1], [2, 0], [1, 2, 0, 4, 3], [4, 4]])
    assert got.tolist() == [[1, 2, 0], [2, 0, 4], [1, 4, 3], [-1, -1, -1], [1, 2, 0]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=12),
       st.lists(st.lists(st.integers(0, 11), max_size=8), min_size=1, max_size=5), st.integers(1, 6))
def test_popular_ranking_with_histories_is_the_shared_list_without_them(counts, histories, k) -> None:
    """Invariants: a row holds no history item, keeps the shared order, and is the first k such items."""
    counts = np.array(counts)
    histories = [[i for i in h if i < len(counts)] for h in histories]
    full = popular_ranking(counts, len(counts)).tolist()
    got = popular_ranking(counts, k, histories)
    for row, h in zip(got.tolist(), histories):
        want = [i for i in full if i not in set(h)][:k]
        assert row == want + [-1] * (k - len(want))


def test_most_popular_gains_what_it_spent_on_history_items() -> None:
    """A history item is never the target (one interaction per user and item): with it left out, the
    target moves up exactly by the number of history items ranked above it."""
    counts = np.array([9, 8, 7, 6, 5, 4])
    histories, targets = [[0, 1], [3]], np.array([2, 2])  # user 2's history item ranks below
    shared = np.broadcast_to(popular_ranking(counts, 3), (2, 3))
    own = popular_ranking(counts, 3, histories)
    assert shared.tolist() == [[0, 1, 2], [0, 1, 2]]
    assert own.tolist() == [[2, 3, 4], [0, 1, 2]]
    assert [int(np.nonzero(r == t)[0][0]) if t in r else -1 for r, t in zip(shared, targets)] == [2, 2]
    assert [int(np.nonzero(r == t)[0][0]) if t in r else -1 for r, t in zip(own, targets)] == [0, 2]


def test_the_history_rule_is_in_the_baselines_id(tmp_path) -> None:
    from types import SimpleNamespace

    from mmgrid.registry.api import Registry

    reg = Registry.open(tmp_path / "reg")
    dom = SimpleNamespace(name="Books", popularity=lambda phases: np.array([2, 0, 5]))
    new = put_popular(reg, dom, ["p1", "p2"], "fp", exclude_history=True)
    old = put_popular(reg, dom, ["p1", "p2"], "fp", exclude_history=False)
    assert new != old
    assert reg.get(new).params["exclude_history"] is True
    assert "exclude_history" not in reg.get(old).params
    assert popular_counts(reg, new).tolist() == popular_counts(reg, old).tolist() == [2, 0, 5]
