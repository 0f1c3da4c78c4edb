"""Text-grounded (BIGRec-style) paradigm: examples, loss, grounding, ranking, checkpoints."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from paradigm_helpers import fit_batch
from mmgrid.errors import ConfigError, ModelError
from mmgrid.paradigms import get_paradigm
from mmgrid.paradigms.text import TextKnobs, TextParadigm, TokenExample, collate_lm, left_pad, lm_loss

P = get_paradigm("text")


@pytest.fixture(scope="module")
def built(tiny_domain: Any, tiny_base_shared: Any) -> torch.nn.Module:
    return P.build(tiny_base_shared, tiny_domain, {"max_history": 3}, seed=0)


def _histories(domain: Any, phase: str = "test") -> list[list[int]]:
    return [list(h) for h in domain.examples(phase)["history"].to_list()]


def test_registered() -> None:
    assert isinstance(P, TextParadigm) and P.name == "text"


def test_collate_puts_loss_on_target_tokens_only() -> None:
    batch = collate_lm([TokenExample((5, 6, 7, 8), 2), TokenExample((5, 9), 1)], pad=0, max_len=10)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [0, 0, 5, 9]]
    assert batch["labels"].tolist() == [[-100, -100, 7, 8], [-100, -100, -100, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]
    cut = collate_lm([TokenExample((1, 2, 3, 4, 5), 2)], pad=0, max_len=3)  # oldest prompt tokens dropped
    assert cut["input_ids"].tolist() == [[3, 4, 5]] and cut["labels"].tolist() == [[-100, 4, 5]]


def test_lm_loss_equals_hf_shifted_loss_on_targets(tiny_base_shared: Any) -> None:
    lm = tiny_base_shared.model
    batch = collate_lm([TokenExample((5, 6, 7, 8, 9), 2), TokenExample((5, 9, 11), 1)], pad=0, max_len=10)
    with torch.no_grad():
        ours = lm_loss(lm, batch)
        ref = lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 position_ids=batch["position_ids"], labels=batch["labels"]).loss
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_left_pad_positions_start_at_zero() -> None:
    ids, mask, pos = left_pad([[4, 5, 6], [7]], pad=0)
    assert ids.tolist() == [[4, 5, 6], [0, 0, 7]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]


def test_examples_end_with_target_title_and_eos(built: torch.nn.Module, tiny_domain: Any) -> None:
    tok = built.mmgrid_text.tokenizer
    exs = P.examples(built, tiny_domain, "p1")
    rows = tiny_domain.examples("p1")
    assert len(exs) == rows.height
    ex, target = exs[0], int(rows["target"][0])
    assert ex.ids[-1] == tok.eos_token_id
    assert tok.decode(list(ex.ids[-ex.n_target:-1])).strip() == tiny_domain.item_titles[target]
    prompt = tok.decode(list(ex.ids[:-ex.n_target]), skip_special_tokens=True)
    last = int(rows["history"][0][-1])
    assert tiny_domain.item_titles[last] in prompt and prompt.endswith("Next:")


def test_training_steps_reduce_loss(tiny_base: Any, tiny_domain: Any) -> None:
    model = P.build(tiny_base, tiny_domain, {"max_history": 3}, seed=0)
    batch = P.collate(model, P.examples(model, tiny_domain, "pretrain")[:16])
    first = fit_batch(P, model, batch, steps=8, lr=1e-2)
    assert float(P.loss(model, batch).detach()) < 0.7 * first


def test_rank_returns_valid_unique_items_outside_history(built: torch.nn.Module, tiny_domain: Any) -> None:
    hists = _histories(tiny_domain)[:12]
    ranked = P.rank(built, tiny_domain, hists, 10)
    assert ranked.shape == (12, 10) and ranked.dtype == np.int64
    for row, hist in zip(ranked, hists):
        assert len(set(row.tolist())) == 10
        assert all(0 <= i < tiny_domain.n_items for i in row)
        assert not set(row.tolist()) & set(hist)


def test_ground_prefers_exact_title_and_weights_beams() -> None:
    items = torch.eye(3)  # item i embeds as e_i
    title_row = {"a": 0, "b": 1, "c": 2}
    best = TextParadigm._ground([["b", "c"]], np.array([[0.0, -1.0]]), items, title_row, TextKnobs.resolve({"beam_combine": "best"}))
    assert best.tolist() == [[0.0, 1.0, 0.0]]
    w = TextParadigm._ground([["b", "c"]], np.array([[0.0, -1.0]]), items, title_row, TextKnobs.resolve({"beam_combine": "weighted"}))
    p = 1 / (1 + np.exp(-1.0))  # softmax([0, -1])[0]
    np.testing.assert_allclose(w.numpy(), [[0.0, p, 1 - p]], atol=1e-6)


def test_novel_generated_text_is_embedded(built: torch.nn.Module, tiny_domain: Any) -> None:
    items = torch.from_numpy(np.array(P.item_embeddings(built, tiny_domain)))
    title_row = {t: i for i, t in enumerate(tiny_domain.item_titles)}
    sims = TextParadigm._ground([["green notebook model"]], np.zeros((1, 1)), items, title_row,
                                TextKnobs.resolve({"beam_combine": "best", "embedder": "all-minilm-l6-v2",
                                                   "embedder_device": "cpu"}))
    assert tiny_domain.item_titles[int(sims[0].argmax())].startswith("green notebook")


def test_save_load_round_trip_gives_identical_rankings(built: torch.nn.Module, tiny_domain: Any) -> None:
    hists = _histories(tiny_domain)[:8]
    ckpt = P.save(built)
    assert "lm_head.weight" not in ckpt.state  # tied in the tiny base: saved once, as HF does
    assert "model.embed_tokens.weight" in ckpt.state and "config.json" in ckpt.files
    again = P.load(ckpt, tiny_domain, {})
    np.testing.assert_array_equal(P.rank(built, tiny_domain, hists, 5), P.rank(again, tiny_domain, hists, 5))


def test_bad_beam_combine_is_a_named_config_error(tiny_base_shared: Any, tiny_domain: Any) -> None:
    # the knob ranges (mmgrid.paradigms.params.RANGES) refuse it before anything is built
    with pytest.raises(ConfigError, match="beam_combine.*'weighted', 'best', 'max'"):
        P.build(tiny_base_shared, tiny_domain, {"beam_combine": "mean"}, seed=0)


def test_popularity_adjust_follows_bigrec_step_two() -> None:
    from mmgrid.paradigms.text import popularity_adjust

    sims = torch.tensor([[0.5, 0.4]])  # L2 distances 1.0 and sqrt(1.2)
    np.testing.assert_allclose(popularity_adjust(sims, np.array([0, 0]), 1.0).numpy(), [[-1.0, -np.sqrt(1.2)]],
                               rtol=1e-6)
    flipped = popularity_adjust(sims, np.array([0, 10]), 1.0)  # item 1 is the most popular: distance halved
    np.testing.assert_allclose(flipped.numpy(), [[-1.0, -np.sqrt(1.2) / 2]], rtol=1e-6)
    assert int(flipped.argmax()) == 1


def test_rank_with_popularity_uses_trained_phases(tiny_base_shared: Any, tiny_domain: Any) -> None:
    model = P.build(tiny_base_shared, tiny_domain, {"max_history": 3, "popularity_gamma": 1.0}, seed=0)
    P.examples(model, tiny_domain, "pretrain")
    assert model.mmgrid_text.trained_phases == ["pretrain"]
    ranked = P.rank(model, tiny_domain, _histories(tiny_domain)[:4], 5)
    assert ranked.shape == (4, 5) and all(len(set(r.tolist())) == 5 for r in ranked)
    again = P.load(P.save(model), tiny_domain, {})
    assert again.mmgrid_text.trained_phases == ["pretrain"]


def test_popularity_phases_choose_the_latest_or_every_trained_phase() -> None:
    from mmgrid.errors import ConfigError
    from mmgrid.paradigms.text import _pop_phases

    trained = ["pretrain", "p1", "p2"]
    assert _pop_phases(trained, TextKnobs.resolve({"popularity_phases": "last"})) == ["p2"]
    assert _pop_phases(trained, TextKnobs.resolve({"popularity_phases": "all"})) == trained
    with pytest.raises(ConfigError, match="popularity_phases: 'recent' is not accepted; accepted: one of 'last'"):
        TextKnobs.resolve({"popularity_phases": "recent"})  # the declaration's range refuses it


# --------------------------------------------------------------------------- history-aware grounding


def test_history_weights_decay_with_recency_and_sum_to_one() -> None:
    from mmgrid.paradigms.text import history_weights

    w = history_weights([[1, 2, 3], []], n_items=5, max_history=2, decay=0.5)
    # the last two items: 3 (most recent, weight 1) and 2 (weight 0.5), normalised to 2/3 and 1/3
    np.testing.assert_allclose(w.numpy(), [[0, 0, 1 / 3, 2 / 3, 0], [0, 0, 0, 0, 0]], rtol=1e-6)


def test_cooc_matrix_counts_followers_within_the_window_per_user() -> None:
    from mmgrid.paradigms.text import cooc_matrix

    users = np.array([0, 0, 0, 1, 1])
    items = np.array([0, 1, 2, 1, 0])
    one = cooc_matrix(users, items, 3, window=1).numpy()
    # transitions 0->1, 1->2 (user 0) and 1->0 (user 1); 2->1 crosses users and never counts
    np.testing.assert_allclose(one, [[0, 1, 0], [0.5, 0, 0.5], [0, 0, 0]], rtol=1e-6)
    two = cooc_matrix(users, items, 3, window=2).numpy()  # adds 0->2 (two steps later)
    np.testing.assert_allclose(two[0], [0, 0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(two.sum(1), [1, 1, 0], rtol=1e-6)


def test_ground_scores_mix_history_and_cooccurrence_terms() -> None:
    from mmgrid.paradigms.text import ground_scores

    items = torch.eye(3)
    sims = torch.tensor([[0.2, 0.1, 0.0]])
    hist_w = torch.tensor([[0.0, 1.0, 0.0]])  # the history is item 1
    cooc = torch.tensor([[0, 0, 0], [0.0, 0.25, 0.5], [0, 0, 0]])  # item 1 is followed by 2 (twice as often as 1)
    assert torch.equal(ground_scores(sims, None, 0.0, None, items, 0.0, None, 0.0), sims)  # all off: today's score
    h = ground_scores(sims, None, 0.0, hist_w, items, 0.5, None, 0.0)
    np.testing.assert_allclose(h.numpy(), [[0.2, 0.6, 0.0]], rtol=1e-6)  # cos(title_1, title_i) = e_1
    c = ground_scores(sims, None, 0.0, hist_w, items, 0.0, cooc, 1.0)
    np.testing.assert_allclose(c.numpy(), [[0.2, 0.6, 1.0]], rtol=1e-6)  # C / max C = [0, 0.5, 1]
    pop = ground_scores(sims, np.array([0, 0, 0]), 1.0, None, items, 0.0, None, 0.0)
    np.testing.assert_allclose(pop.numpy(), -np.sqrt(2 - 2 * sims.numpy()), rtol=1e-6)  # -L2 distance


def test_ground_max_and_beam_candidates() -> None:
    items = torch.eye(4)
    title_row = {"a": 0, "b": 1, "c": 2, "d": 3}
    p = TextKnobs.resolve({"beam_combine": "max", "beam_candidates": 0})
    m = TextParadigm._ground([["b", "c"]], np.array([[0.0, -1.0]]), items, title_row, p)
    assert m.tolist() == [[0.0, 1.0, 1.0, 0.0]]
    # one candidate per beam: the beams' own items keep their similarity, the rest drop to -1
    cands = TextParadigm._ground([["b", "c"]], np.array([[0.0, -1.0]]), items, title_row,
                                 TextKnobs.resolve({"beam_combine": "weighted", "beam_candidates": 1}))
    w = 1 / (1 + np.exp(-1.0))
    np.testing.assert_allclose(cands.numpy(), [[-1.0, w, 1 - w, -1.0]], atol=1e-6)


def test_rank_generated_defaults_equal_rank_and_cooc_follows_the_history(tiny_base_shared: Any,
                                                                         tiny_domain: Any) -> None:
    model = P.build(tiny_base_shared, tiny_domain, {"max_history": 3}, seed=0)
    hists = _histories(tiny_domain)[:6]
    texts, scores = P.generate(model, hists)
    np.testing.assert_array_equal(P.rank(model, tiny_domain, hists, 5),
                                  P.rank_generated(model, tiny_domain, hists, 5, texts, scores))
    P.examples(model, tiny_domain, "pretrain")  # trained phases now give co-occurrence counts
    ranked = P.rank_generated(model, tiny_domain, hists, 1, texts, scores,
                              overrides={"cooc_weight": 100.0, "cooc_window": 1, "history_decay": 0.01})
    from mmgrid.paradigms.text import cooc_matrix

    inter = tiny_domain.interactions.filter(tiny_domain.interactions["phase"] == "pretrain")
    p = cooc_matrix(inter["user_idx"].to_numpy(), inter["item_idx"].to_numpy(), tiny_domain.n_items, 1).numpy()
    for row, hist in zip(ranked, hists):
        follow = p[hist[-1]].copy()
        follow[hist] = -1  # history items are never returned
        if follow.max() > 0:
            assert follow[row[0]] == follow.max()


@pytest.mark.parametrize("bad", [{"beam_candidates": -1}, {"cooc_window": 0}, {"cooc_weight": -0.1},
                                 {"history_weight": float("nan")}, {"history_decay": 0.0}])
def test_bad_grounding_knobs_are_config_errors(tiny_base_shared: Any, tiny_domain: Any, bad: dict) -> None:
    from mmgrid.errors import ConfigError

    with pytest.raises(ConfigError, match=next(iter(bad))):
        P.build(tiny_base_shared, tiny_domain, bad, seed=0)


def test_collab_term_prefers_items_consumed_with_the_history(tiny_base_shared: Any, tiny_domain: Any) -> None:
    from mmgrid.paradigms.collab import collab_embeddings
    from mmgrid.paradigms.text import _collab

    model = P.build(tiny_base_shared, tiny_domain, {"max_history": 3}, seed=0)
    P.examples(model, tiny_domain, "pretrain")
    hists = _histories(tiny_domain)[:6]
    texts, scores = P.generate(model, hists)
    base = P.rank_generated(model, tiny_domain, hists, 3, texts, scores)
    ranked = P.rank_generated(model, tiny_domain, hists, 3, texts, scores,
                              overrides={"collab_weight": 1000.0, "collab_dim": 4, "history_decay": 1.0})
    items = torch.from_numpy(np.array(P.item_embeddings(model, tiny_domain)))
    emb, _ = collab_embeddings(tiny_domain, ["pretrain"], 4, 3, items.numpy())
    torch.testing.assert_close(_collab(model.mmgrid_text, tiny_domain, items, 3, 4), torch.from_numpy(emb).float())
    for row, hist in zip(ranked, hists):
        user = emb[hist[-3:]].mean(0)  # decay 1: the last three items weigh alike
        cos = emb @ (user / np.linalg.norm(user))
        cos[hist] = -np.inf
        np.testing.assert_allclose(cos[row[0]], cos.max(), rtol=1e-4)  # the term dominates at this weight
    assert not np.array_equal(base, ranked)


# --------------------------------------------------------------------------- BIGRec's own grounding (min-max, model)


def test_bigrec_adjust_min_max_scales_distance_per_row_and_popularity_over_items() -> None:
    from mmgrid.paradigms.grounding import bigrec_adjust

    # row 0: distances 1, 3, 5 -> 0, 0.5, 1; row 1: 4, 2, 2 -> 1, 0, 0
    dist = torch.tensor([[1.0, 3.0, 5.0], [4.0, 2.0, 2.0]])
    np.testing.assert_allclose(bigrec_adjust(dist, None, 1.0).numpy(), [[0.0, -0.5, -1.0], [-1.0, 0.0, 0.0]],
                               atol=1e-7)
    # counts 2, 6, 10 -> min-max 0, 0.5, 1 (the sum normalisation of BIGRec's code cancels);
    # gamma 1: row 0 -> 0, 0.5/1.5, 1/2; row 1 -> 1, 0, 0
    s = bigrec_adjust(dist, np.array([2, 6, 10]), 1.0)
    np.testing.assert_allclose(s.numpy(), [[0.0, -1 / 3, -0.5], [-1.0, 0.0, 0.0]], atol=1e-6)
    # gamma 2: item 1's 0.5 / 1.5^2 = 0.222 still beats item 2's 1 / 2^2 = 0.25
    s2 = bigrec_adjust(dist, np.array([2, 6, 10]), 2.0)
    np.testing.assert_allclose(s2.numpy()[0], [0.0, -0.5 / 2.25, -0.25], atol=1e-6)
    assert s2[0].argsort(descending=True).tolist() == [0, 1, 2]
    # gamma 4: 0.5 / 1.5^4 = 0.0988 > 1 / 2^4 = 0.0625: the most popular item passes item 1,
    # never the nearest item (scaled distance 0 whatever its popularity)
    s4 = bigrec_adjust(dist, np.array([2, 6, 10]), 4.0)
    assert s4[0].argsort(descending=True).tolist() == [0, 2, 1]
    # ties stay ties: row 1's two nearest items (both 0)
    assert s4[1, 1] == s4[1, 2] == 0.0


def test_bigrec_adjust_constant_row_and_constant_counts_scale_to_zero() -> None:
    from mmgrid.paradigms.grounding import bigrec_adjust, minmax_rows

    dist = torch.tensor([[2.0, 2.0, 2.0], [0.0, 1.0, 2.0]])
    out = bigrec_adjust(dist, np.array([5, 5, 5]), 3.0)  # constant counts: no popularity effect
    assert torch.isfinite(out).all()
    np.testing.assert_allclose(out.numpy(), [[0.0, 0.0, 0.0], [0.0, -0.5, -1.0]], atol=1e-7)
    np.testing.assert_allclose(minmax_rows(torch.tensor([7.0, 7.0])).numpy(), [0.0, 0.0])


def test_ground_scores_minmax_orders_like_bigrec_and_raw_default_is_unchanged() -> None:
    from mmgrid.paradigms.grounding import base_score, ground_scores, popularity_adjust

    sims = torch.tensor([[0.9, 0.5, 0.1, 0.0]])
    items = torch.eye(4)
    counts = np.array([0, 1, 4, 9])
    raw = ground_scores(sims, counts, 1.0, None, items, 0.0, None, 0.0)
    assert torch.equal(raw, popularity_adjust(sims, counts, 1.0))  # default scale: the same numbers
    assert torch.equal(base_score(sims, counts, 1.0), raw) and torch.equal(base_score(sims, None, 1.0), sims)
    mm = base_score(sims, counts, 1.0, scale="minmax")
    d = np.sqrt(2 - 2 * np.array([0.9, 0.5, 0.1, 0.0]))
    dn = (d - d.min()) / (d.max() - d.min())
    expect = -dn / (1 + np.array([0, 1, 4, 9]) / 9)
    np.testing.assert_allclose(mm.numpy()[0], expect, atol=1e-6)
    # gamma 0 under minmax: a monotone rescaling of each row, the same order as the raw similarities
    mm0 = base_score(sims, None, 0.0, scale="minmax")
    assert mm0.argsort(descending=True).tolist() == sims.argsort(descending=True).tolist()
    # a distance given directly (model embeddings) replaces sqrt(2 - 2 cos)
    dist = torch.tensor([[3.0, 1.0, 2.0, 5.0]])
    np.testing.assert_allclose(base_score(sims, None, 0.0, dist=dist).numpy(),
                               -dist.numpy())
    np.testing.assert_allclose(base_score(sims, counts, 1.0, dist=dist).numpy(),
                               [[-3.0, -1.0 / (1 + 1 / 9), -2.0 / (1 + 4 / 9), -2.5]], rtol=1e-6)


def test_rank_generated_minmax_gamma_zero_equals_raw_gamma_zero(tiny_base_shared: Any, tiny_domain: Any) -> None:
    model = P.build(tiny_base_shared, tiny_domain, {"max_history": 3}, seed=0)
    P.examples(model, tiny_domain, "pretrain")
    hists = _histories(tiny_domain)[:6]
    texts, scores = P.generate(model, hists)
    raw0 = P.rank_generated(model, tiny_domain, hists, 5, texts, scores, overrides={"popularity_gamma": 0.0})
    mm0 = P.rank_generated(model, tiny_domain, hists, 5, texts, scores,
                           overrides={"popularity_gamma": 0.0, "grounding_scale": "minmax"})
    np.testing.assert_array_equal(raw0, mm0)


def test_model_embed_is_the_last_normed_hidden_state_at_the_last_token(built: torch.nn.Module) -> None:
    from mmgrid.paradigms.text import model_embed

    info = built.mmgrid_text
    built.eval()
    lists = [info.title_ids[0], info.title_ids[1][:2]]  # different lengths: left padding must not matter
    vecs = model_embed(built, info, lists)
    head = [info.tokenizer.bos_token_id] if info.tokenizer.bos_token_id is not None else []
    for row, ids in zip(vecs, lists):
        with torch.no_grad():
            out = built(input_ids=torch.tensor([head + list(ids)]), output_hidden_states=True)
        torch.testing.assert_close(row, out.hidden_states[-1][0, -1].float(), rtol=1e-4, atol=1e-4)


def test_ground_model_combines_beam_distances() -> None:
    vecs = torch.tensor([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]])
    title_row = {"a": 0, "b": 1, "c": 2}
    texts = [["b", "novel"]]
    scores = np.log(np.array([[0.75, 0.25]]))

    def embed(ts: list[str]) -> torch.Tensor:
        assert ts == ["novel"]  # catalog titles reuse their vectors; only new text is embedded
        return torch.tensor([[0.0, 0.0]])

    best = P._ground_model(texts, scores, vecs, title_row, TextKnobs.resolve({"beam_combine": "best"}), embed)
    np.testing.assert_allclose(best.numpy(), [[5.0, 0.0, 5.0]], atol=1e-5)  # only "b" is read
    w = P._ground_model(texts, scores, vecs, title_row, TextKnobs.resolve({}), embed)
    np.testing.assert_allclose(w.numpy(), [[0.75 * 5 + 0.25 * 0, 0.75 * 0 + 0.25 * 5, 0.75 * 5 + 0.25 * 10]],
                               atol=1e-5)
    mx = P._ground_model(texts, scores, vecs, title_row, TextKnobs.resolve({"beam_combine": "max"}), embed)
    np.testing.assert_allclose(mx.numpy(), [[0.0, 0.0, 5.0]], atol=1e-5)


def test_rank_with_model_embedder_returns_the_generated_title_first(tiny_base_shared: Any, tiny_domain: Any) -> None:
    model = P.build(tiny_base_shared, tiny_domain, {"max_history": 3, "ground_embedder": "model",
                                                    "beam_combine": "best", "popularity_gamma": 0.0,
                                                    "exclude_history": False}, seed=0)
    hists = _histories(tiny_domain)[:4]
    texts, scores = P.generate(model, hists)
    ranked = P.rank(model, tiny_domain, hists, 3)
    np.testing.assert_array_equal(ranked, P.rank_generated(model, tiny_domain, hists, 3, texts, scores))
    # a catalog title as the best beam: its own item is at distance 0, so it comes first
    picks = [3, 0, 5, 1]
    fake = [[tiny_domain.item_titles[j].strip()] * len(b) for j, b in zip(picks, texts)]
    got = P.rank_generated(model, tiny_domain, hists, 3, fake, scores)
    assert got[:, 0].tolist() == picks


def test_model_embedder_refuses_beam_candidates(tiny_base_shared: Any, tiny_domain: Any) -> None:
    from mmgrid.errors import ConfigError

    with pytest.raises(ConfigError, match="beam_candidates must be 0"):
        TextKnobs.resolve({"ground_embedder": "model", "beam_candidates": 5})
    with pytest.raises(ConfigError, match="grounding_scale"):
        TextKnobs.resolve({"grounding_scale": "zscore"})


def _trained_text(tiny_base: Any, tiny_domain: Any, **knobs: Any) -> torch.nn.Module:
    """A text model one AdamW burst away from its base, so the base's and the model's hidden states differ."""
    model = P.build(tiny_base, tiny_domain, {"max_history": 3, **knobs}, seed=0)
    exs = P.examples(model, tiny_domain, "p1")[:8]
    fit_batch(P, model, P.collate(model, exs), steps=5, lr=5e-3)
    model.eval()
    return model


def test_base_embedder_grounds_with_the_frozen_base(tiny_base: Any, tiny_domain: Any) -> None:
    """``ground_embedder: base`` (BIGRec's code): titles and generated text embedded by the base LM's
    last normed hidden state at the last token, not by the fine-tuned model's."""
    from mmgrid.paradigms.text import grounding_vectors

    base = tiny_base.model
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = _trained_text(tiny_base, tiny_domain, ground_embedder="base", beam_combine="best",
                          popularity_gamma=0.0, exclude_history=False)
    for k, v in base.state_dict().items():  # training worked on a copy; the base is untouched
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    info = model.mmgrid_text
    head = [info.tokenizer.bos_token_id] if info.tokenizer.bos_token_id is not None else []
    with torch.no_grad():  # the oracle: HF's own hidden_states[-1] of the base, one title at a time
        want = torch.stack([base(input_ids=torch.tensor([head + list(ids)]), output_hidden_states=True)
                            .hidden_states[-1][0, -1].float() for ids in info.title_ids])
    got = grounding_vectors(model, info.params)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    tuned = grounding_vectors(model, TextKnobs.resolve({**info.params.to_dict(), "ground_embedder": "model"}))
    assert (tuned - want).abs().max() > 1e-3  # the fine-tuned model's states are another embedding
    # ranking: a catalog title as the best beam is at distance 0 from its own item in any embedding
    hists = _histories(tiny_domain)[:4]
    texts, scores = P.generate(model, hists)
    picks = [2, 7, 0, 4]
    fake = [[tiny_domain.item_titles[j].strip()] * len(b) for j, b in zip(picks, texts)]
    assert P.rank_generated(model, tiny_domain, hists, 3, fake, scores)[:, 0].tolist() == picks
    # and a novel text ranks items by its L2 distance to them under the base
    novel = [["zzz qq"] * len(b) for b in texts]
    ranked = P.rank_generated(model, tiny_domain, hists, 5, novel, scores)
    ids = info.tokenizer([" zzz qq"], add_special_tokens=False)["input_ids"][0][:int(info.params.max_title_tokens)]
    with torch.no_grad():
        q = base(input_ids=torch.tensor([head + ids]), output_hidden_states=True).hidden_states[-1][0, -1].float()
    dist = torch.linalg.vector_norm(want - q, dim=1)
    got = dist[torch.as_tensor(ranked[0])]  # relative slack: near-ties may order differently on another CPU
    assert torch.all(got[1:] >= got[:-1] * (1 - 1e-5))  # ascending in the base's L2 distance
    assert got[-1] <= dist.sort().values[4] * (1 + 1e-5)  # and the 5 nearest items


def test_base_embedder_needs_a_model_that_knows_its_base(tiny_base: Any, tiny_domain: Any) -> None:
    model = _trained_text(tiny_base, tiny_domain)
    ckpt = P.save(model)  # a checkpoint made outside a registry does not know its base
    loaded = P.load(ckpt, tiny_domain, {"ground_embedder": "base"})
    with pytest.raises(ModelError, match="ground_embedder 'base' needs the grid's base LM"):
        P.rank(loaded, tiny_domain, _histories(tiny_domain)[:2], 3)
    with pytest.raises(ConfigError, match="ground_embedder 'base' grounds every item"):
        TextKnobs.resolve({"ground_embedder": "base", "beam_candidates": 5})


def test_a_checkpoint_read_from_the_registry_finds_its_base(tmp_path: Any, tiny_base: Any, tiny_domain: Any) -> None:
    """load_checkpoint hands the checkpoint its lineage's base LM; a text model loaded from it grounds
    with ``ground_embedder: base`` exactly as the model it was saved from."""
    from mmgrid.models.base import bundle_files
    from mmgrid.paradigms.text import grounding_vectors
    from mmgrid.registry.api import Registry
    from mmgrid.runtime.checkpoints import checkpoint_meta, load_checkpoint

    reg = Registry.open(tmp_path / "reg")
    try:
        base_id = reg.put({k: v.detach().clone() for k, v in tiny_base.model.state_dict().items()},
                          {"paradigm": "base", "domain": "all", "period": "base"}, "base", files=bundle_files(tiny_base),
                          seed=0)
        model = _trained_text(tiny_base, tiny_domain, ground_embedder="base")
        ck = P.save(model)
        p1 = reg.put(ck.state, {"paradigm": "text", "domain": tiny_domain.name, "period": "p1"}, "trained",
                     parents=[(base_id, "init")], files=ck.files, meta=checkpoint_meta(ck), seed=0)
        ck2 = P.save(model)
        p2 = reg.put({k: v + 0 for k, v in ck2.state.items()},
                     {"paradigm": "text", "domain": tiny_domain.name, "period": "p2"}, "trained",
                     parents=[(p1, "init")], files=ck2.files, meta=checkpoint_meta(ck2), seed=1)
        loaded = P.load(load_checkpoint(reg, p2), tiny_domain, {})
        want = grounding_vectors(model, model.mmgrid_text.params)
        torch.testing.assert_close(grounding_vectors(loaded, loaded.mmgrid_text.params), want, rtol=1e-5, atol=1e-5)
    finally:
        reg.close()


def test_a_checkpoint_without_a_base_in_its_lineage_says_so(tmp_path: Any, tiny_base: Any, tiny_domain: Any) -> None:
    from mmgrid.registry.api import Registry
    from mmgrid.runtime.checkpoints import checkpoint_meta, load_checkpoint

    reg = Registry.open(tmp_path / "reg")
    try:
        ck = P.save(_trained_text(tiny_base, tiny_domain))
        cid = reg.put(ck.state, {"paradigm": "text", "domain": tiny_domain.name, "period": "p1"}, "trained",
                      files=ck.files, meta=checkpoint_meta(ck), seed=0)  # no parents: its own root
        loaded = P.load(load_checkpoint(reg, cid), tiny_domain, {"ground_embedder": "base"})
        with pytest.raises(ModelError, match="not a base"):
            P.rank(loaded, tiny_domain, _histories(tiny_domain)[:2], 3)
    finally:
        reg.close()
