"""Beam decoding that keeps one prompt key/value cache per query, shared by all its beams.

A KV-cached beam search with Hugging Face's cache copies the whole prompt cache of every
beam at every step (``reorder_cache`` is an ``index_select`` over beams x prompt length,
``update`` a ``cat`` of it): for semid's trie search (30 beams, ~100 prompt tokens, 1-3
new tokens) those copies cost more than the model. :class:`SharedPrefixDecoder` runs the
prompt once through the model (HF forward, so the prompt's keys and values are HF's own),
keeps them per query, and runs each decoding step itself with the model's own modules
(norms, projections, rotary embedding, MLP, LM head of a Qwen3/Llama-style decoder): the
new token's query attends to the query's prompt keys (one matrix product per query for
all its beams, no copy) and to the few keys of its own beam's generated tokens. The
arithmetic is that of the HF decoder layer; only the attention's reduction is split in
two parts (prompt, beam), so logits equal HF's up to float rounding (the tests compare
with a full HF forward at a relative tolerance).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

from mmgrid.errors import ModelError
from mmgrid.models.generation import output_cache
from mmgrid.models.partial import prefill_kv, supports_partial


class SharedPrefixDecoder:
    """Decode steps of many beams per query over a shared prompt cache.

    Args:
        model: a Hugging Face causal LM whose ``model.layers[i].self_attn`` has
            ``q_proj/k_proj/v_proj/o_proj`` (and optionally ``q_norm/k_norm``), e.g.
            ``Qwen3ForCausalLM``; full attention (no sliding window).
        input_ids: left-padded prompts ``[n, T]``.
        attention_mask: ``[n, T]``, 0 on padding.
        position_ids: ``[n, T]`` (positions of the real tokens start at 0).

    After construction, :attr:`logits` holds the prompts' next-token logits ``[n, V]``.
    """

    def __init__(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 position_ids: torch.Tensor) -> None:
        cfg = model.config
        if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
            raise ModelError("SharedPrefixDecoder: sliding-window attention is not supported; use full attention.")
        self.model = model
        if supports_partial(getattr(model, "model", None)):  # the last layer's MLP at the last column only
            self.prefix, last = prefill_kv(model, input_ids, attention_mask, position_ids, last=True)
            self.logits = model.lm_head(last)
        else:
            out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        use_cache=True, logits_to_keep=1)
            self.logits = out.logits[:, -1]
            cache = output_cache(out)
            if hasattr(cache, "layers"):  # transformers >= 4.56
                self.prefix = [(layer.keys, layer.values) for layer in cache.layers]  # [n, kvh, T, hd] each
            else:
                self.prefix = list(zip(cache.key_cache, cache.value_cache))
        self.n = input_ids.shape[0]
        # additive mask of the prompt keys: 0 on real tokens, -inf on padding  [n, 1, 1, T]
        self.prefix_bias = torch.zeros(attention_mask.shape, dtype=self.prefix[0][0].dtype,
                                       device=input_ids.device).masked_fill(attention_mask == 0, float("-inf"))
        self.prefix_bias = self.prefix_bias[:, None, None, :]
        self.last_pos = position_ids[:, -1]
        self.suffix: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(self.prefix)
        self.rows = self.n  # beams of the previous step, flattened (n x b)
        self.steps = 0

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, origin: torch.Tensor, columns: torch.Tensor | None = None) -> torch.Tensor:
        """Feed one token per beam; returns next-token logits ``[n * b, V]``, or with ``columns`` the
        log-probabilities of those tokens only ``[n * b, len(columns)]`` (:func:`log_softmax_at`).

        Args:
            tokens: long ``[n * b]``, the token of each new beam (beams of query i are the
                rows ``i*b .. i*b+b-1``).
            origin: long ``[n * b]``, each new beam's parent as a flat index into the
                previous step's ``[n * b_prev]`` beams (the prompt rows at the first step).
            columns: long vocabulary ids whose log-probabilities are wanted.
        """
        n, nb = self.n, tokens.shape[0]
        if nb % n:
            raise ModelError(f"SharedPrefixDecoder.step: {nb} beams are not a multiple of {n} queries.")
        b = nb // n
        lm = self.model.model
        self.steps += 1
        query = origin // (self.rows // n)  # the query each beam belongs to
        pos = (self.last_pos[query] + self.steps)[:, None]  # [nb, 1]
        hidden = lm.embed_tokens(tokens[:, None])  # [nb, 1, H]
        cos_sin = lm.rotary_emb(hidden, pos)
        for i, layer in enumerate(lm.layers):
            hidden = self._layer(i, layer, hidden, cos_sin, origin, n, b)
        self.rows = nb
        hidden = lm.norm(hidden)[:, -1]
        if columns is not None:
            return log_softmax_at(self.model.lm_head, hidden, columns)
        return self.model.lm_head(hidden)

    def _layer(self, i: int, layer: Any, hidden: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor],
               origin: torch.Tensor, n: int, b: int) -> torch.Tensor:
        attn = layer.self_attn
        residual = hidden
        x = layer.input_layernorm(hidden)
        hd = attn.head_dim
        q = attn.q_proj(x).view(n * b, 1, -1, hd)
        k = attn.k_proj(x).view(n * b, 1, -1, hd)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [nb, heads, 1, hd], [nb, kvh, 1, hd]
        v = attn.v_proj(x).view(n * b, 1, -1, hd).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *cos_sin)
        prev = self.suffix[i]
        if prev is not None:
            k = torch.cat([prev[0].index_select(0, origin), k], dim=2)
            v = torch.cat([prev[1].index_select(0, origin), v], dim=2)
        self.suffix[i] = (k, v)  # [nb, kvh, l, hd]
        pk, pv = self.prefix[i]  # [n, kvh, T, hd]
        kvh = pk.shape[1]
        g = q.shape[1] // kvh  # query heads per key/value head (head h reads kv head h // g)
        # prompt part: all beams and grouped heads of a query in one product  [n, kvh, b*g, T]
        qp = q.view(n, b, kvh, g, hd).permute(0, 2, 1, 3, 4).reshape(n, kvh, b * g, hd)
        sp = torch.matmul(qp, pk.transpose(-1, -2)) * attn.scaling + self.prefix_bias
        # beam part: the beam's own generated tokens  [nb, kvh, g, l]
        qs = q.view(n * b, kvh, g, hd)
        ss = torch.matmul(qs, k.transpose(-1, -2)) * attn.scaling
        sp = sp.view(n, kvh, b, g, -1).permute(0, 2, 1, 3, 4).reshape(n * b, kvh, g, -1)
        w = torch.softmax(torch.cat([sp, ss], dim=-1).float(), dim=-1).to(q.dtype)
        t = pk.shape[2]
        wp = w[..., :t].reshape(n, b, kvh, g, t).permute(0, 2, 1, 3, 4).reshape(n, kvh, b * g, t)
        op = torch.matmul(wp, pv).view(n, kvh, b, g, hd).permute(0, 2, 1, 3, 4).reshape(n * b, kvh, g, hd)
        o = op + torch.matmul(w[..., t:], v)  # [nb, kvh, g, hd]
        o = attn.o_proj(o.reshape(n * b, 1, kvh * g * hd))
        hidden = residual + o
        residual = hidden
        return residual + layer.mlp(layer.post_attention_layernorm(hidden))


def log_softmax_at(head: Any, hidden: torch.Tensor, columns: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """``log_softmax(head(hidden))[:, columns]`` in float32, ``chunk`` rows at a time.

    The normalizer needs every logit, the caller only a few columns (semid's trie: one level's
    codes). Two things make this the cheap way to get them on CPU: chunks keep the ``[rows, V]``
    logits small (616 histories x 30 beams x 1,623 tokens is a 120 MB matrix per step, written,
    then read again), and the head's rows are padded with zeros to a multiple of 64 for the
    matrix product (MKL took 5.3-6.5 ms for ``[1024, 64] x [64, 1623]`` and 2.9-3.2 ms for
    ``[64, 1664]``, one thread); the padded columns are dropped before the normalizer. 18,480 rows
    x 1,623 tokens: 245 ms as one ``log_softmax``, 103 ms in chunks of 256 (115 ms of 1024).
    """
    weight = head.weight
    vocab, width = weight.shape
    padded = -(-vocab // 64) * 64
    w_t = weight.new_zeros((width, padded))
    w_t[:, :vocab] = weight.t()
    bias = getattr(head, "bias", None)
    out = []
    for s in range(0, hidden.shape[0], chunk):
        logits = torch.mm(hidden[s:s + chunk], w_t)[:, :vocab]
        logits = (logits + bias if bias is not None else logits).float()
        out.append(logits[:, columns] - torch.logsumexp(logits, dim=-1, keepdim=True))
    return torch.cat(out) if out else hidden.new_zeros((0, len(columns)), dtype=torch.float32)
