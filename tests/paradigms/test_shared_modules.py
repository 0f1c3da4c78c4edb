"""Shared paradigm helpers: params, padding, top-k, examples, token cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmgrid.errors import ConfigError
from mmgrid.paradigms.examples import load_examples, pad_right
from mmgrid.paradigms.item_tokens import cached_item_tokens
from mmgrid.paradigms.params import resolve_params
from mmgrid.paradigms.ranking import topk_items


def test_resolve_params_defaults_types_and_unknown_keys() -> None:
    d = {"a": 1, "t": 0.5, "flag": True}
    assert resolve_params(None, d, "x") == d
    assert resolve_params({"t": 1}, d, "x")["t"] == 1.0  # ints are fine for floats
    with pytest.raises(ConfigError, match="x.b: unknown"):
        resolve_params({"b": 2}, d, "x")
    with pytest.raises(ConfigError, match="x.a: expected int"):
        resolve_params({"a": "two"}, d, "x")
    with pytest.raises(ConfigError, match="x.a"):
        resolve_params({"a": True}, d, "x")


def test_pad_right_keeps_last_entries_and_handles_empty() -> None:
    ids, lengths = pad_right([[1, 2, 3], [], [4]], pad=0, max_len=2)
    assert ids.tolist() == [[2, 3], [0, 0], [4, 0]]
    assert lengths.tolist() == [2, 0, 1]
    ids, lengths = pad_right([[]], pad=7)
    assert ids.tolist() == [[7]] and lengths.tolist() == [0]


def test_topk_items_best_first_with_exclusion() -> None:
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.4, 0.3, 0.2, 0.1]])
    assert topk_items(scores, 2).tolist() == [[1, 3], [0, 1]]
    assert topk_items(scores, 2, [[1], [0, 1]]).tolist() == [[3, 2], [2, 3]]
    assert topk_items(scores, 2, [[1], [0, 1]]).dtype == np.int64
    with pytest.raises(ConfigError):
        topk_items(scores, 5)


def test_load_examples_cuts_history(tiny_domain) -> None:
    ex = load_examples(tiny_domain, "p2", max_history=3)
    df = tiny_domain.examples("p2")
    assert len(ex) == df.height
    for e, h, t in zip(ex, df["history"].to_list(), df["target"].to_list()):
        assert list(e.history) == list(h)[-3:] and e.target == t


def test_item_token_cache_appends_eos_and_is_reused(tiny_base_shared, tiny_domain) -> None:
    tok = tiny_base_shared.tokenizer
    a = cached_item_tokens(tok, tiny_domain, 6)
    assert a is cached_item_tokens(tok, tiny_domain, 6)
    assert a.ids.shape[0] == tiny_domain.n_items and a.ids.shape[1] <= 6
    last = a.ids[torch.arange(tiny_domain.n_items), a.lengths - 1]
    assert (last == tok.eos_token_id).all()


def test_knob_declaration_is_the_one_source_of_defaults_ranges_and_docs() -> None:
    from mmgrid.paradigms import get_paradigm
    from mmgrid.paradigms.params import KNOBS, RANGES, Knobs, knob, paradigm_knobs

    @paradigm_knobs("toy_knobs")
    class ToyKnobs(Knobs):
        cross_checks = [(lambda p: p["lo"] <= p["hi"], "lo={lo} is above hi={hi}")]
        lo: int = knob(1, 0, None, "int", "the low end")
        hi: float = knob(2.0, 0, 10, "float", "the high end")

    try:
        assert ToyKnobs.defaults() == {"lo": 1, "hi": 2.0} and RANGES["toy_knobs"]["hi"] == (0, 10, "float")
        assert ToyKnobs.docs() == {"lo": "the low end", "hi": "the high end"}
        k = ToyKnobs.resolve({"hi": 3})
        assert (k.lo, k.hi, type(k.hi)) == (1, 3.0, float) and ToyKnobs.resolve(k.to_dict()) == k
        with pytest.raises(ConfigError, match=r"paradigm_params.toy_knobs.hi: 11.0 is out of range"):
            ToyKnobs.resolve({"hi": 11})
        with pytest.raises(ConfigError, match="lo=5 is above hi=4.0"):
            ToyKnobs.resolve({"lo": 5, "hi": 4})
        with pytest.raises(ConfigError, match="unknown parameter"):
            ToyKnobs.resolve({"mid": 1})
    finally:
        for table in (KNOBS, RANGES):
            table.pop("toy_knobs", None)
        from mmgrid.paradigms.params import CROSS_CHECKS
        CROSS_CHECKS.pop("toy_knobs", None)
    for name in ("text", "semid", "emb", "sasrec"):  # every built-in knob is declared once, with a meaning
        defaults = get_paradigm(name).defaults  # importing the paradigm registers its knobs
        cls = KNOBS[name]
        assert defaults == cls.defaults() and set(RANGES[name]) == set(cls.defaults())
        assert all(doc.strip() for doc in cls.docs().values()), name
