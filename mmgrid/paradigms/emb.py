"""SemEmb paradigm, HLLM-style: an item LLM embeds item text, a user LLM predicts the next item embedding.

MMGRid (paper 004, section 3, "SemEmb (HLLM)"): the item LLM is the base causal LM's
transformer; an item's embedding is its hidden state at the EOS appended to the item text.
The user LLM is a 2-layer decoder built with the base config from the base's FIRST and
LAST decoder layers (plus the final norm), as MMGRid does with Qwen3-0.6B. It reads the
history as a sequence of item embeddings and predicts the next item's embedding. Both are
trained jointly with InfoNCE (HLLM, Chen et al. 2024, Eq. 3 there):

    L = -log  exp(s(u, e+)/tau) / sum_{e in {e+} U N} exp(s(u, e)/tau),   s = cosine,

with N the other targets of the batch plus ``n_negatives`` items sampled uniformly from
the domain; when ``n_negatives`` covers the catalog (the default for catalogs up to 512
items, -1 always) N is every item, an exact softmax. In-batch negatives are drawn by
popularity and, with few uniform ones, can teach the model to demote popular items: on an
earlier demo world Recall@10 on Books was 0.10 with 64 sampled vs 0.18 with all; on the
current default world 64 sampled score the same within their interval (docs/paradigms.md).

Only the last position of each example is trained: an example is one interaction of the
phase, its history holds earlier ones (already trained in their own phase), so next-item
targets never leak across phases.

Ranking scores every item of the domain (cosine of the predicted user embedding with all
item embeddings, computed once per call, batched, no grad). With ``exclude_history``
(default true) the history's items are masked out: prepared data is deduplicated per
user and item, so a target is never in its history.

Checkpoint names: ``item_llm.`` + the HF ``Qwen3ForCausalLM`` names (strip the prefix to
get a plain HF folder; a tied ``lm_head.weight`` is left out), ``user_llm.`` + the HF
``Qwen3Model`` names of its two layers and norm (``layers.0`` = base layer 0,
``layers.1`` = base's last layer, no embedding table).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mmgrid.errors import ModelError
from mmgrid.models.partial import hidden_states_at
from mmgrid.paradigms.base import Checkpoint
from mmgrid.paradigms.errors import CheckpointMismatchError
from mmgrid.paradigms.examples import Example, last_index, load_examples, pad_right
from mmgrid.paradigms.hf_files import hf_config_file, hf_config_from_file, tokenizer_files, tokenizer_from_files
from mmgrid.paradigms.item_tokens import ItemTokens, cached_item_tokens
from mmgrid.paradigms.params import Knobs, knob, paradigm_knobs
from mmgrid.paradigms.ranking import eval_mode, rank_by_length
from mmgrid.paradigms.registration import register_paradigm
from mmgrid.paradigms.state import check_n_items, load_module_state, module_state, sub_state

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import DomainData
    from mmgrid.models.base import BaseBundle

@paradigm_knobs("emb")
class EmbKnobs(Knobs):
    """The semantic-embedding paradigm's knobs (``paradigm_params.emb``)."""

    temperature: float = knob(0.1, 0, None, 'float>',
                       "InfoNCE temperature tau (fixed); 0.1 beat 0.07 and 0.05 on demo Books over 3 seeds")
    n_negatives: int = knob(512, -1, None, 'int',
                       "items sampled uniformly per batch (shared by its rows); >= n_items or -1: all items")
    max_item_tokens: int = knob(16, 2, None, 'int', "tokens of item text, EOS included")
    max_history: int = knob(20, 1, None, 'int', "most recent history items read by the user LLM")
    exclude_history: bool = knob(True, None, None, 'bool', "never recommend an item already in the history")
    item_batch: int = knob(512, 1, None, 'int', "items encoded per forward when ranking")
    user_batch: int = knob(1024, 1, None, 'int', "histories encoded per forward when ranking")
    id_embeddings: bool = knob(False, None, None, 'bool',
                       "add a learned per-item ID vector (zero-initialised) to each text embedding")
    id_scale: float = knob(1.0, 0, None, 'float>',
                       "item = text embedding + id_scale * ID vector (a larger scale lets IDs move faster)")
    bucket_window: int = knob(8, 0, None, 'int',
                       "training batches of similar history length, sorted within windows of this many "
                       "batches (mmgrid.train.loop.length_buckets); 0 or 1: plain shuffled batches")
    fused_optimizer: bool = knob(True, None, None, 'bool',
                       "the fused AdamW (one kernel per step); false: the foreach AdamW (equal up to rounding)")
    last_layer_only: bool = knob(True, None, None, 'bool',
                       "run both LLMs' last decoder layer only where it is read (mmgrid.models.partial); "
                       "false: the plain Hugging Face forward (the same numbers up to rounding)")


DEFAULTS: dict[str, Any] = EmbKnobs.defaults()  # the knobs' defaults (the declaration above)


def info_nce(user: torch.Tensor, cands: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE with cosine similarity (HLLM Eq. 3): mean over rows of CE(cos(u, C) / tau, label).

    Args:
        user: ``[B, d]`` predicted user embeddings.
        cands: ``[C, d]`` candidate item embeddings (positives and negatives).
        labels: ``[B]`` index into ``cands`` of each row's positive.
        temperature: tau > 0.

    Returns:
        Scalar mean loss.
    """
    logits = F.normalize(user, dim=-1) @ F.normalize(cands, dim=-1).T / temperature
    return F.cross_entropy(logits.float(), labels)


def _user_config(item_config: Any) -> Any:
    """The base config with two decoder layers (first and last kinds) and no vocabulary."""
    cfg = copy.deepcopy(item_config)
    types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers)
    cfg.num_hidden_layers = 2
    cfg.layer_types = [types[0], types[-1]]
    cfg.vocab_size = 1  # the user LLM reads item embeddings, never token ids
    cfg.pad_token_id = None
    return cfg


def make_user_llm(item_config: Any, source: nn.Module | None = None) -> nn.Module:
    """A 2-layer Qwen3Model without token embeddings; copies ``source``'s first/last layers and norm."""
    # lazy: transformers' model classes cost ~1.2 s to import (measured); sasrec never needs them
    from transformers import AutoModel

    user = AutoModel.from_config(_user_config(item_config))
    del user.embed_tokens  # unused and would only add a dead tensor to every checkpoint
    if source is not None:
        user.layers[0].load_state_dict(source.layers[0].state_dict())
        user.layers[1].load_state_dict(source.layers[-1].state_dict())
        user.norm.load_state_dict(source.norm.state_dict())
    return user.to(next(source.parameters()).dtype if source is not None else torch.float32)


class EmbModel(nn.Module):
    """Item LLM + user LLM of one domain, with the domain's tokenized item texts as buffers."""

    def __init__(
        self, item_llm: nn.Module, user_llm: nn.Module, tokenizer: Any, domain: str, n_items: int,
        tokens: ItemTokens, params: EmbKnobs, seed: int,
    ) -> None:
        super().__init__()
        self.item_llm = item_llm
        self.user_llm = user_llm
        self.tokenizer = tokenizer
        self.domain = domain
        self.n_items = n_items
        self.params = params
        self.seed = seed
        # Not persistent: tokens depend on texts and tokenizer only, never on weights.
        self.register_buffer("item_ids", tokens.ids, persistent=False)
        self.register_buffer("item_lengths", tokens.lengths, persistent=False)
        self.generator = torch.Generator().manual_seed(seed)
        self._emb_cache: tuple[torch.Tensor, torch.Tensor] | None = None
        # read by the training loop in place of the paradigm's class defaults (mmgrid.train.loop.task_option)
        self.train_options = {"bucket_window": int(params.bucket_window),
                              "fused_optimizer": bool(params.fused_optimizer)}
        # Optional collaborative part of an item's embedding (HLLM's text-only item is the default):
        # zero-initialised, so a new model starts as the text-only one.
        self.item_id: nn.Embedding | None = None
        if params.id_embeddings:
            hidden = int(item_llm.config.hidden_size)
            self.item_id = nn.Embedding(n_items, hidden).to(next(item_llm.parameters()).dtype)
            nn.init.zeros_(self.item_id.weight)

    @torch.no_grad()
    def weights_key(self) -> torch.Tensor:
        """A checksum of the item LLM's weights (one sum per tensor) for the embedding cache.

        Version counters are not enough: ``p.data.copy_`` (used by in-place sweeps) does not
        bump them, so the cache compares the weights' sums instead (cheap next to encoding
        the catalog).
        """
        params = list(self.item_llm.parameters()) + ([self.item_id.weight] if self.item_id is not None else [])
        return torch.stack([p.detach().double().sum() for p in params]).cpu()

    def encode_items(self, items: torch.Tensor) -> torch.Tensor:
        """Raw item embeddings ``[U, H]``: hidden state at each item text's last (EOS) token."""
        lengths = self.item_lengths[items]
        width = int(lengths.max())
        ids = self.item_ids[items, :width]
        mask = (torch.arange(width, device=ids.device)[None, :] < lengths[:, None]).long()
        # the hidden state at each text's EOS; the last layer runs there only (mmgrid.models.partial)
        emb = self._hidden_at(self.item_llm.model, last_index(lengths), attention_mask=mask, input_ids=ids)
        if self.item_id is not None:
            emb = emb + float(self.params.id_scale) * self.item_id(items)
        return emb

    def encode_users(self, seq: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Predicted next-item embeddings ``[B, H]`` from right-padded item-embedding sequences ``[B, L, H]``."""
        width = seq.shape[1]
        real = torch.arange(width, device=seq.device)[None, :] < lengths[:, None]
        seq = seq * real[..., None].to(seq.dtype)  # an empty history reads one zero vector
        mask = real.clone()
        mask[:, 0] = True
        # the last item's hidden state; the last layer runs there only (mmgrid.models.partial)
        return self._hidden_at(self.user_llm, last_index(lengths), attention_mask=mask.long(), inputs_embeds=seq)

    def _hidden_at(self, inner: nn.Module, last: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        """``[B, H]``: the decoder's final hidden state at position ``last[b]`` of each row (the last
        layer there only with ``last_layer_only``, else the plain forward and a gather)."""
        if self.params.last_layer_only:
            return hidden_states_at(inner, last[:, None], **inputs)[:, 0]
        out = inner(**inputs, use_cache=False).last_hidden_state
        return out[torch.arange(out.shape[0], device=out.device), last]

    @torch.no_grad()
    def all_item_embeddings(self) -> torch.Tensor:
        """Raw embeddings of every item of the domain ``[n_items, H]`` (batched, no grad).

        Cached until a weight of the item LLM changes, so an evaluator calling ``rank`` per
        chunk of histories encodes the catalog once per model state.
        """
        key = self.weights_key()
        if self._emb_cache is not None and torch.equal(self._emb_cache[0], key) and not self.training:
            return self._emb_cache[1]
        step = int(self.params.item_batch)
        device = self.item_ids.device
        parts = [
            self.encode_items(torch.arange(s, min(s + step, self.n_items), device=device))
            for s in range(0, self.n_items, step)
        ]
        emb = torch.cat(parts)
        self._emb_cache = (key, emb)
        return emb


@register_paradigm("emb")
class EmbParadigm:
    """SemEmb (HLLM) behind the Paradigm protocol."""

    name = "emb"
    defaults = DEFAULTS  # paradigm_params.<name>: every knob with its default (checked by mmgrid.validate)
    # 2 (issue 15): both LLMs' last layer only where it is read (the item texts' EOS, the histories'
    # last item; mmgrid.models.partial), length-bucketed batches (the user LLM's width is the batch's
    # longest history; mmgrid.train.loop.length_buckets) and the fused AdamW: new ids
    train_version = 2
    fused_optimizer = True
    bucket_window = 8

    def example_length(self, example: Example) -> int:
        return len(example.history)  # already cut to max_history (load_examples)

    def build(self, base: "BaseBundle", domain: "DomainData", params: dict[str, Any], seed: int) -> EmbModel:
        p = EmbKnobs.resolve(params)  # ranges checked (the declaration above)
        lm = getattr(base, "model", None)
        if lm is None or not hasattr(lm, "model") or not hasattr(lm.model, "layers"):
            raise ModelError("emb: the base must be a causal LM with .model.layers (e.g. Qwen3ForCausalLM).")
        item_llm = copy.deepcopy(lm)
        user_llm = make_user_llm(item_llm.config, item_llm.model)
        tokens = cached_item_tokens(base.tokenizer, domain, p.max_item_tokens)
        return EmbModel(item_llm, user_llm, base.tokenizer, domain.name, domain.n_items, tokens, p, seed)

    def examples(self, model: EmbModel, domain: "DomainData", phase: str) -> list[Example]:
        return load_examples(domain, phase, model.params.max_history)

    def collate(self, model: EmbModel, examples: list[Example]) -> dict[str, torch.Tensor]:
        """Indices only: the unique items to encode, where each history and candidate sits among them.

        Keys: ``items [U]`` (item_idx to encode), ``hist_pos [B, L]`` and ``hist_len [B]``
        (positions into ``items``), ``cand_pos [C]`` (positions of the candidates: the batch's
        targets and the sampled negatives, deduplicated), ``labels [B]`` (position in
        ``cand_pos`` of each row's target).
        """
        hist, hist_len = pad_right([e.history for e in examples], pad=0)
        targets = torch.tensor([e.target for e in examples], dtype=torch.long)
        n_neg = int(model.params.n_negatives)
        if n_neg < 0 or n_neg >= model.n_items:  # the whole catalog: exact softmax over items
            negs = torch.arange(model.n_items)
        else:
            negs = torch.randint(0, model.n_items, (n_neg,), generator=model.generator)
        real = torch.arange(hist.shape[1])[None, :] < hist_len[:, None]
        items, inverse = torch.unique(torch.cat([hist[real], targets, negs]), return_inverse=True)
        hist_pos = torch.zeros_like(hist)
        n_real = int(real.sum())
        hist_pos[real] = inverse[:n_real]
        cands, labels = torch.unique(inverse[n_real:], return_inverse=True)
        return {
            "items": items,
            "hist_pos": hist_pos,
            "hist_len": hist_len,
            "cand_pos": cands,
            "labels": labels[: len(examples)],
        }

    def loss(self, model: EmbModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        emb = model.encode_items(batch["items"])
        user = model.encode_users(emb[batch["hist_pos"]], batch["hist_len"])
        return info_nce(user, emb[batch["cand_pos"]], batch["labels"], float(model.params.temperature))

    def item_embeddings(self, model: EmbModel) -> torch.Tensor:
        """Raw embeddings of all items ``[n_items, H]`` (eval mode, no grad); pass to :meth:`rank` to reuse."""
        with eval_mode(model):
            return model.all_item_embeddings()

    @torch.no_grad()
    def rank(
        self, model: EmbModel, domain: "DomainData", histories: list[list[int]], k: int,
        item_emb: torch.Tensor | None = None,
    ) -> np.ndarray:
        """Top-``k`` items by cosine with the predicted user embedding; item embeddings computed once.

        Args:
            model: the paradigm's model.
            domain: the domain ranked (must have the model's number of items).
            histories: item_idx lists, oldest first.
            k: items returned per history.
            item_emb: output of :meth:`item_embeddings` for this very model, to skip recomputing it.
        """
        check_n_items({"n_items": model.n_items, "domain": model.domain}, domain, "emb")
        raw = self.item_embeddings(model) if item_emb is None else item_emb
        items_n = F.normalize(raw.float(), dim=-1)
        keep = int(model.params.max_history)
        step = int(model.params.user_batch)

        def scores(pos: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            return F.normalize(model.encode_users(raw[pos], lengths).float(), dim=-1) @ items_n.T

        out = []
        with eval_mode(model):
            for s in range(0, len(histories), step):
                chunk = [list(h)[-keep:] if keep > 0 else list(h) for h in histories[s : s + step]]
                # histories of similar length together: the padded positions are not computed
                out.append(rank_by_length(chunk, k, scores, bool(model.params.exclude_history), raw.device))
        return np.concatenate(out) if out else np.zeros((0, k), dtype=np.int64)

    def save(self, model: EmbModel) -> Checkpoint:
        tied = bool(getattr(model.item_llm.config, "tie_word_embeddings", False))
        state = module_state(model.item_llm, "item_llm.", skip=("lm_head.weight",) if tied else ())
        state.update(module_state(model.user_llm, "user_llm."))
        if model.item_id is not None:
            state.update(module_state(model.item_id, "item_id."))
        files = {"config.json": hf_config_file(model.item_llm.config), **tokenizer_files(model.tokenizer)}
        meta = {
            "paradigm": "emb",
            "domain": model.domain,
            "n_items": model.n_items,
            "hidden_size": int(model.item_llm.config.hidden_size),
            "base_layers": int(model.item_llm.config.num_hidden_layers),
            "user_layers_from_base": [0, int(model.item_llm.config.num_hidden_layers) - 1],
            "params": model.params.to_dict(),
            "seed": model.seed,
        }
        return Checkpoint(state=state, files=files, meta=meta)

    def load(self, ckpt: Checkpoint, domain: "DomainData", params: dict[str, Any]) -> EmbModel:
        # lazy: transformers' model classes cost ~1.2 s to import (measured); sasrec never needs them
        from transformers import AutoModelForCausalLM

        check_n_items(ckpt.meta, domain, "emb")
        p = EmbKnobs.resolve({**ckpt.meta.get("params", {}), **(params or {})})
        if "config.json" not in ckpt.files:
            raise ModelError("emb checkpoint has no config.json; it was not saved by the emb paradigm.")
        config = hf_config_from_file(ckpt.files["config.json"])
        tokenizer = tokenizer_from_files(ckpt.files)
        item_llm = AutoModelForCausalLM.from_config(config)
        tied = bool(getattr(config, "tie_word_embeddings", False))
        load_module_state(item_llm, sub_state(ckpt.state, "item_llm."), "emb item_llm",
                          allow_missing=("lm_head.weight",) if tied else ())
        if tied:
            item_llm.tie_weights()
        user_llm = make_user_llm(config)
        load_module_state(user_llm, sub_state(ckpt.state, "user_llm."), "emb user_llm")
        user_llm.to(next(item_llm.parameters()).dtype)
        tokens = cached_item_tokens(tokenizer, domain, p.max_item_tokens)
        seed = int(ckpt.meta.get("seed", 0))
        model = EmbModel(item_llm, user_llm, tokenizer, domain.name, domain.n_items, tokens, p, seed)
        if model.item_id is not None:
            load_module_state(model.item_id, sub_state(ckpt.state, "item_id."), "emb item_id")
        elif "item_id.weight" in ckpt.state:
            raise CheckpointMismatchError("emb checkpoint has item_id.weight but paradigm_params.emb.id_embeddings is "
                                          "false; load it with id_embeddings: true.")
        return model.eval()
