"""Beam-search generation with the prompt encoded once per query instead of once per beam.

Hugging Face ``generate(num_beams=b)`` copies every prompt ``b`` times before its first
forward pass, so the prompt (most of the tokens a recommender's beam search sees: the
whole history) is encoded ``b`` times. :func:`prefilled_beam_generate` encodes all but the
last prompt token once per query, repeats the key/value cache ``b`` times and hands it to
``generate``, which then only runs the last prompt token and the new tokens. The beam search
itself (scores, early stopping, length penalty) is HF's, unchanged; the cached keys and
values are those of the same forward pass on fewer rows (equal up to float rounding of
the batched matrix products, which the test checks with a relative tolerance). Where the
model allows it the prefill computes the cache alone (:func:`mmgrid.models.partial.prefill_cache`:
the last layer's keys and values, nothing after them).
"""

from __future__ import annotations

from typing import Any

import torch

from mmgrid.models.partial import prefill_cache, supports_partial


@torch.no_grad()
def prefilled_beam_generate(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_beams: int,
                            **kwargs: Any) -> Any:
    """``model.generate(input_ids, attention_mask, num_beams=num_beams, **kwargs)`` with a shared prompt prefill.

    Args:
        model: a Hugging Face causal LM with a key/value cache (``use_cache``).
        input_ids: left-padded prompts ``[n, T]``.
        attention_mask: ``[n, T]``, 0 on the left padding.
        num_beams: beam width (1 or a one-token prompt: plain ``generate``).
        **kwargs: passed to ``generate`` (``num_return_sequences``, ``max_new_tokens``, ...).

    Returns:
        What ``generate`` returns (``sequences`` hold the full prompts, as without the prefill).
    """
    n, width = input_ids.shape
    if num_beams <= 1 or width < 2 or kwargs.get("use_cache") is False:
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, **kwargs)
    # positions as generate derives them: cumsum of the mask - 1, padding at 0
    pos = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    if supports_partial(getattr(model, "model", None)):  # only the cache is read: no last-layer MLP, no head
        cache = prefill_cache(model, input_ids[:, :-1], attention_mask[:, :-1], pos[:, :-1])
    else:
        out = model(input_ids=input_ids[:, :-1], attention_mask=attention_mask[:, :-1], position_ids=pos[:, :-1],
                    use_cache=True, logits_to_keep=1)
        cache = output_cache(out)
    cache.batch_repeat_interleave(num_beams)  # the beams of query i are rows i*b .. i*b+b-1, as generate expands
    kwargs["use_cache"] = True
    kwargs[_cache_kwarg(model)] = cache
    return model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, **kwargs)


def output_cache(out: Any) -> Any:
    """The key/value cache of a forward's output: ``cache`` in transformers >= 5.x (reading the old
    ``past_key_values`` name there logs a deprecation warning), ``past_key_values`` before."""
    return out["cache"] if "cache" in out else out.past_key_values


def _cache_kwarg(model: Any) -> str:
    """``cache`` (transformers >= 5.x names it so) or the older ``past_key_values``."""
    try:
        from transformers.generation.utils import ALL_CACHE_NAMES  # lazy: a version probe, once per call
    except ImportError:  # transformers 4.x: past_key_values only
        return "past_key_values"
    return "cache" if "cache" in ALL_CACHE_NAMES else "past_key_values"
