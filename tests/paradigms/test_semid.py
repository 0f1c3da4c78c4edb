"""SemID (LC-Rec-style) paradigm: unique codes, trie-constrained decoding, tokens, checkpoints, merges."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paradigm_helpers import fit_batch
from mmgrid.errors import ModelError
from mmgrid.paradigms import Checkpoint, get_paradigm
from mmgrid.paradigms.errors import CheckpointMismatchError
from mmgrid.paradigms.semid import CodeTrie, SemIDError, semantic_ids, trie_beam_search
from mmgrid.paradigms.semid.quantizer import resolve_collisions
from mmgrid.paradigms.semid.tokens import code_token_names

sys.path.insert(0, str(Path(__file__).parent))
from paradigm_helpers import make_tiny_domain  # noqa: E402

P = get_paradigm("semid")
PARAMS = {"levels": 3, "codebook_size": 8, "max_history": 4, "num_beams": 12, "align_ratio": 0.5}


@pytest.fixture(scope="module")
def built(tiny_domain: Any, tiny_base_shared: Any) -> torch.nn.Module:
    return P.build(tiny_base_shared, tiny_domain, PARAMS, seed=0)


def _histories(domain: Any, phase: str = "test") -> list[list[int]]:
    return [list(h) for h in domain.examples(phase)["history"].to_list()]


# --------------------------------------------------------------------------- quantizer


def test_collision_rule_by_hand() -> None:
    # Items 0-2 share prefix (0,) and last code 1. Item 2 is closest to entry 1 and keeps it;
    # item 0 (first of the tied rest) takes its nearest free entry 3, item 1 its nearest free entry 0.
    codes = np.array([[0, 1], [0, 1], [0, 1], [1, 1]])
    book = np.array([[0.0], [1.0], [5.0], [2.0]])  # last-level entries
    resid = np.array([[1.6], [0.4], [1.1], [1.0]])  # distances to entry 1: 0.36, 0.36, 0.01
    out = resolve_collisions(codes, book, resid)
    assert out.codes.tolist() == [[0, 3], [0, 0], [0, 1], [1, 1]]
    assert out.level_sizes == [4, 4]


def test_overflowing_prefix_gets_a_disambiguation_level() -> None:
    codes = np.zeros((5, 2), dtype=np.int64)  # 5 items, one prefix, only 2 last-level entries
    out = resolve_collisions(codes, np.array([[0.0], [1.0]]), np.zeros((5, 1)))
    assert out.n_levels == 3 and out.level_sizes == [2, 2, 5]
    assert len({tuple(r) for r in out.codes}) == 5


@settings(max_examples=10, deadline=None)
@given(n=st.integers(8, 60), dup=st.integers(0, 20), seed=st.integers(0, 10_000), levels=st.integers(1, 3))
def test_every_item_gets_a_unique_code(n: int, dup: int, seed: int, levels: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    x[: min(dup, n)] = x[0]  # identical embeddings (duplicate texts) force collisions
    sids = semantic_ids(x, levels=levels, codebook_size=4, seed=seed)
    assert sids.codes.shape[0] == n and len({tuple(r) for r in sids.codes}) == n
    assert (sids.codes >= 0).all() and (sids.codes < np.array(sids.level_sizes)).all()


def test_too_few_items_for_the_codebook_is_a_named_error(tiny_domain: Any, tiny_base_shared: Any) -> None:
    with pytest.raises(SemIDError, match="codebook_size") as err:
        P.build(tiny_base_shared, tiny_domain, {"codebook_size": 64}, seed=0)
    assert isinstance(err.value, ModelError) and tiny_domain.name in str(err.value)


# --------------------------------------------------------------------------- trie beam search


def _random_codes(rng: np.random.Generator, sizes: list[int], n: int) -> np.ndarray:
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij"), -1).reshape(-1, len(sizes))
    return grid[rng.choice(len(grid), size=min(n, len(grid)), replace=False)]


def _table_step(rng: np.random.Generator, sizes: list[int], scale: float):
    """A step function whose log-probs depend on the whole prefix (memoised per prefix)."""
    memo: dict[tuple[int, ...], torch.Tensor] = {}

    def logp(prefix: tuple[int, ...], level: int) -> torch.Tensor:
        if prefix not in memo:
            memo[prefix] = torch.log_softmax(torch.tensor(rng.normal(size=sizes[level]) * scale), 0).float()
        return memo[prefix]

    def step(prefixes: torch.Tensor, level: int) -> torch.Tensor:
        n, b = prefixes.shape[:2]
        rows = [logp(tuple(p), level) for p in prefixes.reshape(n * b, level).tolist()]
        return torch.stack(rows).view(n, b, sizes[level])

    return step, logp


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000), levels=st.integers(1, 4), k=st.integers(2, 6), n_codes=st.integers(1, 40),
       beam=st.integers(1, 25), scale=st.sampled_from([0.1, 3.0, 50.0]))
def test_trie_beam_search_never_emits_an_invalid_code(seed, levels, k, n_codes, beam, scale) -> None:
    rng = np.random.default_rng(seed)
    sizes = [k] * levels
    codes = _random_codes(rng, sizes, n_codes)
    trie = CodeTrie(codes, sizes)
    step, logp = _table_step(rng, sizes, scale)
    out, scores = trie_beam_search(step, trie, n=2, beam=beam)
    valid = {tuple(r) for r in codes.tolist()}
    for q in range(2):
        got = [tuple(c) for c, s in zip(out[q].tolist(), scores[q].tolist()) if s != float("-inf")]
        assert got and all(c in valid for c in got) and len(set(got)) == len(got)
        finite = [s for s in scores[q].tolist() if s != float("-inf")]
        assert finite == sorted(finite, reverse=True)
    if beam >= len(codes):  # wide enough: the search is exhaustive, so it is exact
        brute = sorted((sum(float(logp(c[:lvl], lvl)[c[lvl]]) for lvl in range(levels)), c) for c in valid)
        best = [c for _, c in reversed(brute)]
        got = [tuple(c) for c, s in zip(out[0].tolist(), scores[0].tolist()) if s != float("-inf")]
        assert set(got) == set(best)


def test_trie_masks_children_and_unknown_prefixes() -> None:
    trie = CodeTrie(np.array([[0, 1], [0, 2], [2, 0]]), [3, 3])
    assert trie.allowed(0, torch.zeros((1, 0), dtype=torch.long)).tolist() == [[True, False, True]]
    assert trie.allowed(1, torch.tensor([[0], [2], [1]])).tolist() == [
        [False, True, True], [True, False, False], [False, False, False]]


def test_nan_logits_never_select_a_code() -> None:
    trie = CodeTrie(np.array([[0, 0], [1, 1]]), [2, 2])

    def step(prefixes: torch.Tensor, level: int) -> torch.Tensor:
        out = torch.full((*prefixes.shape[:2], 2), float("nan"))
        out[..., 1] = -1.0
        return out

    codes, scores = trie_beam_search(step, trie, n=1, beam=4)
    got = [tuple(c) for c, s in zip(codes[0].tolist(), scores[0].tolist()) if s != float("-inf")]
    assert got == [(1, 1)]


# --------------------------------------------------------------------------- paradigm


def test_build_adds_domain_tokens_and_records_rows(built: torch.nn.Module, tiny_domain: Any, tiny_base_shared: Any
                                                   ) -> None:
    info = built.mmgrid_semid
    base_rows = tiny_base_shared.model.get_input_embeddings().weight.shape[0]
    n_tokens = sum(info.level_sizes)
    assert built.get_input_embeddings().weight.shape[0] == base_rows + n_tokens
    assert info.added_first == base_rows and info.names[0][3] == f"<{tiny_domain.name}_a_3>"
    assert info.tokenizer.convert_tokens_to_ids(info.names[1][0]) == int(info.rows[1][0])
    assert len({tuple(r) for r in info.codes}) == tiny_domain.n_items
    ckpt = P.save(built)
    first, names = ckpt.added_rows["model.embed_tokens.weight"]
    assert first == base_rows and len(names) == n_tokens and "lm_head.weight" not in ckpt.added_rows  # tied


def test_untied_head_records_added_rows_for_both_tensors(tiny_domain: Any, tiny_base_shared: Any) -> None:
    from transformers import Qwen3ForCausalLM

    cfg = tiny_base_shared.model.config.__class__.from_dict({**tiny_base_shared.model.config.to_dict(),
                                                             "tie_word_embeddings": False})
    base = type(tiny_base_shared)(model=Qwen3ForCausalLM(cfg), tokenizer=tiny_base_shared.tokenizer)
    model = P.build(base, tiny_domain, PARAMS, seed=0)
    ckpt = P.save(model)
    assert ckpt.added_rows["lm_head.weight"] == ckpt.added_rows["model.embed_tokens.weight"]
    assert ckpt.state["lm_head.weight"].shape == ckpt.state["model.embed_tokens.weight"].shape


def test_examples_mix_seqrec_and_alignment(built: torch.nn.Module, tiny_domain: Any) -> None:
    info = built.mmgrid_semid
    exs = P.examples(built, tiny_domain, "p1")
    n_seq = tiny_domain.examples("p1").height
    assert len(exs) == n_seq + round(PARAMS.get("align_ratio", 0.5) * n_seq)
    target = int(tiny_domain.examples("p1")["target"][0])
    assert list(exs[0].ids[-3:]) == info.item_code_rows(target) and exs[0].n_target == 3
    eos = info.tokenizer.eos_token_id
    assert any(e.ids[-1] == eos for e in exs[n_seq:]) and any(e.n_target == 3 for e in exs[n_seq:])


def test_training_steps_reduce_loss(tiny_base: Any, tiny_domain: Any) -> None:
    model = P.build(tiny_base, tiny_domain, PARAMS, seed=0)
    batch = P.collate(model, P.examples(model, tiny_domain, "pretrain")[:16])
    first = fit_batch(P, model, batch, steps=8, lr=1e-2)
    assert float(P.loss(model, batch).detach()) < 0.7 * first


def test_rank_returns_valid_unique_items(built: torch.nn.Module, tiny_domain: Any) -> None:
    hists = _histories(tiny_domain)[:10] + [[]]
    for k in (1, 10, 20):
        ranked = P.rank(built, tiny_domain, hists, k)
        assert ranked.shape == (len(hists), k)
        for row, hist in zip(ranked, hists):
            assert len(set(row.tolist())) == k and all(0 <= i < tiny_domain.n_items for i in row)
            assert not set(row.tolist()) & set(hist)


def test_beam_search_items_are_catalog_items(built: torch.nn.Module, tiny_domain: Any) -> None:
    found = P.beam_search(built, _histories(tiny_domain)[:4], beam=30)
    for items in found:
        assert len(items) == len(set(items)) > 0 and all(0 <= i < tiny_domain.n_items for i in items)


def test_save_load_round_trip_gives_identical_rankings(built: torch.nn.Module, tiny_domain: Any) -> None:
    hists = _histories(tiny_domain)[:8]
    again = P.load(P.save(built), tiny_domain, {})
    np.testing.assert_array_equal(P.rank(built, tiny_domain, hists, 10), P.rank(again, tiny_domain, hists, 10))
    np.testing.assert_array_equal(again.mmgrid_semid.codes, built.mmgrid_semid.codes)


def _union(a: Checkpoint, b: Checkpoint, union_meta: bool = True) -> Checkpoint:
    """What a cross-domain merge hands back: shared rows from ``b``, then a's and b's added rows."""
    first_a, names_a = a.added_rows["model.embed_tokens.weight"]
    first_b, names_b = b.added_rows["model.embed_tokens.weight"]
    assert first_a == first_b
    state = dict(b.state)
    for name in a.added_rows:
        ta, tb = a.state[name], b.state[name]
        state[name] = torch.cat([tb[:first_b], ta[first_a:], tb[first_b:]])
    rows = {n: (first_a, list(names_a) + list(names_b)) for n in a.added_rows}
    meta = {**a.meta, "semid_domains": {**a.meta["semid_domains"], **b.meta["semid_domains"]}} if union_meta else a.meta
    return Checkpoint(state=state, files=a.files, meta=meta, added_rows=rows)


def test_load_after_a_merge_like_union_of_added_rows(built: torch.nn.Module, tiny_domain: Any,
                                                     tiny_base_shared: Any) -> None:
    other = make_tiny_domain(name="Tiny_Garden", seed=1)
    model_b = P.build(tiny_base_shared, other, PARAMS, seed=1)
    merged = _union(P.save(built), P.save(model_b))
    for dom, own in ((tiny_domain, built), (other, model_b)):
        loaded = P.load(merged, dom, {})
        info, own_info = loaded.mmgrid_semid, own.mmgrid_semid
        emb, own_emb = loaded.get_input_embeddings().weight, own.get_input_embeddings().weight
        for lvl in range(len(info.rows)):  # every code token maps to the row holding its own vector
            torch.testing.assert_close(emb[info.rows[lvl]], own_emb[own_info.rows[lvl]])
        ranked = P.rank(loaded, dom, _histories(dom)[:6], 10)
        assert all(len(set(r.tolist())) == 10 for r in ranked)
    # The merged tokenizer (domain A's files) learned domain B's tokens at their rows.
    loaded_b = P.load(merged, other, {})
    name = loaded_b.mmgrid_semid.names[0][0]
    assert loaded_b.mmgrid_semid.tokenizer.convert_tokens_to_ids(name) == int(loaded_b.mmgrid_semid.rows[0][0])
    assert len(P.save(loaded_b).added_rows["model.embed_tokens.weight"][1]) == 2 * sum(PARAMS["levels"] * [8])


def test_merged_meta_of_one_input_still_loads_the_other_domain(built: torch.nn.Module, tiny_domain: Any,
                                                               tiny_base_shared: Any) -> None:
    # A merge that keeps only the first input's meta: the second domain's codes are recomputed.
    other = make_tiny_domain(name="Tiny_Garden", seed=1)
    model_b = P.build(tiny_base_shared, other, PARAMS, seed=1)
    merged = _union(P.save(built), P.save(model_b), union_meta=False)
    loaded = P.load(merged, other, {})
    np.testing.assert_array_equal(loaded.mmgrid_semid.codes, model_b.mmgrid_semid.codes)
    torch.testing.assert_close(loaded.get_input_embeddings().weight[loaded.mmgrid_semid.rows[2]],
                               model_b.get_input_embeddings().weight[model_b.mmgrid_semid.rows[2]])


def test_load_for_a_domain_without_tokens_is_a_mismatch(built: torch.nn.Module) -> None:
    with pytest.raises(CheckpointMismatchError, match="lack .* code tokens of domain 'Elsewhere'"):
        P.load(P.save(built), make_tiny_domain(name="Elsewhere"), {})


def test_token_names_carry_domain_and_level() -> None:
    assert code_token_names("Books", [2, 3]) == [["<Books_a_0>", "<Books_a_1>"],
                                                 ["<Books_b_0>", "<Books_b_1>", "<Books_b_2>"]]


# --------------------------------------------------------------------------- collaborative codes


def test_cooccurrence_and_ppmi_by_hand() -> None:
    from mmgrid.paradigms.collab import cooccurrence, ppmi

    # user 0: items 0, 1, 2 in time order; user 1: items 2, 0. Window 1: pairs (0,1), (1,2) of user 0 and
    # (2,0) of user 1, each counted both ways; user 0's last item and user 1's first are never paired.
    c = cooccurrence(np.array([0, 0, 0, 1, 1]), np.array([0, 1, 2, 2, 0]), 4, window=1)
    want = np.zeros((4, 4))
    for a, b in ((0, 1), (1, 2), (2, 0)):
        want[a, b] += 1
        want[b, a] += 1
    assert np.array_equal(c, want)
    c2 = cooccurrence(np.array([0, 0, 0, 1, 1]), np.array([0, 1, 2, 2, 0]), 4, window=2)
    assert c2[0, 2] == 2 and c2[2, 0] == 2  # window 2 adds user 0's (0, 2)
    # PPMI: total 6, row sums 2 each for items 0-2: pmi = log(1 * 6 / 4) for every pair, item 3 stays zero
    m = ppmi(c)
    assert np.allclose(m[0, 1], np.log(1.5), rtol=1e-12) and m[3].sum() == 0 and m[0, 0] == 0


def _two_group_domain(cold_text_like: int):
    """A stand-in domain: 12 items in two groups (0-5, 6-11) that users consume only within a group; item 12
    never occurs (cold). Texts: random unit vectors, the cold item's a near copy of item ``cold_text_like``."""
    import polars as pl

    rng = np.random.default_rng(0)
    rows = []
    for u in range(40):
        group = np.arange(6) + 6 * (u % 2)
        for t, item in enumerate(rng.permutation(group)[:5]):
            rows.append((u, int(item), 1000 * u + t, "pretrain" if t < 4 else "test"))
    inter = pl.DataFrame(rows, schema=["user_idx", "item_idx", "timestamp", "phase"], orient="row")

    class D:
        name, n_items, interactions = "Two", 13, inter

    text = rng.normal(size=(13, 8))
    text[12] = text[cold_text_like] + 0.01 * rng.normal(size=8)
    return D(), text / np.linalg.norm(text, axis=1, keepdims=True)


def test_collab_embeddings_separate_co_consumed_groups_and_place_cold_items_by_text() -> None:
    from mmgrid.paradigms.collab import collab_embeddings, collab_phases

    dom, text = _two_group_domain(cold_text_like=2)
    assert collab_phases(dom.interactions, "train") == ["pretrain"]  # the latest phase (test) is left out
    assert collab_phases(dom.interactions, "first") == ["pretrain"]
    emb, warm = collab_embeddings(dom, ["pretrain"], dim=4, window=3, text=text)
    assert warm[:12].all() and not warm[12]
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-9)
    cos = emb @ emb.T
    same = [cos[i, j] for i in range(12) for j in range(12) if i != j and i // 6 == j // 6]
    cross = [cos[i, j] for i in range(12) for j in range(12) if i // 6 != j // 6]
    assert min(same) > max(cross)
    # the cold item's text is item 2's: the ridge map from text puts it on item 2's side
    assert cos[12, :6].mean() > cos[12, 6:12].mean()


def test_code_sources_and_their_named_errors(tiny_domain: Any) -> None:
    from mmgrid.errors import ConfigError
    from mmgrid.paradigms.collab import code_inputs
    from mmgrid.paradigms.semid.paradigm import SemIdKnobs, domain_codes

    rng = np.random.default_rng(1)
    t, c = rng.normal(size=(5, 6)), rng.normal(size=(5, 3))
    assert np.array_equal(code_inputs("text", t, None), t)
    fused = code_inputs("fused", t, c, collab_weight=0.75)
    # each part unit length before weighting: squared norms split 0.25 / 0.75
    assert np.allclose((fused[:, :6] ** 2).sum(1), 0.25, rtol=1e-9)
    assert np.allclose((fused[:, 6:] ** 2).sum(1), 0.75, rtol=1e-9)
    base = {"levels": 2, "codebook_size": 4}
    for codes in ("text", "collab", "fused"):
        sids = domain_codes(tiny_domain, SemIdKnobs.resolve({**base, "codes": codes}))
        assert len({tuple(r) for r in sids.codes}) == tiny_domain.n_items
    # collab codes follow what users consume together: the tiny domain's next item is of the same theme
    sids = domain_codes(tiny_domain, SemIdKnobs.resolve({**base, "codes": "collab", "codebook_size": 3}))
    theme = np.arange(tiny_domain.n_items) // 10
    purity = sum(np.bincount(theme[sids.codes[:, 0] == v]).max() for v in range(3)) / tiny_domain.n_items
    assert purity > 0.8
    for bad, match in (({"codes": "both"}, "codes"), ({"codes": "collab", "collab_phases": "all"}, "collab_phases"),
                       ({"codes": "fused", "collab_weight": 1.5}, "collab_weight")):
        with pytest.raises(ConfigError, match=match):
            domain_codes(tiny_domain, SemIdKnobs.resolve({**base, **bad}))
