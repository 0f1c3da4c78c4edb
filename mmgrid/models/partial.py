"""Run a decoder LM's last layer only where its output is read.

A causal decoder's last layer feeds nothing but the final norm and the head, so a training
loss (or an embedding) that reads a few positions per row needs that layer's keys and
values at every position (the selected queries attend to them) but its query, attention,
output projection and MLP only at the selected positions. The paradigms read few positions:

* text and semid train on the target tokens at the end of a left-padded prompt (the last
  ``max(n_target) + 1`` columns of ~100-190);
* emb's item LLM reads one hidden state per item text (its EOS), its user LLM one per
  history (the last item);

and the model is the 2-layer tiny base on the demo, where the last layer is half of the
work: :func:`hidden_at` computes the same numbers as the full forward at the selected
positions (the same modules in the same order; only the matrix products have fewer rows,
so float rounding may differ in the last bits) at about 55-65 % of its cost.

Supported: Qwen3 / Llama-style decoders (``model.layers[i].self_attn`` with
``q_proj/k_proj/v_proj/o_proj`` and optional ``q_norm/k_norm``, ``input_layernorm``,
``post_attention_layernorm``, ``mlp``, a final ``norm`` and ``rotary_emb``) with full
attention and no attention dropout. :func:`supports_partial` says whether a model is one;
callers fall back to the plain Hugging Face forward where it is not.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def supports_partial(inner: Any) -> bool:
    """True where :func:`hidden_at` can run ``inner`` (the ``.model`` of a causal LM, or a bare decoder).

    Needs the Qwen3 / Llama module layout, full attention in every layer (no sliding window),
    no attention dropout and the ``sdpa`` attention implementation (the earlier layers are
    called with a boolean mask).
    """
    layers = getattr(inner, "layers", None)
    cfg = getattr(inner, "config", None)
    if not layers or cfg is None or not hasattr(inner, "norm") or not hasattr(inner, "rotary_emb"):
        return False
    if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return False
    if float(getattr(cfg, "attention_dropout", 0.0) or 0.0) > 0.0:
        return False
    if getattr(cfg, "_attn_implementation", "sdpa") != "sdpa":  # the earlier layers get a boolean mask
        return False
    attn = getattr(layers[-1], "self_attn", None)
    return all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling")) and all(
        hasattr(layers[-1], n) for n in ("input_layernorm", "post_attention_layernorm", "mlp"))


def attention_mask_4d(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, 1, L, L]`` bool: query ``i`` sees key ``j <= i`` where the key is real (mask 1).

    A padding query also sees itself, so no row is empty (an all-masked row gives NaN in
    scaled_dot_product_attention); no real query ever sees a padding key, so the real
    positions are computed exactly as under the 2-D mask.
    """
    b, n = attention_mask.shape
    pos = torch.arange(n, device=attention_mask.device)
    causal = pos[:, None] >= pos[None, :]
    mask = causal[None] & attention_mask.bool()[:, None, :]
    mask = mask | torch.eye(n, dtype=torch.bool, device=attention_mask.device)[None]
    return mask[:, None]


def _gather_rows(x: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """``x[b, select[b, q]]`` for ``x [B, L, ...]`` and ``select [B, Q]``."""
    idx = select.view(*select.shape, *([1] * (x.dim() - 2))).expand(*select.shape, *x.shape[2:])
    return x.gather(1, idx)


def hidden_at(inner: Any, select: torch.Tensor, *, attention_mask: torch.Tensor,
              input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
              position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Final-normed hidden states of ``inner`` at the positions ``select`` of each row.

    Every layer but the last runs at every position; the last one computes keys and values
    at every position and everything else at the selected ones. The layers are run with the
    model's own modules (projections, MLP, norms' weights) in the order of the HF decoder
    layer; a float32 RMSNorm is one fused ``F.rms_norm`` (the same formula as HF's
    ``Qwen3RMSNorm``, one kernel instead of seven, which counts on tiny models).

    Args:
        inner: the decoder (``Qwen3Model``: a causal LM's ``.model``); see :func:`supports_partial`.
        select: ``[B, Q]`` positions per row whose output is wanted.
        attention_mask: ``[B, L]``, 1 on real tokens, 0 on padding (left or right).
        input_ids: ``[B, L]`` token ids (or ``inputs_embeds [B, L, H]``).
        position_ids: ``[B, L]`` (default: ``0 .. L-1`` in every row).

    Returns:
        ``[B, Q, H]``: what ``inner(...).last_hidden_state`` holds at those positions.
    """
    x, cos, sin, mask = _all_but_last(inner, attention_mask, input_ids, inputs_embeds, position_ids)
    return _norm(inner.norm, _layer(inner.layers[-1], x, cos, sin, mask, select))


def _all_but_last(inner: Any, attention_mask: torch.Tensor, input_ids: torch.Tensor | None,
                  inputs_embeds: torch.Tensor | None, position_ids: torch.Tensor | None,
                  keep: list | None = None) -> tuple[torch.Tensor, ...]:
    """Embeddings through every layer but the last, at every position: ``(x, cos, sin, mask)`` for
    the last one. ``keep``: a list each layer's keys and values are appended to."""
    x = inner.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
    b, n = x.shape[:2]
    if position_ids is None:
        position_ids = torch.arange(n, device=x.device)[None].expand(b, n)
    cos, sin = inner.rotary_emb(x, position_ids)
    mask = attention_mask_4d(attention_mask)
    for layer in inner.layers[:-1]:
        x = _layer(layer, x, cos, sin, mask, keep=keep)
    return x, cos, sin, mask


def hidden_states_at(inner: Any, select: torch.Tensor, *, attention_mask: torch.Tensor,
                     input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
                     position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, Q, H]``: the decoder's final hidden states at ``select``, by :func:`hidden_at` where
    :func:`supports_partial` allows it, else by the plain forward and a gather (any decoder)."""
    if supports_partial(inner):
        return hidden_at(inner, select, attention_mask=attention_mask, input_ids=input_ids,
                         inputs_embeds=inputs_embeds, position_ids=position_ids)
    out = inner(input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                position_ids=position_ids, use_cache=False).last_hidden_state
    return _gather_rows(out, select)


def prefill_kv(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
               last: bool = False) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
    """Every layer's keys and values of left-padded prompts and, with ``last``, the final hidden state
    at the last column (what ``model(..., use_cache=True, logits_to_keep=1)`` computes before its head).

    The last layer computes its keys and values at every position and, with ``last``, the rest at
    the last column only; without it nothing after its keys and values.

    Returns:
        ``([(keys, values) [B, kvh, L, hd] per layer], hidden [B, H] or None)``.
    """
    inner = model.model
    b, n = input_ids.shape
    kvs: list[tuple[torch.Tensor, torch.Tensor]] = []
    x, cos, sin, mask = _all_but_last(inner, attention_mask, input_ids, None, position_ids, keep=kvs)
    final = inner.layers[-1]
    if not last:
        kvs.append(_keys_values(final, _norm(final.input_layernorm, x), cos, sin))
        return kvs, None
    cols = torch.full((b, 1), n - 1, dtype=torch.long, device=input_ids.device)
    return kvs, _norm(inner.norm, _layer(final, x, cos, sin, mask, cols, keep=kvs))[:, 0]


def prefill_cache(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  position_ids: torch.Tensor) -> Any:
    """The key/value cache of prompts, as ``model(..., use_cache=True)`` leaves it, without the rest.

    A beam search that feeds the last prompt token again after the prefill
    (:func:`mmgrid.models.generation.prefilled_beam_generate`) reads nothing of the prefill but
    its cache: the last layer needs its keys and values only (no query, attention, output
    projection, MLP or head), a third of the prefill's work on the 2-layer tiny base.

    Args:
        model: a causal LM whose ``.model`` passes :func:`supports_partial`.
        input_ids, attention_mask, position_ids: ``[B, L]`` prompts (left padding, positions from 0).

    Returns:
        A ``transformers.DynamicCache`` holding every layer's keys and values ``[B, kvh, L, hd]``.
    """
    # lazy: importing transformers costs ~0.6 s after torch; sasrec's processes never prefill
    from transformers import DynamicCache

    kvs, _ = prefill_kv(model, input_ids, attention_mask, position_ids)
    cache = DynamicCache(config=model.config)
    for i, (k, v) in enumerate(kvs):
        cache.update(k, v, i)
    return cache


def _keys_values(layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's rotated, normed keys and its values ``[B, kvh, L, hd]`` from its normed input ``h``
    (what its key/value cache stores)."""
    attn = layer.self_attn
    b, n = h.shape[:2]
    hd = attn.head_dim
    k_norm = getattr(attn, "k_norm", None)
    k = attn.k_proj(h).view(b, n, -1, hd)
    k = (_norm(k_norm, k) if k_norm is not None else k).transpose(1, 2)
    v = attn.v_proj(h).view(b, n, -1, hd).transpose(1, 2)
    return k * cos[:, None] + _rotate_half(k) * sin[:, None], v


def _layer(layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
           select: torch.Tensor | None = None, keep: list | None = None) -> torch.Tensor:
    """One pre-norm decoder layer (HF ``Qwen3DecoderLayer.forward``); with ``select`` its output
    at those positions only (keys and values still at every position). ``keep``: a list its
    keys and values are appended to."""
    attn = layer.self_attn
    b, n = x.shape[:2]
    hd = attn.head_dim
    h = _norm(layer.input_layernorm, x)
    k, v = _keys_values(layer, h, cos, sin)
    if keep is not None:
        keep.append((k, v))
    if select is not None:
        h, x = _gather_rows(h, select), _gather_rows(x, select)
        cos, sin = _gather_rows(cos, select), _gather_rows(sin, select)
        mask = mask[:, 0].gather(1, select[..., None].expand(*select.shape, n))[:, None]  # [B, 1, Q, L]
    nq = h.shape[1]
    q_norm = getattr(attn, "q_norm", None)
    q = attn.q_proj(h).view(b, nq, -1, hd)
    q = (_norm(q_norm, q) if q_norm is not None else q).transpose(1, 2)  # [B, heads, Q, hd]
    q = q * cos[:, None] + _rotate_half(q) * sin[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling,
                                         enable_gqa=q.shape[1] != k.shape[1])
    y = x + attn.o_proj(out.transpose(1, 2).reshape(b, nq, -1))
    return y + layer.mlp(_norm(layer.post_attention_layernorm, y))


def _norm(module: Any, x: torch.Tensor) -> torch.Tensor:
    """An RMSNorm module applied to ``x``: fused ``F.rms_norm`` in float32, the module itself otherwise."""
    eps = getattr(module, "variance_epsilon", None)
    if eps is None or x.dtype != torch.float32 or module.weight.dtype != torch.float32:
        return module(x)
    return F.rms_norm(x, (x.shape[-1],), module.weight, eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotary embedding's half rotation (the HF convention): ``[x1, x2] -> [-x2, x1]``."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
