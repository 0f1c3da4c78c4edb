"""Ranking in parts of similar history length (issue 15): the same top-k as one padded batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrid.paradigms import get_paradigm
from mmgrid.paradigms.examples import pad_right
from mmgrid.paradigms.ranking import eval_mode, length_groups, rank_by_length, topk_items


@given(st.lists(st.integers(0, 30), min_size=0, max_size=300), st.integers(1, 64), st.integers(1, 9))
@settings(max_examples=60, deadline=None)
def test_length_groups_partition_sorted_and_large_enough(lengths: list[int], min_rows: int, max_groups: int) -> None:
    parts = length_groups(lengths, min_rows=min_rows, max_groups=max_groups)
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # every row exactly once
    assert [lengths[i] for i in flat] == sorted(lengths)  # by length (stable)
    assert len(parts) <= max_groups
    if len(parts) > 1:
        assert min(len(p) for p in parts) >= min_rows


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
    got = par.rank(model, tiny_domain, histories, 5)  # 90 histories: parts of >= 32 rows
    assert len(length_groups([len(h) for h in histories])) == 2
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
