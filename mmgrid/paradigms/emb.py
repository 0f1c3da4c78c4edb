"""SemEmb paradigm, HLLM-style: an item LLM embeds item text, a user LLM predicts the next item embedding.

MMGRid (section 3, "SemEmb (HLLM)"): the item LLM is the base causal LM's
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

Three knobs run HLLM's own choices instead (all off by default; docs/paradigms.md, "Where emb
departs from HLLM", has their effects on the benchmark's worlds):

* ``item_token: learned``: HLLM's learned item token (one vector, normal with std 0.02, seeded
  by the build seed) is the last input embedding of every item text in place of the EOS
  token's; the item embedding is the final-normed hidden state there. Checkpoint tensor
  ``item_token`` ``[hidden]``.
* ``learned_temperature: true``: HLLM's learned logit scale (CLIP's): logits are
  ``min(exp(s), 100) * cos`` with ``s`` starting at ``log(1 / 0.07)``, instead of ``cos / tau``.
  Checkpoint tensor ``logit_scale`` ``[1]``.
* ``all_positions: true``: HLLM's next-item InfoNCE at every position of the user's sequence
  history + target (position ``t`` predicts item ``t + 1``), the mean over every such
  prediction of the batch. Its histories hold the interactions of earlier phases, so this
  re-trains them as targets in every later stage (HLLM has no phases); that is why it is off.
  The candidates are every position's positive plus the sampled negatives.

A checkpoint holding ``item_token`` or ``logit_scale`` loads only with the knob that makes it
(and one lacking it only without), else CheckpointMismatchError names the tensor.

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
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mmgrid.errors import ModelError
from mmgrid.models.partial import hidden_states_at
from mmgrid.paradigms.base import Checkpoint
from mmgrid.paradigms.embedder import DEFAULT_EMBEDDER, embed_items
from mmgrid.paradigms.errors import CheckpointMismatchError
from mmgrid.paradigms.examples import Example, last_index, load_examples, pad_right
from mmgrid.paradigms.hf_files import hf_config_file, hf_config_from_file, tokenizer_files, tokenizer_from_files
from mmgrid.paradigms.item_tokens import ItemTokens, cached_item_tokens
from mmgrid.paradigms.params import EVAL, MAX_BATCH, MAX_HISTORY, MAX_ITEMS, MAX_TOKENS, Knobs, knob, paradigm_knobs
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
    n_negatives: int = knob(512, -1, MAX_ITEMS, 'int',
                       "items sampled uniformly per batch (shared by its rows); >= n_items or -1: all items")
    max_item_tokens: int = knob(16, 2, MAX_TOKENS, 'int', "tokens of item text, EOS included")
    max_history: int = knob(20, 1, MAX_HISTORY, 'int', "most recent history items read by the user LLM")
    exclude_history: bool = knob(True, None, None, 'bool', "never recommend an item already in the history", use=EVAL)
    item_batch: int = knob(512, 1, MAX_BATCH, 'int', "items encoded per forward when ranking", use=EVAL)
    user_batch: int = knob(1024, 1, MAX_BATCH, 'int', "histories encoded per forward when ranking", use=EVAL)
    id_embeddings: bool = knob(False, None, None, 'bool',
                       "add a learned per-item ID vector (zero-initialised) to each text embedding")
    id_scale: float = knob(1.0, 0, None, 'float>',
                       "item = text embedding + id_scale * ID vector (a larger scale lets IDs move faster)")
    bucket_window: int = knob(8, 0, MAX_BATCH, 'int',
                       "training batches of similar history length, sorted within windows of this many "
                       "batches (mmgrid.train.loop.length_buckets); 0 or 1: plain shuffled batches")
    fused_optimizer: bool = knob(True, None, None, 'bool',
                       "the fused AdamW (one kernel per step); false: the foreach AdamW (equal up to rounding)")
    last_layer_only: bool = knob(True, None, None, 'bool',
                       "run both LLMs' last decoder layer only where it is read (mmgrid.models.partial); "
                       "false: the plain Hugging Face forward (the same numbers up to rounding)")
    item_token: str = knob("eos", ("eos", "learned"), None, 'choice',
                       "the last input embedding of each item text: the EOS token's (eos) or HLLM's learned "
                       "item-token vector (learned: checkpoint tensor item_token, normal std 0.02 at build)")
    learned_temperature: bool = knob(False, None, None, 'bool',
                       "HLLM's learned logit scale: logits = exp(s) * cos, s from log(1/0.07), exp(s) capped "
                       "at 100 (checkpoint tensor logit_scale); temperature is then unused")
    all_positions: bool = knob(False, None, None, 'bool',
                       "HLLM's next-item InfoNCE at every position of history + target (re-trains earlier "
                       "phases' interactions as targets); false: after the whole history only")
    sentence_scale: float = knob(0.0, 0, None, 'float',
                       "0 = off; > 0: item = LLM text embedding + sentence_scale * W e_s, e_s the item text's "
                       "embedding by the pretrained sentence embedder (frozen), W a learned projection "
                       "(checkpoint tensor sentence_proj.weight, zero-initialised)")
    embedder: str = knob(DEFAULT_EMBEDDER, None, None, 'str',
                       "the sentence embedder of sentence_scale: a local sentence-transformers folder (never "
                       "downloaded)")
    embedder_device: str = knob("cpu", None, None, 'str', "torch device of the embedder, e.g. cpu, cuda:0")


DEFAULTS: dict[str, Any] = EmbKnobs.defaults()  # the knobs' defaults (the declaration above)


def info_nce(user: torch.Tensor, cands: torch.Tensor, labels: torch.Tensor, temperature: float,
             scale: torch.Tensor | None = None) -> torch.Tensor:
    """InfoNCE with cosine similarity (HLLM Eq. 3): mean over rows of CE(cos(u, C) / tau, label).

    Args:
        user: ``[B, d]`` predicted user embeddings.
        cands: ``[C, d]`` candidate item embeddings (positives and negatives).
        labels: ``[B]`` index into ``cands`` of each row's positive.
        temperature: tau > 0 (unused when ``scale`` is given).
        scale: a learned logit scale (``[1]`` or scalar tensor): logits are ``scale * cos`` instead
            of ``cos / tau`` (HLLM's learned temperature, :func:`logit_scale`).

    Returns:
        Scalar mean loss.
    """
    if scale is None:
        logits = F.normalize(user, dim=-1) @ F.normalize(cands, dim=-1).T / temperature
    else:
        logits = (F.normalize(user, dim=-1) @ F.normalize(cands, dim=-1).T) * scale
    return F.cross_entropy(logits.float(), labels)


#: HLLM's learned logit scale: ``s`` starts at ``log(1 / 0.07)`` and ``exp(s)`` is capped at 100.
LOGIT_SCALE_INIT = math.log(1 / 0.07)
LOGIT_SCALE_MAX = 100.0


def logit_scale(s: torch.Tensor) -> torch.Tensor:
    """``min(exp(s), 100)``: the factor on the cosines with a learned temperature (HLLM, as CLIP).

    Capped through ``s`` (``exp(min(s, log 100))``): the same value; above the cap ``s`` gets no
    gradient. HLLM instead clamps the parameter itself in place before each step; the logits are
    the same."""
    return torch.clamp(s, max=math.log(LOGIT_SCALE_MAX)).exp()


def _user_config(item_config: Any) -> Any:
    """The base config with two decoder layers (first and last kinds) and no vocabulary."""
    cfg = copy.deepcopy(item_config)
    types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers)
    cfg.num_hidden_layers = 2
    cfg.layer_types = [types[0], types[-1]]
    cfg.vocab_size = 1  # the user LLM reads item embeddings, never token ids
    cfg.pad_token_id = None
    return cfg


def make_user_llm(item_config: Any, source: Any = None) -> nn.Module:
    """A 2-layer Qwen3Model without token embeddings; copies ``source``'s first/last layers and norm
    (``source``: a Hugging Face decoder, its ``layers`` and ``norm`` read by name)."""
    # lazy: transformers' model classes cost ~1.2 s to import; sasrec never needs them
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

    item_llm: Any  # a Hugging Face causal LM: its .model and .config are read by name
    user_llm: Any  # a Hugging Face decoder (make_user_llm)
    item_ids: torch.Tensor  # buffers (register_buffer)
    item_lengths: torch.Tensor
    item_sentence: torch.Tensor

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
        dtype = next(item_llm.parameters()).dtype
        hidden = int(self.item_llm.config.hidden_size)
        if params.id_embeddings:
            self.item_id = nn.Embedding(n_items, hidden).to(dtype)
            nn.init.zeros_(self.item_id.weight)
        # Optional pretrained-sentence part (sentence_scale > 0): the frozen embedder's item vectors
        # (a buffer, recomputed from the item texts, never stored) through a learned, zero-initialised
        # projection (catalog-independent, so checkpoints of domains of different sizes still merge).
        # attach_sentence adds it (build and load call it when sentence_scale > 0).
        self.sentence_proj: nn.Linear | None = None
        # HLLM's learned item token (item_token: learned): the last input embedding of every item
        # text; normal(0, 0.02) from the build seed (its own generator: the negatives' draws stay those
        # of the eos model). A checkpoint overwrites it.
        self.item_token: nn.Parameter | None = None
        if params.item_token == "learned":
            init = torch.empty(hidden, dtype=torch.float32)
            nn.init.normal_(init, std=0.02, generator=torch.Generator().manual_seed(seed))
            self.item_token = nn.Parameter(init.to(dtype))
        # HLLM's learned logit scale s (learned_temperature): logits = min(exp(s), 100) * cos.
        self.logit_scale: nn.Parameter | None = None
        if params.learned_temperature:
            self.logit_scale = nn.Parameter(torch.full((1,), LOGIT_SCALE_INIT, dtype=dtype))

    def attach_sentence(self, sentence: np.ndarray) -> None:
        """Add the pretrained-sentence part of ``sentence_scale``: the items' frozen embeddings ``[n_items, d]``
        as a buffer and a zero-initialised projection ``d -> hidden`` (``sentence_proj``)."""
        dtype = next(self.item_llm.parameters()).dtype
        if sentence.shape[0] != self.n_items:
            raise ModelError(f"emb: {sentence.shape[0]} sentence embeddings for {self.n_items} items")
        self.register_buffer("item_sentence", torch.as_tensor(np.array(sentence), dtype=dtype), persistent=False)
        self.sentence_proj = nn.Linear(int(sentence.shape[1]), int(self.item_llm.config.hidden_size),
                                       bias=False).to(dtype)
        nn.init.zeros_(self.sentence_proj.weight)

    @torch.no_grad()
    def weights_key(self) -> torch.Tensor:
        """A checksum of the item LLM's weights (one sum per tensor) for the embedding cache.

        Version counters are not enough: ``p.data.copy_`` (used by in-place sweeps) does not
        bump them, so the cache compares the weights' sums instead (cheap next to encoding
        the catalog).
        """
        params = list(self.item_llm.parameters()) + ([self.item_id.weight] if self.item_id is not None else [])
        params += [self.item_token] if self.item_token is not None else []
        params += [self.sentence_proj.weight] if self.sentence_proj is not None else []
        return torch.stack([p.detach().double().sum() for p in params]).cpu()

    def encode_items(self, items: torch.Tensor) -> torch.Tensor:
        """Raw item embeddings ``[U, H]``: hidden state at each item text's last (EOS) token.

        With ``item_token: learned`` the last input embedding is HLLM's learned item-token vector
        instead of the EOS token's (the text's other tokens are read as before)."""
        lengths = self.item_lengths[items]
        width = int(lengths.max())
        ids = self.item_ids[items, :width]
        cols = torch.arange(width, device=ids.device)[None, :]
        mask = (cols < lengths[:, None]).long()
        last = last_index(lengths)
        # the hidden state at each text's EOS; the last layer runs there only (mmgrid.models.partial)
        if self.item_token is None:
            emb = self._hidden_at(self.item_llm.model, last, attention_mask=mask, input_ids=ids)
        else:
            x = self.item_llm.model.embed_tokens(ids)
            x = torch.where((cols == last[:, None])[..., None], self.item_token.to(x.dtype), x)
            emb = self._hidden_at(self.item_llm.model, last, attention_mask=mask, inputs_embeds=x)
        if self.item_id is not None:
            emb = emb + float(self.params.id_scale) * self.item_id(items)
        if self.sentence_proj is not None:
            emb = emb + float(self.params.sentence_scale) * self.sentence_proj(self.item_sentence[items])
        return emb

    def encode_users(self, seq: torch.Tensor, lengths: torch.Tensor, every: bool = False) -> torch.Tensor:
        """Predicted next-item embeddings ``[B, H]`` from right-padded item-embedding sequences ``[B, L, H]``.

        ``every``: ``[B, L, H]``, the prediction after each position (``all_positions``); position
        ``t`` of a row reads its items ``0..t`` only (causal), so it equals the prediction from the
        history cut after ``t``. Positions past a row's length are padding."""
        width = seq.shape[1]
        real = torch.arange(width, device=seq.device)[None, :] < lengths[:, None]
        seq = seq * real[..., None].to(seq.dtype)  # an empty history reads one zero vector
        mask = real.clone()
        mask[:, 0] = True
        if every:
            cols = torch.arange(width, device=seq.device)[None, :].expand(seq.shape[0], width)
            if self.params.last_layer_only:
                return hidden_states_at(self.user_llm, cols, attention_mask=mask.long(), inputs_embeds=seq)
            return self.user_llm(attention_mask=mask.long(), inputs_embeds=seq, use_cache=False).last_hidden_state
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
    # 2: both LLMs' last layer only where it is read (the item texts' EOS, the histories'
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
        model = EmbModel(item_llm, user_llm, base.tokenizer, domain.name, domain.n_items, tokens, p, seed)
        if float(p.sentence_scale) > 0:
            model.attach_sentence(_sentence(p, domain))
        return model

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
        if model.params.all_positions:
            return self._collate_every(hist, hist_len, targets, negs, real)
        items, hist_pos, cands, labels = _positions(hist, real, targets, negs)
        return {
            "items": items,
            "hist_pos": hist_pos,
            "hist_len": hist_len,
            "cand_pos": cands,
            "labels": labels,
        }

    @staticmethod
    def _collate_every(hist: torch.Tensor, hist_len: torch.Tensor, targets: torch.Tensor, negs: torch.Tensor,
                       real: torch.Tensor) -> dict[str, torch.Tensor]:
        """:meth:`collate` with ``all_positions``: every position of a row is trained.

        Position ``t`` of the sequence history + target predicts item ``t + 1``: ``history[t + 1]``
        for ``t < n - 1``, the target at ``t = n - 1``; an empty history's one (zero) position
        predicts the target, as without the option. The candidates are every position's positive
        (the batch's targets in this mode) and the sampled negatives, deduplicated, shared by every
        prediction. Adds ``pos_labels [B, L]``: each position's positive in ``cand_pos``, -100 on
        padding; ``labels`` stays the last position's.
        """
        b, width = hist.shape
        nxt = torch.cat([hist[:, 1:], torch.zeros(b, 1, dtype=hist.dtype)], dim=1)
        nxt[torch.arange(b), last_index(hist_len)] = targets
        trained = torch.arange(width)[None, :] < hist_len.clamp(min=1)[:, None]
        positives = nxt[trained]
        items, hist_pos, cands, labels = _positions(hist, real, positives, negs)
        pos_labels = torch.full_like(hist, -100)
        pos_labels[trained] = labels
        return {
            "items": items,
            "hist_pos": hist_pos,
            "hist_len": hist_len,
            "cand_pos": cands,
            "labels": pos_labels[torch.arange(b), last_index(hist_len)],
            "pos_labels": pos_labels,
        }

    def loss(self, model: EmbModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """InfoNCE (HLLM Eq. 3, :func:`info_nce`) of the prediction after each history; with
        ``all_positions`` the mean over every trained position of every row (``pos_labels``), with
        ``learned_temperature`` at the learned scale (:func:`logit_scale`)."""
        emb = model.encode_items(batch["items"])
        scale = logit_scale(model.logit_scale) if model.logit_scale is not None else None
        tau = float(model.params.temperature)
        if "pos_labels" in batch:
            users = model.encode_users(emb[batch["hist_pos"]], batch["hist_len"], every=True)
            trained = batch["pos_labels"] >= 0
            return info_nce(users[trained], emb[batch["cand_pos"]], batch["pos_labels"][trained], tau, scale)
        user = model.encode_users(emb[batch["hist_pos"]], batch["hist_len"])
        return info_nce(user, emb[batch["cand_pos"]], batch["labels"], tau, scale)

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
        if model.sentence_proj is not None:
            state.update(module_state(model.sentence_proj, "sentence_proj."))
        for name in OWN_TENSORS:
            if getattr(model, name) is not None:
                state[name] = getattr(model, name).detach().to("cpu").contiguous().clone()
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
        # lazy: transformers' model classes cost ~1.2 s to import; sasrec never needs them
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
        if float(p.sentence_scale) > 0:
            model.attach_sentence(_sentence(p, domain))
        if model.sentence_proj is not None:
            load_module_state(model.sentence_proj, sub_state(ckpt.state, "sentence_proj."), "emb sentence_proj")
        elif "sentence_proj.weight" in ckpt.state:
            raise CheckpointMismatchError("emb checkpoint has sentence_proj.weight but paradigm_params.emb."
                                          "sentence_scale is 0; load it with the sentence_scale it was trained with.")
        if model.item_id is not None:
            load_module_state(model.item_id, sub_state(ckpt.state, "item_id."), "emb item_id")
        elif "item_id.weight" in ckpt.state:
            raise CheckpointMismatchError("emb checkpoint has item_id.weight but paradigm_params.emb.id_embeddings is "
                                          "false; load it with id_embeddings: true.")
        for name, knob_set in OWN_TENSORS.items():
            _load_own_tensor(model, ckpt.state, name, knob_set)
        return model.eval()


def _sentence(p: EmbKnobs, domain: "DomainData") -> np.ndarray:
    """The items' pretrained sentence embeddings ``[n_items, dim]`` (cached per embedder and texts by
    :func:`mmgrid.paradigms.embedder.embed_items`)."""
    return embed_items(list(domain.item_texts), p.embedder, p.embedder_device)


def _positions(hist: torch.Tensor, real: torch.Tensor, positives: torch.Tensor, negs: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch's indices: ``items`` (the unique items to encode), ``hist_pos`` (each real history entry's
    position among them, 0 on padding), ``cand_pos`` (the positions of the candidates: ``positives`` and
    ``negs``, deduplicated) and ``labels`` (each positive's position in ``cand_pos``, in order)."""
    items, inverse = torch.unique(torch.cat([hist[real], positives, negs]), return_inverse=True)
    hist_pos = torch.zeros_like(hist)
    n_real = int(real.sum())
    hist_pos[real] = inverse[:n_real]
    cands, labels = torch.unique(inverse[n_real:], return_inverse=True)
    return items, hist_pos, cands, labels[: len(positives)]


#: The emb model's own tensors (not of a sub-module), by checkpoint name: the knob setting that adds each.
OWN_TENSORS = {"item_token": "item_token: learned", "logit_scale": "learned_temperature: true"}


def _load_own_tensor(model: EmbModel, state: dict[str, torch.Tensor], name: str, knob_set: str) -> None:
    """Copy checkpoint tensor ``name`` into the model's parameter of that name; a checkpoint that has it
    where the knobs do not ask for it (or lacks it where they do) raises CheckpointMismatchError."""
    param = getattr(model, name)
    if param is None and name in state:
        raise CheckpointMismatchError(f"emb checkpoint has {name} but the knobs do not ask for it; load it with "
                                      f"paradigm_params.emb.{knob_set}.")
    if param is None:
        return
    if name not in state:
        raise CheckpointMismatchError(f"emb checkpoint has no {name} tensor but paradigm_params.emb.{knob_set} "
                                      "asks for one; load it with that knob at its default.")
    tensor = state[name]
    if tuple(tensor.shape) != tuple(param.shape):
        raise CheckpointMismatchError(f"emb: tensor {name!r} has shape {tuple(tensor.shape)} but the model expects "
                                      f"{tuple(param.shape)}; the checkpoint was made for another size.")
    with torch.no_grad():
        param.copy_(tensor.to(param.dtype))
