"""prefilled_beam_generate: HF beam search with the prompt encoded once per query, same result."""

from __future__ import annotations

import pytest
import torch

from mmgrid.models.builders import tiny_qwen3
from mmgrid.models.generation import prefilled_beam_generate


def _model_and_prompts(seed: int = 0):
    torch.manual_seed(seed)
    model = tiny_qwen3(96).eval()
    lengths = [7, 3, 11, 5]  # left padding of different widths, as text.generate batches histories
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, width - n:] = torch.randint(3, 96, (n,))
        mask[i, width - n:] = 1
    return model, ids, mask


KW = dict(num_return_sequences=4, max_new_tokens=6, do_sample=False, early_stopping=True, use_cache=True,
          eos_token_id=2, pad_token_id=0, output_scores=True, return_dict_in_generate=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_same_beams_and_scores_as_plain_generate(seed: int) -> None:
    model, ids, mask = _model_and_prompts(seed)
    with torch.no_grad():
        plain = model.generate(input_ids=ids, attention_mask=mask, num_beams=4, **KW)
    fast = prefilled_beam_generate(model, ids, mask, 4, **KW)
    assert fast.sequences.shape == plain.sequences.shape
    assert torch.equal(fast.sequences, plain.sequences)
    assert torch.equal(fast.sequences[:, :ids.shape[1]], ids.repeat_interleave(4, 0))  # prompts kept in front
    torch.testing.assert_close(fast.sequences_scores, plain.sequences_scores, rtol=1e-4, atol=1e-5)


def test_prefill_is_used_and_plain_paths_are_kept() -> None:
    model, ids, mask = _model_and_prompts()
    seen: list[tuple[int, int]] = []  # the token ids every pass embeds (the prefill and generate's steps)
    hook = model.model.embed_tokens.register_forward_pre_hook(lambda _m, a: seen.append(tuple(a[0].shape)))
    last_mlp: list[tuple[int, ...]] = []
    hook2 = model.model.layers[-1].mlp.register_forward_pre_hook(lambda _m, a: last_mlp.append(tuple(a[0].shape)))
    try:
        prefilled_beam_generate(model, ids, mask, 4, **KW)
    finally:
        hook.remove()
        hook2.remove()
    # one pass over the prompts without their last token, 4 rows (not 16); then generate's
    # own steps on 16 rows, the first of which reads only the last prompt token
    assert seen[0] == (4, ids.shape[1] - 1)
    assert seen[1] == (16, 1)
    # the prefill leaves the last layer's MLP alone (only its keys and values are cached): every call
    # of it is one of generate's one-token steps on 16 rows
    assert last_mlp and all(shape[:2] == (16, 1) for shape in last_mlp)
    # one beam or a one-token prompt: plain generate (nothing to share)
    kw1 = {**KW, "num_return_sequences": 1}
    with torch.no_grad():
        plain = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, **kw1)
    assert torch.equal(prefilled_beam_generate(model, ids, mask, 1, **kw1).sequences, plain.sequences)
    one = ids[:, -1:]
    with torch.no_grad():
        plain = model.generate(input_ids=one, attention_mask=mask[:, -1:], num_beams=4, **KW)
    assert torch.equal(prefilled_beam_generate(model, one, mask[:, -1:], 4, **KW).sequences, plain.sequences)


def test_no_deprecated_cache_name_is_read(monkeypatch) -> None:
    """The prefill reads the forward's cache under the name this transformers uses (reading the old
    ``past_key_values`` of a 5.x output logs a deprecation warning into every demo run)."""
    from transformers.utils import generic

    said: list[str] = []
    monkeypatch.setattr(generic.logger, "warning_once", lambda msg, *a, **k: said.append(str(msg)))
    model, ids, mask = _model_and_prompts()
    prefilled_beam_generate(model, ids, mask, 4, **KW)
    assert not [m for m in said if "deprecated" in m]
