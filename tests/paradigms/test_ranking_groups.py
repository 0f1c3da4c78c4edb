"""Ranking in parts of similar history length: the same top-k as one padded batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrid.paradigms import get_paradigm
from mmgrid.paradigms.examples import pad_right
from mmgrid.paradigms.ranking import eval_mode, length_groups, topk_items


@given(st.lists(st.integers(0, 30), min_size=0, max_size=300), st.integers(0, 2000), st.integers(1, 9))
@settings(max_examples=60, deadline=None)
def test_length_groups_partition_sorted_and_no_dearer_than_one_batch(lengths: list[int], part_cost: int,
                                                                     max_groups: int) -> None:
    parts = length_groups(lengths, part_cost=part_cost, max_groups=max_groups)
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # every row exactly once
    assert [lengths[i] for i in flat] == sorted(lengths)  # by length (stable)
    assert len(parts) <= max_groups

    def cost(ps: list[np.ndarray]) -> int:
        return sum(len(p) * max(1, max(lengths[i] for i in p)) for p in ps) + len(ps) * part_cost

    if lengths:
        assert cost(parts) <= cost([np.arange(len(lengths))])  # never worse than the whole batch


def test_length_groups_split_mixed_lengths_and_keep_similar_ones_whole() -> None:
    mixed = [1] * 50 + [20] * 50  # one batch: 100 x 20 = 2000 positions; two parts: 50 + 1000 (+ 256 each)
    parts = length_groups(mixed)
    assert len(parts) == 2 and sorted(parts[0].tolist()) == list(range(50))
    assert len(length_groups([7] * 100)) == 1  # nothing to save: one forward pass
    assert length_groups([]) == []


@given(st.lists(st.lists(st.integers(0, 99), max_size=12), min_size=1, max_size=20), st.integers(0, 8))
@settings(max_examples=60, deadline=None)
def test_pad_right_matches_a_row_by_row_reference(seqs: list[list[int]], max_len: int) -> None:
    ids, lengths = pad_right(seqs, pad=-1, max_len=max_len or None)
    cut = [s[-max_len:] if max_len else s for s in seqs]
    assert lengths.tolist() == [len(s) for s in cut]
    assert ids.shape == (len(seqs), max(1, max(len(s) for s in cut)))
    for row, s in zip(ids.tolist(), cut):
        assert row == s + [-1] * (len(row) - len(s))


def test_topk_exclusion_masks_each_rows_history_once_and_keeps_k() -> None:
    scores = torch.tensor([[5.0, 4.0, 3.0, 2.0], [1.0, 2.0, 3.0, 4.0], [9.0, 8.0, 7.0, 6.0]])
    # row 0: a repeated item is masked once; row 1: out-of-range ids ignored; row 2: masking would leave
    # fewer than k candidates, so nothing is masked
    got = topk_items(scores, 2, [[0, 0, 1], [3, 17, -1], [0, 1, 2]])
    assert got.tolist() == [[2, 3], [2, 1], [0, 1]]


@pytest.mark.parametrize("name", ["sasrec", "emb"])
def test_ranking_in_length_parts_equals_one_padded_batch(name: str, tiny_base_shared, tiny_domain) -> None:
    par = get_paradigm(name)
    model = par.build(tiny_base_shared, tiny_domain, {}, seed=0)
    g = np.random.default_rng(0)
    histories = [g.integers(0, tiny_domain.n_items, size=int(n)).tolist() for n in g.integers(0, 14, size=90)]
    got = par.rank(model, tiny_domain, histories, 5)
    assert len(length_groups([len(h) for h in histories])) > 1  # lengths 0..13: ranked in parts
    # reference: the whole batch padded to its longest history, no parts
    import mmgrid.paradigms.ranking as ranking

    one = [np.arange(len(histories))]
    orig = ranking.length_groups
    ranking.length_groups = lambda lengths, **kw: one
    try:
        want = par.rank(model, tiny_domain, histories, 5)
    finally:
        ranking.length_groups = orig
    assert got.shape == (90, 5)
    assert (got == want).mean() >= 0.99  # float rounding may swap a near tie, nothing more


def test_eval_mode_restores_the_mode() -> None:
    m = torch.nn.Sequential(torch.nn.Dropout(0.5))
    with eval_mode(m):
        assert not m.training and not m[0].training
    assert m.training and m[0].training
    m.eval()
    with eval_mode(m):
        assert not m.training
    assert not m.training


def _topk_reference(scores: torch.Tensor, k: int, exclude: list[list[int]]) -> np.ndarray:
    """The row-by-row masking topk_items did before it was vectorized."""
    scores = scores.float().clone()
    n_items = scores.shape[1]
    for row, items in enumerate(exclude):
        idx = [i for i in items if 0 <= i < n_items]
        if idx and n_items - len(set(idx)) >= k:
            scores[row, idx] = float("-inf")
    return torch.topk(scores, k, dim=1).indices.numpy()


@given(st.lists(st.lists(st.integers(-2, 12), max_size=14), min_size=1, max_size=12), st.integers(1, 10),
       st.integers(0, 2**31 - 1))
@settings(max_examples=80, deadline=None)
def test_topk_masking_matches_the_row_by_row_reference(exclude: list[list[int]], k: int, seed: int) -> None:
    scores = torch.randn(len(exclude), 10, generator=torch.Generator().manual_seed(seed))  # no ties
    want = _topk_reference(scores, k, exclude)
    assert topk_items(scores, k, exclude).tolist() == want.tolist()
    assert topk_items(scores, k, pad_right(exclude, pad=0)).tolist() == want.tolist()  # the padded form
