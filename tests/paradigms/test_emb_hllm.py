"""emb's HLLM options (item_token, learned_temperature, all_positions) against hand computations.

Every expected value here is computed apart from the paradigm's own loss: the item LLM and the
user LLM are run through the plain Hugging Face forward, the cosines and the cross-entropy are
written out (``-logit[pos] + logsumexp(logits)``), and per-position losses are computed one
truncated history at a time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paradigm_helpers import fit_batch
from mmgrid.errors import ConfigError
from mmgrid.paradigms import get_paradigm
from mmgrid.paradigms.errors import CheckpointMismatchError

P = get_paradigm("emb")


def _batch(model, domain, n=16):
    ex = P.examples(model, domain, "pretrain")[:n]
    assert 0 in {len(e.history) for e in ex} and len({len(e.history) for e in ex}) > 2  # empty + ragged
    return ex, P.collate(model, ex)


def _hf_items(model, items: torch.Tensor, token: torch.Tensor | None = None) -> torch.Tensor:
    """Item embeddings by the plain HF forward: the final hidden state at each text's last token; with
    ``token`` that token's input embedding replaced by it."""
    out = []
    for i in items.tolist():
        n = int(model.item_lengths[i])
        ids = model.item_ids[i, :n][None]
        x = model.item_llm.model.embed_tokens(ids)
        if token is not None:
            x = torch.cat([x[:, :-1], token[None, None]], dim=1)
        out.append(model.item_llm.model(inputs_embeds=x).last_hidden_state[0, -1])
    return torch.stack(out)


def _hf_user(model, seq: torch.Tensor) -> torch.Tensor:
    """The user LLM's final hidden state after a history ``[n, H]`` (an empty one reads one zero vector)."""
    if seq.shape[0] == 0:
        seq = torch.zeros(1, model.user_llm.config.hidden_size)
    return model.user_llm(inputs_embeds=seq[None]).last_hidden_state[0, -1]


def _ce(user: torch.Tensor, cands: torch.Tensor, pos: int, scale: float) -> torch.Tensor:
    """One prediction's InfoNCE written out: -scale*cos(u, c+) + log sum_c exp(scale*cos(u, c)).

    An all-zero vector (the user LLM's output for an empty history: zeros stay zeros through
    bias-free layers and RMSNorm) has cosine 0 with everything, as under F.normalize."""
    unit = lambda v: v / max(float(v.norm()), 1e-12)  # noqa: E731
    cos = torch.stack([torch.dot(unit(user), unit(c)) for c in cands])
    return -scale * cos[pos] + torch.logsumexp(scale * cos, dim=0)


def _hand_loss(model, ex, batch, scale: float, every: bool = False, token=None) -> float:
    cand_items = batch["items"][batch["cand_pos"]]
    cands = _hf_items(model, cand_items, token)
    where = {int(i): c for c, i in enumerate(cand_items.tolist())}
    losses = []
    with torch.no_grad():
        for e in ex:
            hist = list(e.history)
            seq = hist + [e.target]
            # position t reads items 0..t and predicts item t + 1; without `every` only the last one
            ts = range(max(len(hist), 1)) if every else [max(len(hist), 1) - 1]
            for t in ts:
                prefix = hist[: t + 1] if hist else []
                u = _hf_user(model, _hf_items(model, torch.tensor(prefix, dtype=torch.long), token)
                             if prefix else torch.zeros(0, 1))
                losses.append(_ce(u, cands, where[seq[t + 1] if hist else e.target], scale))
    return float(torch.stack(losses).mean())


# --------------------------------------------------------------------------- defaults


@pytest.mark.parametrize("last_layer_only", [True, False])
def test_defaults_give_the_hand_computed_info_nce(tiny_base, tiny_domain, last_layer_only) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "temperature": 0.1, "last_layer_only": last_layer_only},
                seed=0).eval()
    ex, batch = _batch(m, tiny_domain)
    assert "pos_labels" not in batch and m.item_token is None and m.logit_scale is None
    with torch.no_grad():
        got = P.loss(m, batch).item()
    assert got == pytest.approx(_hand_loss(m, ex, batch, scale=1 / 0.1), rel=1e-5)
    # the three knobs spelled at their defaults are the defaults: the same batch, the same loss bit for bit
    same = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "last_layer_only": last_layer_only, "item_token": "eos",
                                            "learned_temperature": False, "all_positions": False}, seed=0).eval()
    batch2 = P.collate(same, ex)
    assert all(torch.equal(batch[k], batch2[k]) for k in batch)
    with torch.no_grad():
        assert P.loss(same, batch2).item() == got
    assert {"item_token", "logit_scale"}.isdisjoint(P.save(same).state)


@pytest.mark.parametrize("bad", [{"item_token": "cls"}, {"item_token": ""}, {"learned_temperature": 1},
                                 {"all_positions": "yes"}])
def test_bad_hllm_knob_is_a_config_error(tiny_base, tiny_domain, bad) -> None:
    with pytest.raises(ConfigError, match=next(iter(bad))):
        P.build(tiny_base, tiny_domain, bad, seed=0)


# --------------------------------------------------------------------------- learned item token


@pytest.mark.parametrize("last_layer_only", [True, False])
def test_learned_item_token_replaces_the_eos_input_embedding(tiny_base, tiny_domain, last_layer_only) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "item_token": "learned",
                                         "last_layer_only": last_layer_only}, seed=3).eval()
    eos = P.build(tiny_base, tiny_domain, {"n_negatives": 8}, seed=3).eval()
    hidden = m.item_llm.config.hidden_size
    assert m.item_token.shape == (hidden,)
    # normal(0, 0.02) from the build seed: the same seed gives the same vector, another seed another
    want = torch.empty(hidden)
    torch.nn.init.normal_(want, std=0.02, generator=torch.Generator().manual_seed(3))
    assert torch.equal(m.item_token.detach(), want)
    other = P.build(tiny_base, tiny_domain, {"item_token": "learned"}, seed=4)
    assert not torch.equal(other.item_token, m.item_token)
    items = torch.arange(7)
    cached = P.item_embeddings(m)
    with torch.no_grad():
        got = m.encode_items(items)
        torch.testing.assert_close(got, _hf_items(m, items, m.item_token), rtol=1e-4, atol=1e-5)
        assert not torch.allclose(got, eos.encode_items(items), atol=1e-3)  # not the EOS token's embedding
        m.item_token.add_(1.0)
        moved = m.encode_items(items)
        assert not torch.allclose(moved, got, atol=1e-3)  # the vector is read
        torch.testing.assert_close(moved, _hf_items(m, items, m.item_token), rtol=1e-4, atol=1e-5)
    # ranking reads the vector too: the item-embedding cache follows it
    torch.testing.assert_close(cached[:7], got)
    torch.testing.assert_close(P.item_embeddings(m)[:7], moved)


def test_learned_item_token_gets_a_gradient_and_trains(tiny_base, tiny_domain) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "item_token": "learned"}, seed=0)
    ex, batch = _batch(m, tiny_domain)
    m.train()
    P.loss(m, batch).backward()
    assert m.item_token.grad is not None and float(m.item_token.grad.norm()) > 0
    before = m.item_token.detach().clone()
    fit_batch(P, m, batch, steps=3, lr=1e-2)
    assert not torch.equal(m.item_token.detach(), before)
    m.eval()
    with torch.no_grad():
        assert P.loss(m, batch).item() == pytest.approx(_hand_loss(m, ex, batch, 10.0, token=m.item_token), rel=1e-5)


# --------------------------------------------------------------------------- learned temperature


def test_learned_temperature_starts_at_1_over_0_07_and_ignores_temperature(tiny_base, tiny_domain) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "learned_temperature": True, "temperature": 0.5},
                seed=0).eval()
    assert m.logit_scale.shape == (1,) and m.logit_scale.item() == pytest.approx(math.log(1 / 0.07))
    ex, batch = _batch(m, tiny_domain)
    with torch.no_grad():
        got = P.loss(m, batch).item()
    # CE(exp(s) * cos) with s = log(1 / 0.07): the fixed temperature 0.5 plays no part
    assert got == pytest.approx(_hand_loss(m, ex, batch, scale=1 / 0.07), rel=1e-5)
    assert got != pytest.approx(_hand_loss(m, ex, batch, scale=1 / 0.5), rel=1e-3)


def test_learned_temperature_is_capped_at_100_and_trains_below_it(tiny_base, tiny_domain) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "learned_temperature": True}, seed=0)
    ex, batch = _batch(m, tiny_domain)
    m.eval()
    with torch.no_grad():
        m.logit_scale.fill_(math.log(1000.0))  # exp(s) = 1000: capped at 100
        capped = P.loss(m, batch).item()
        assert capped == pytest.approx(_hand_loss(m, ex, batch, scale=100.0), rel=1e-5)
        m.logit_scale.fill_(math.log(50.0))  # below the cap: exp(s) itself
        assert P.loss(m, batch).item() == pytest.approx(_hand_loss(m, ex, batch, scale=50.0), rel=1e-5)
    m.train()
    m.zero_grad()
    P.loss(m, batch).backward()
    # d loss / d s = sum over rows of (softmax . cos - cos[pos]) * exp(s) / B: nonzero below the cap
    assert m.logit_scale.grad is not None and m.logit_scale.grad.abs().item() > 0
    with torch.no_grad():
        m.logit_scale.fill_(math.log(1000.0))
    m.zero_grad()
    P.loss(m, batch).backward()
    assert m.logit_scale.grad.abs().item() == 0.0  # above the cap the scale is constant
    with torch.no_grad():
        m.logit_scale.fill_(math.log(1 / 0.07))
    before = m.logit_scale.item()
    fit_batch(P, m, batch, steps=3, lr=1e-2)
    assert m.logit_scale.item() != before


# --------------------------------------------------------------------------- every position


def test_all_positions_collate_labels_each_position_with_the_next_item(tiny_base, tiny_domain) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 4, "all_positions": True}, seed=0)
    ex, b = _batch(m, tiny_domain)
    cands = b["items"][b["cand_pos"]]
    for row, e in enumerate(ex):
        seq = list(e.history) + [e.target]
        n = len(e.history)
        labels = b["pos_labels"][row]
        if n == 0:
            assert cands[labels[0]].item() == e.target and (labels[1:] == -100).all()
        else:
            assert cands[labels[:n]].tolist() == seq[1:]  # position t predicts item t + 1
            assert (labels[n:] == -100).all()
        assert b["items"][b["hist_pos"][row, :n]].tolist() == list(e.history)
        assert cands[b["labels"][row]].item() == e.target  # the last position's, as without the option
    assert len(set(cands.tolist())) == len(cands)


@pytest.mark.parametrize("last_layer_only", [True, False])
def test_all_positions_loss_is_the_mean_of_independent_per_position_info_nce(
        tiny_base, tiny_domain, last_layer_only) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "all_positions": True, "last_layer_only": last_layer_only},
                seed=0).eval()
    ex, batch = _batch(m, tiny_domain)
    n_pred = sum(max(len(e.history), 1) for e in ex)
    assert int((batch["pos_labels"] >= 0).sum()) == n_pred > len(ex)
    with torch.no_grad():
        got = P.loss(m, batch).item()
    assert got == pytest.approx(_hand_loss(m, ex, batch, scale=10.0, every=True), rel=1e-5)
    # not the last-position loss over the same candidates
    assert got != pytest.approx(_hand_loss(m, ex, batch, scale=10.0, every=False), rel=1e-3)


def test_all_positions_trains_and_ranks_as_before(tiny_base, tiny_domain) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "all_positions": True}, seed=0)
    plain = P.build(tiny_base, tiny_domain, {"n_negatives": 8}, seed=0)
    hists = [list(e.history) for e in P.examples(m, tiny_domain, "test")]
    # the option changes training only: the same weights rank the same
    assert np.array_equal(P.rank(m, tiny_domain, hists, 5), P.rank(plain, tiny_domain, hists, 5))
    _, batch = _batch(m, tiny_domain)
    torch.manual_seed(0)
    first = fit_batch(P, m, batch, steps=8, lr=1e-3)
    assert P.loss(m, batch).item() < first - 0.1


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("knobs, name, shape", [({"item_token": "learned"}, "item_token", (32,)),
                                                ({"learned_temperature": True}, "logit_scale", (1,))])
def test_hllm_tensors_round_trip_and_mismatch_is_named(tiny_base, tiny_domain, knobs, name, shape) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, **knobs}, seed=0)
    _, batch = _batch(m, tiny_domain)
    fit_batch(P, m, batch, steps=2, lr=1e-2)  # the tensor moves away from its initial value
    ck = P.save(m)
    assert ck.state[name].shape == shape and set(ck.state) <= set(m.state_dict())
    again = P.load(ck, tiny_domain, {})
    assert torch.equal(getattr(again, name).detach(), getattr(m, name).detach())
    m.eval()
    with torch.no_grad():
        assert P.loss(again, batch).item() == P.loss(m, batch).item()
    hists = [list(e.history) for e in P.examples(m, tiny_domain, "test")]
    assert np.array_equal(P.rank(again, tiny_domain, hists, 5), P.rank(m, tiny_domain, hists, 5))
    off = {"item_token": "eos"} if name == "item_token" else {"learned_temperature": False}
    with pytest.raises(CheckpointMismatchError, match=name):  # has it, the knob at its default
        P.load(ck, tiny_domain, off)
    plain = P.save(P.build(tiny_base, tiny_domain, {"n_negatives": 8}, seed=0))
    with pytest.raises(CheckpointMismatchError, match=name):  # lacks it, the knob asks for it
        P.load(plain, tiny_domain, knobs)
    ck.state[name] = torch.zeros(shape[0] + 1)
    with pytest.raises(CheckpointMismatchError, match=name):
        P.load(ck, tiny_domain, {})
