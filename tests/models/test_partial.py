"""mmgrid.models.partial: the last layer only at the read positions equals the full HF forward there."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from mmgrid.models.builders import tiny_qwen3
from mmgrid.models.partial import attention_mask_4d, hidden_at, supports_partial
from mmgrid.models import partial as partial_mod
from mmgrid.paradigms.lm import TokenExample, collate_lm, lm_loss


def _qwen3(layers: int, vocab: int = 90) -> Qwen3ForCausalLM:
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                      tie_word_embeddings=False, use_cache=False, pad_token_id=0)
    return Qwen3ForCausalLM(cfg)


def _close_grads(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    """Each gradient tensor equal up to float rounding relative to its own scale (summation order differs)."""
    for a, b in zip(got, want):
        assert (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-8


def _grads(loss: torch.Tensor, model: torch.nn.Module) -> list[torch.Tensor]:
    params = [p for p in model.parameters() if p.requires_grad]
    return [g if g is not None else torch.zeros_like(p)
            for g, p in zip(torch.autograd.grad(loss, params, allow_unused=True), params)]


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_left_padded_tail_columns_equal_the_full_forward_values_and_gradients(layers: int) -> None:
    torch.manual_seed(layers)
    model = _qwen3(layers).train()
    inner = model.model
    assert supports_partial(inner)
    lengths = torch.tensor([11, 4, 7, 11, 9])
    width = int(lengths.max())
    ids = torch.randint(3, 90, (5, width))
    mask = (torch.arange(width)[None] >= (width - lengths)[:, None]).long()
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    cols = torch.arange(width - 3, width)[None].expand(5, -1)
    part = hidden_at(inner, cols, attention_mask=mask, input_ids=ids, position_ids=pos)
    full = inner(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).last_hidden_state[:, -3:]
    assert part.shape == (5, 3, 32)
    torch.testing.assert_close(part, full, rtol=1e-5, atol=1e-6)
    weight = torch.randn_like(full)  # a loss that reads every selected value
    _close_grads(_grads((part * weight).sum(), model), _grads((full * weight).sum(), model))


def test_right_padded_one_position_per_row_from_embeddings() -> None:
    # emb's user LLM: inputs_embeds, right padding, the last real position of each row
    torch.manual_seed(0)
    inner = _qwen3(2).model.eval()
    lengths = torch.tensor([1, 6, 3, 6])
    emb = torch.randn(4, 6, 32)
    mask = (torch.arange(6)[None] < lengths[:, None]).long()
    last = (lengths - 1)[:, None]
    with torch.no_grad():
        part = hidden_at(inner, last, attention_mask=mask, inputs_embeds=emb)[:, 0]
        full = inner(inputs_embeds=emb, attention_mask=mask, use_cache=False).last_hidden_state
    torch.testing.assert_close(part, full[torch.arange(4), lengths - 1], rtol=1e-5, atol=1e-6)


def test_partial_lm_loss_equals_the_plain_one(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(1)
    model = tiny_qwen3(70).train()
    g = torch.Generator().manual_seed(1)
    examples = [TokenExample(tuple(torch.randint(3, 70, (n,), generator=g).tolist()), t)
                for n, t in ((12, 3), (5, 2), (20, 4), (9, 1))]
    batch = collate_lm(examples, pad=0, max_len=64)
    fast = lm_loss(model, batch)
    fast_grads = _grads(fast, model)
    monkeypatch.setattr(partial_mod, "supports_partial", lambda inner: False)  # the plain forward and a gather
    plain = lm_loss(model, batch)
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=0.0)
    assert 2.0 < float(plain.detach()) < 6.0  # ~log(70) = 4.2 for an untrained model: a real loss, not a constant
    _close_grads(fast_grads, _grads(plain, model))


def test_mask_lets_no_real_query_see_padding_and_no_row_be_empty() -> None:
    mask = attention_mask_4d(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0]]))[:, 0]
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    assert mask[0, 2:].tolist() == (causal[2:] & torch.tensor([False, False, True, True])).tolist()
    assert mask[0, 0].tolist() == [True, False, False, False]  # a padding query sees itself only
    assert mask[1, :3].tolist() == causal[:3].tolist()
    assert mask.any(-1).all()


def test_models_it_cannot_run_are_refused() -> None:
    eager = _qwen3(2)
    eager.config._attn_implementation = "eager"  # the earlier layers would get a boolean mask
    assert not supports_partial(eager.model)
    sliding = _qwen3(2)
    sliding.config.layer_types = ["full_attention", "sliding_attention"]
    assert not supports_partial(sliding.model)
    assert not supports_partial(torch.nn.Linear(3, 3))
    assert supports_partial(_qwen3(2).model)


def test_prefill_cache_holds_the_keys_and_values_of_a_full_forward() -> None:
    from mmgrid.models.generation import output_cache
    from mmgrid.models.partial import prefill_cache

    torch.manual_seed(2)
    model = _qwen3(3).eval()
    lengths = torch.tensor([9, 3, 6])
    ids = torch.randint(3, 90, (3, 9))
    mask = (torch.arange(9)[None] >= (9 - lengths)[:, None]).long()
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        want = output_cache(model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True))
        got = prefill_cache(model, ids, mask, pos)
    real = mask.bool()[:, None, :, None]  # padding positions are never attended to: only real ones compare
    assert len(got.layers) == len(want.layers) == 3
    for g, w in zip(got.layers, want.layers):
        assert g.keys.shape == w.keys.shape == (3, 2, 9, 8)
        torch.testing.assert_close(g.keys * real, w.keys * real, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g.values * real, w.values * real, rtol=1e-5, atol=1e-6)
