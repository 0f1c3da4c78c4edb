"""SASRec reference paradigm: training, causality, ranking, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from paradigm_helpers import fit_batch
from mmgrid.paradigms import get_paradigm
from mmgrid.paradigms.errors import CheckpointMismatchError

P = get_paradigm("sasrec")
PARAMS = {"hidden": 16, "heads": 2, "max_len": 6}


@pytest.fixture()
def model(tiny_domain):
    return P.build(None, tiny_domain, PARAMS, seed=0)  # ignores the base LLM


def test_build_is_seeded_and_leaves_global_rng_alone(tiny_domain) -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = P.build(None, tiny_domain, PARAMS, seed=0)
    after = torch.rand(1)
    b = P.build(None, tiny_domain, PARAMS, seed=0)
    c = P.build(None, tiny_domain, PARAMS, seed=1)
    assert torch.equal(before, after)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.item_emb.weight, c.item_emb.weight)
    assert a.item_emb.weight.shape == (tiny_domain.n_items + 1, 16)


def test_output_ignores_padding_and_later_items(model) -> None:
    model.eval()
    hist = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
    lengths = torch.tensor([4, 2])
    garbage = hist.clone()
    garbage[1, 2:] = torch.tensor([11, 12])  # pad slots hold other items: must not matter
    with torch.no_grad():
        a = model.users(hist, lengths)
        b = model.users(garbage, lengths)
        # Causal: the state after 2 items is the same whether or not later items follow.
        c = model.users(hist[:1], torch.tensor([2]))
        d = model.users(hist[:1, :2], torch.tensor([2]))
    assert torch.allclose(a, b, atol=1e-6)
    assert torch.allclose(c, d, atol=1e-6)


def test_training_steps_reduce_loss(model, tiny_domain) -> None:
    batch = P.collate(model, P.examples(model, tiny_domain, "pretrain")[:32])
    assert batch["history"].shape[1] <= PARAMS["max_len"]
    torch.manual_seed(0)
    first = fit_batch(P, model, batch, steps=10, lr=1e-2)
    model.eval()  # no dropout noise in the comparison
    assert P.loss(model, batch).item() < first - 0.2


def test_rank_returns_unique_valid_items_not_in_history(model, tiny_domain) -> None:
    hists = [list(e.history) for e in P.examples(model, tiny_domain, "test")] + [[]]
    top = P.rank(model, tiny_domain, hists, 7)
    assert top.shape == (len(hists), 7)
    assert ((top >= 0) & (top < tiny_domain.n_items)).all()
    for row, h in zip(top, hists):
        assert len(set(row.tolist())) == 7
        assert not set(row.tolist()) & set(h[-PARAMS["max_len"]:])
    # Best first: the returned order follows the scores.
    model.eval()
    with torch.no_grad():
        from mmgrid.paradigms.examples import pad_right

        hist, lengths = pad_right([hists[0][-PARAMS["max_len"]:]], pad=0)
        s = model.scores(model.users(hist, lengths))[0]
    assert (np.diff(s[torch.from_numpy(top[0])].numpy()) <= 0).all()


def test_save_load_round_trip_gives_identical_rankings(model, tiny_domain) -> None:
    hists = [list(e.history) for e in P.examples(model, tiny_domain, "test")]
    ck = P.save(model)
    live = model.state_dict()
    assert set(ck.state) == set(live)  # checkpoint names are state_dict names (in-place sweeps)
    assert all(ck.state[k].shape == live[k].shape for k in live)
    # Sizes come from the checkpoint even if the grid's params changed since.
    again = P.load(ck, tiny_domain, {"hidden": 64})
    assert np.array_equal(P.rank(again, tiny_domain, hists, 10), P.rank(model, tiny_domain, hists, 10))


def test_load_with_other_n_items_is_a_named_error(model, tiny_domain) -> None:
    ck = P.save(model)
    ck.meta["n_items"] = 99
    with pytest.raises(CheckpointMismatchError, match="n_items"):
        P.load(ck, tiny_domain, {})
    ck = P.save(model)
    ck.state["item_emb.weight"] = torch.zeros(5, 16)
    with pytest.raises(CheckpointMismatchError, match="item_emb"):
        P.load(ck, tiny_domain, {})


def test_item_bias_option_round_trips(tiny_domain) -> None:
    m = P.build(None, tiny_domain, {**PARAMS, "item_bias": True}, seed=0)
    with torch.no_grad():
        m.item_bias.copy_(torch.arange(tiny_domain.n_items, dtype=torch.float32))
    ck = P.save(m)
    assert ck.meta["item_bias"] is True and "item_bias" in ck.state
    again = P.load(ck, tiny_domain, {})  # the option comes from the checkpoint's meta
    hists = [[1, 2], [], [5]]
    assert np.array_equal(P.rank(again, tiny_domain, hists, 5), P.rank(m, tiny_domain, hists, 5))


def _all_positions(model, hist: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reference: every block at every position, then the last real one."""
    import math

    n = hist.shape[1]
    pos = torch.arange(n)
    real = pos[None] < lengths[:, None]
    x = model.item_emb(torch.where(real, hist + 1, torch.zeros_like(hist))) * math.sqrt(model.item_emb.embedding_dim)
    x = (x + model.pos_emb(pos)[None]) * real[..., None]
    keys = real.clone()
    keys[:, 0] = True
    mask = ((pos[None, :, None] >= pos[None, None, :]) & keys[:, None, :])[:, None]
    for block in model.blocks:
        x = block(x, mask)
    return model.final_ln(x)[torch.arange(len(hist)), (lengths - 1).clamp(min=0)]


def test_last_block_at_the_last_position_equals_every_position(model) -> None:
    model.eval()
    g = torch.Generator().manual_seed(4)
    hist = torch.randint(0, model.n_items, (7, 6), generator=g)
    lengths = torch.tensor([0, 1, 2, 6, 5, 3, 6])
    with torch.no_grad():
        torch.testing.assert_close(model.users(hist, lengths), _all_positions(model, hist, lengths),
                                   rtol=1e-5, atol=1e-6)


def test_training_dropout_is_seeded_scaled_and_drops(model) -> None:
    from mmgrid.paradigms.sasrec import dropout

    rng = np.random.Generator(np.random.SFC64(3))
    x = torch.ones(200, 50)
    y = dropout(x, 0.2, rng)
    assert set(torch.unique(y).tolist()) == {0.0, 1.25}  # inverted dropout: kept values scaled by 1/(1-p)
    assert 0.17 < float((y == 0).float().mean()) < 0.23  # 10,000 draws: p = 0.2 within ~7 std
    assert torch.equal(dropout(x, 0.0, rng), x)
    model.train()
    hist, lengths = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]]), torch.tensor([3, 2])
    torch.manual_seed(5)
    a = model.users(hist, lengths)
    torch.manual_seed(5)
    b = model.users(hist, lengths)  # the masks follow torch's seed: a seeded stage is reproducible
    c = model.users(hist, lengths)
    model.eval()
    d = model.users(hist, lengths)
    assert torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, d)
