"""SemEmb (HLLM) paradigm: InfoNCE, user-LLM init, training, ranking, checkpoints."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from paradigm_helpers import fit_batch
from mmgrid.errors import ModelError
from mmgrid.paradigms import Checkpoint, get_paradigm
from mmgrid.paradigms.emb import info_nce
from mmgrid.paradigms.errors import CheckpointMismatchError

P = get_paradigm("emb")


@pytest.fixture()
def model(tiny_base, tiny_domain):
    return P.build(tiny_base, tiny_domain, {"n_negatives": 8}, seed=0)


def test_info_nce_hand_computed_2x2() -> None:
    # Orthonormal users and candidates, tau = 0.5: logits [[2, 0], [0, 2]] -> loss = log(1 + e^-2) per row.
    eye = torch.eye(2)
    got = info_nce(eye, eye, torch.tensor([0, 1]), temperature=0.5)
    assert got.item() == pytest.approx(math.log(1 + math.exp(-2)), rel=1e-6)
    # Cosine, not dot: scaling a user vector changes nothing; cos(u, c1) = 1, cos(u, c2) = 1/sqrt(2).
    user = torch.tensor([[3.0, 0.0], [0.0, 5.0]])
    cands = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    c = 1 / math.sqrt(2)
    row0 = -math.log(math.exp(1) / (math.exp(1) + math.exp(c)))  # positive = cand 0
    row1 = -math.log(math.exp(c) / (math.exp(0) + math.exp(c)))  # positive = cand 1
    got = info_nce(user, cands, torch.tensor([0, 1]), temperature=1.0)
    assert got.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)


def test_user_llm_starts_from_first_and_last_base_layers(tiny_base_factory, tiny_domain) -> None:
    base = tiny_base_factory(tiny_domain.item_texts, seed=1, n_layers=3)
    m = P.build(base, tiny_domain, {}, seed=0)
    src = base.model.model
    for user_i, base_i in ((0, 0), (1, 2)):
        got, want = m.user_llm.layers[user_i].state_dict(), src.layers[base_i].state_dict()
        assert set(got) == set(want)
        for name in want:
            assert torch.equal(got[name], want[name]), (user_i, name)
    assert torch.equal(m.user_llm.norm.weight, src.norm.weight)
    assert len(m.user_llm.layers) == 2 and not hasattr(m.user_llm, "embed_tokens")
    # The item LLM is the whole base, copied (not shared).
    for name, w in base.model.state_dict().items():
        assert torch.equal(m.item_llm.state_dict()[name], w)
    assert m.item_llm.model.embed_tokens.weight.data_ptr() != src.embed_tokens.weight.data_ptr()


def test_collate_positions_point_at_history_targets_and_candidates(model, tiny_domain) -> None:
    ex = P.examples(model, tiny_domain, "p1")[:6]
    b = P.collate(model, ex)
    for row, e in enumerate(ex):
        n = len(e.history)
        assert b["hist_len"][row].item() == n
        assert b["items"][b["hist_pos"][row, :n]].tolist() == list(e.history)
    cands = b["items"][b["cand_pos"]]
    assert cands[b["labels"]].tolist() == [e.target for e in ex]
    assert len(set(cands.tolist())) == len(cands)  # deduplicated candidates


def test_training_steps_reduce_loss(model, tiny_domain) -> None:
    torch.manual_seed(0)
    batch = P.collate(model, P.examples(model, tiny_domain, "pretrain")[:16])
    first = fit_batch(P, model, batch, steps=8, lr=1e-3)
    assert P.loss(model, batch).item() < first - 0.1


def test_rank_returns_unique_valid_items_not_in_history(model, tiny_domain) -> None:
    hists = [list(e.history) for e in P.examples(model, tiny_domain, "test")] + [[]]
    k = 5
    top = P.rank(model, tiny_domain, hists, k)
    assert top.shape == (len(hists), k) and top.dtype == np.int64
    assert ((top >= 0) & (top < tiny_domain.n_items)).all()
    for row, h in zip(top, hists):
        assert len(set(row.tolist())) == k
        assert not set(row.tolist()) & set(h)
    # Reusing precomputed item embeddings gives the same answer.
    emb = P.item_embeddings(model)
    assert emb.shape == (tiny_domain.n_items, model.item_llm.config.hidden_size)
    assert np.array_equal(P.rank(model, tiny_domain, hists, k, item_emb=emb), top)


def test_save_load_round_trip_gives_identical_rankings(model, tiny_domain) -> None:
    hists = [list(e.history) for e in P.examples(model, tiny_domain, "test")]
    ck = P.save(model)
    assert all(k.startswith(("item_llm.", "user_llm.")) for k in ck.state)
    assert all(v.is_floating_point() for v in ck.state.values())
    assert ck.meta["n_items"] == tiny_domain.n_items and ck.meta["domain"] == tiny_domain.name
    json.dumps(ck.meta)  # JSON-able
    again = P.load(Checkpoint(dict(ck.state), dict(ck.files), dict(ck.meta)), tiny_domain, {})
    assert np.array_equal(P.rank(again, tiny_domain, hists, 10), P.rank(model, tiny_domain, hists, 10))
    for name, w in P.save(again).state.items():
        assert torch.equal(w, ck.state[name])


def test_item_llm_exports_as_plain_hf_folder(model, tiny_domain, tmp_path) -> None:
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    ck = P.save(model)
    item = {k[len("item_llm."):]: v for k, v in ck.state.items() if k.startswith("item_llm.")}
    save_file(item, str(tmp_path / "model.safetensors"))
    for name, data in ck.files.items():
        (tmp_path / name).write_bytes(data)
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    ids = model.item_ids[:3, :8]
    with torch.no_grad():
        assert torch.allclose(hf(ids).logits, model.item_llm.eval()(ids).logits, atol=1e-5)


def test_load_with_other_n_items_is_a_named_error(model, tiny_domain) -> None:
    ck = P.save(model)
    ck.meta["n_items"] = tiny_domain.n_items + 1
    with pytest.raises(CheckpointMismatchError, match="n_items"):
        P.load(ck, tiny_domain, {})
    assert issubclass(CheckpointMismatchError, ModelError)


def test_load_with_missing_tensor_is_a_named_error(model, tiny_domain) -> None:
    ck = P.save(model)
    ck.state.pop("user_llm.norm.weight")
    with pytest.raises(CheckpointMismatchError, match="user_llm"):
        P.load(ck, tiny_domain, {})


def test_checkpoint_names_are_state_dict_names(model) -> None:
    ck = P.save(model)
    live = model.state_dict()
    assert set(ck.state) <= set(live)  # in-place sweeps write checkpoint tensors by state_dict name
    assert set(live) - set(ck.state) <= {"item_llm.lm_head.weight"}  # tied to embed_tokens
    assert all(ck.state[k].shape == live[k].shape for k in ck.state)


def test_item_embedding_cache_follows_in_place_weight_changes(model) -> None:
    a = P.item_embeddings(model)
    assert P.item_embeddings(model) is a  # same weights: reused
    w = model.item_llm.model.layers[0].mlp.down_proj.weight
    w.data.copy_(w.data * 2)  # .data.copy_ does not bump the version counter
    b = P.item_embeddings(model)
    assert b is not a and not torch.allclose(a, b)


def test_negatives_covering_the_catalog_give_an_exact_softmax(tiny_base, tiny_domain) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": -1}, seed=0)
    b = P.collate(m, P.examples(m, tiny_domain, "p1")[:4])
    assert sorted(b["items"][b["cand_pos"]].tolist()) == list(range(tiny_domain.n_items))


# --------------------------------------------------------------------------- item-ID embeddings


def test_id_embeddings_start_at_zero_and_add_to_the_text_embedding(tiny_base, tiny_domain) -> None:
    plain = P.build(tiny_base, tiny_domain, {"n_negatives": 8}, seed=0)
    with_id = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "id_embeddings": True, "id_scale": 2.0}, seed=0)
    items = torch.arange(5)
    with torch.no_grad():
        torch.testing.assert_close(with_id.encode_items(items), plain.encode_items(items))  # zero-initialised
        with_id.item_id.weight[3] = torch.ones(with_id.item_id.weight.shape[1])
        diff = with_id.encode_items(items) - plain.encode_items(items)
    want = torch.zeros_like(diff)
    want[3] = 2.0  # id_scale * the ID vector
    torch.testing.assert_close(diff, want, rtol=1e-5, atol=1e-5)
    assert "item_id.weight" not in P.save(plain).state


def test_id_embeddings_train_and_round_trip(tiny_base, tiny_domain) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "id_embeddings": True, "id_scale": 4.0}, seed=0)
    batch = P.collate(m, P.examples(m, tiny_domain, "pretrain")[:16])
    fit_batch(P, m, batch, steps=3, lr=1e-2)
    assert float(m.item_id.weight.abs().sum()) > 0  # the ID vectors get gradients
    ckpt = P.save(m)
    assert ckpt.state["item_id.weight"].shape == (tiny_domain.n_items, m.item_llm.config.hidden_size)
    again = P.load(ckpt, tiny_domain, {})
    hists = [list(h) for h in tiny_domain.examples("test")["history"].to_list()][:8]
    np.testing.assert_array_equal(P.rank(m, tiny_domain, hists, 5), P.rank(again, tiny_domain, hists, 5))
    with pytest.raises(CheckpointMismatchError, match="id_embeddings"):
        P.load(ckpt, tiny_domain, {"id_embeddings": False})


@pytest.mark.parametrize("bad", [{"id_scale": 0.0}, {"id_scale": float("inf")}, {"temperature": -0.1}])
def test_bad_scale_or_temperature_is_a_config_error(tiny_base, tiny_domain, bad) -> None:
    from mmgrid.errors import ConfigError

    with pytest.raises(ConfigError, match=next(iter(bad))):
        P.build(tiny_base, tiny_domain, bad, seed=0)


def test_last_layer_only_equals_the_plain_forward_in_loss_gradients_and_ranking(tiny_base, tiny_domain) -> None:
    # last_layer_only (mmgrid.models.partial) is an optimisation, not a change of the model: the loss, every
    # gradient and the ranking must be those of the plain Hugging Face forward, up to float rounding.
    fast = P.build(tiny_base, tiny_domain, {"n_negatives": 8}, seed=0)
    plain = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "last_layer_only": False}, seed=0)
    plain.load_state_dict(fast.state_dict())
    ex = P.examples(fast, tiny_domain, "pretrain")[:16]
    assert len({len(e.history) for e in ex}) > 1  # ragged histories: right padding is exercised
    batch = P.collate(fast, ex)
    losses = []
    for m in (fast, plain):
        m.train()
        m.zero_grad()
        loss = P.loss(m, batch)
        loss.backward()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    grads_plain = dict(plain.named_parameters())
    n_checked = 0
    for name, p in fast.named_parameters():
        g, want = p.grad, grads_plain[name].grad
        if want is None or not want.abs().sum():
            continue
        assert g is not None, name
        # norm-relative: single entries of tiny gradients lose digits to cancellation in either order
        assert float((g - want).norm()) <= 1e-3 * float(want.norm()), name
        n_checked += 1
    assert n_checked > 10  # both LLMs' layers, norms and embeddings carry gradients
    hists = [list(e.history) for e in P.examples(fast, tiny_domain, "test")]
    fast.eval(), plain.eval()
    assert torch.allclose(P.item_embeddings(fast), P.item_embeddings(plain), rtol=1e-4, atol=1e-5)
    assert np.array_equal(P.rank(fast, tiny_domain, hists, 5), P.rank(plain, tiny_domain, hists, 5))


def test_training_knobs_reach_the_loop(tiny_base, tiny_domain, monkeypatch) -> None:
    # bucket_window and fused_optimizer are emb knobs: the loop reads them from the model, not the class.
    import mmgrid.train.loop as loop

    seen = {}
    real_adamw, real_buckets = loop.adamw, loop.length_buckets
    monkeypatch.setattr(loop, "adamw", lambda *a, fused: seen.setdefault("fused", fused) and real_adamw(*a, fused=fused)
                        or real_adamw(*a, fused=fused))
    monkeypatch.setattr(loop, "length_buckets", lambda *a: seen.setdefault("window", a[3]) and real_buckets(*a))
    ex = P.examples(P.build(tiny_base, tiny_domain, {}, seed=0), tiny_domain, "p1")[:8]
    for knobs, fused, window in (({}, True, 8), ({"bucket_window": 0, "fused_optimizer": False}, False, None),
                                 ({"bucket_window": 3}, True, 3)):
        seen.clear()
        m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, **knobs}, seed=0)
        loop.train_stage(P, m, ex, epochs=1, lr=1e-3, batch_size=4, seed=0, progress=False)
        assert seen.get("fused") == fused and seen.get("window") == window, knobs


def test_sentence_features_add_the_projected_pretrained_embedding(tiny_base, tiny_domain) -> None:
    from mmgrid.paradigms.embedder import encode

    plain = P.build(tiny_base, tiny_domain, {"n_negatives": 8}, seed=0)
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "sentence_scale": 3.0}, seed=0)
    items = torch.arange(5)
    with torch.no_grad():
        torch.testing.assert_close(m.encode_items(items), plain.encode_items(items))  # zero-initialised
        m.sentence_proj.weight[2, 7] = 1.0  # output coordinate 2 reads sentence coordinate 7
        diff = m.encode_items(items) - plain.encode_items(items)
    # independent: the embedder's own vectors of the first five item texts
    e = torch.as_tensor(encode(list(tiny_domain.item_texts)[:5]))
    want = torch.zeros_like(diff)
    want[:, 2] = 3.0 * e[:, 7]
    torch.testing.assert_close(diff, want, rtol=1e-4, atol=1e-5)
    assert "sentence_proj.weight" not in P.save(plain).state


def test_sentence_features_train_and_round_trip(tiny_base, tiny_domain) -> None:
    m = P.build(tiny_base, tiny_domain, {"n_negatives": 8, "sentence_scale": 2.0}, seed=0)
    batch = P.collate(m, P.examples(m, tiny_domain, "pretrain")[:16])
    fit_batch(P, m, batch, steps=3, lr=1e-2)
    assert float(m.sentence_proj.weight.abs().sum()) > 0  # the projection gets gradients
    ckpt = P.save(m)
    assert ckpt.state["sentence_proj.weight"].shape == (m.item_llm.config.hidden_size, 384)  # MiniLM's 384
    again = P.load(ckpt, tiny_domain, {})
    hists = [list(h) for h in tiny_domain.examples("test")["history"].to_list()][:8]
    np.testing.assert_array_equal(P.rank(m, tiny_domain, hists, 5), P.rank(again, tiny_domain, hists, 5))
    with pytest.raises(CheckpointMismatchError, match="sentence_scale"):
        P.load(ckpt, tiny_domain, {"sentence_scale": 0.0})
