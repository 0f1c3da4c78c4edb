"""Text-grounded paradigm, BIGRec-style: generate the next item's title, ground it to the catalog.

MMGRid (section 3.2, "Text-Grounded (BIGRec)", ref. [4]): the prompt lists
the titles of the user's history (oldest first); the model is fine-tuned to continue with
the next item's title (cross-entropy on the target tokens only). At inference the LLM
generates titles by beam search; the generated text is embedded with the embedding model
and grounded to catalog items by similarity (BIGRec's grounding step; with L2-normalised
embeddings, L2 distance and cosine give the same order).

Prompt (token ids, built from per-title token lists so training and ranking agree)::

    <bos> Items: <title_1> | <title_2> | ... | <title_h> Next: <target title> <eos>

Ranking choice (``beam_combine``): ``"weighted"`` (default) ranks every item of the
domain by ``sum_b softmax(beam scores)_b * cos(beam_b, item)`` over the returned beams;
``"best"`` (plain BIGRec step 1) by cosine similarity to the best beam's text only. BIGRec's
second grounding step, popularity injection, is on by default (``popularity_gamma`` = 1;
items' counts over the phases the model was trained on; 0 turns it off). On the demo
world, weighted + gamma 1 was the best setting tried (docs/paradigms_text_semid.md).
``grounding_scale: minmax`` and ``ground_embedder: model`` ground as BIGRec's code does (min-max
scaled distance and popularity; the LM's own last-token hidden state, :func:`model_embed`). With
``exclude_history`` items of the history are never returned (prepared data is
deduplicated per user and item). A generated text equal to an item title reuses that
item's cached embedding, so only novel text is embedded.

History-aware grounding (every term off by default, see :func:`ground_scores`):
``history_weight`` (title similarity to the history), ``cooc_weight`` (what followed the
history's items in the training sequences), ``collab_weight`` (collaborative item
embeddings), ``beam_candidates`` (ground each beam to its nearest items only) and
``beam_combine: max``. On validation windows of both world presets none of them beat the
defaults (docs/paradigms_text_semid.md).

The model is the base ``Qwen3ForCausalLM`` itself (state dict with HF names, so a
checkpoint exports to a plain HF folder); paradigm data hangs off ``model.mmgrid_text``.
The causal-LM plumbing (token examples, collate, save/load) lives in ``mmgrid.paradigms.lm``, shared with
semid; the grounding scores in ``mmgrid.paradigms.grounding``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import polars as pl
import torch

from mmgrid.errors import ModelError
from mmgrid.models.generation import prefilled_beam_generate
from mmgrid.paradigms.collab import collab_embeddings
from mmgrid.paradigms.base import Checkpoint
from mmgrid.paradigms.embedder import DEFAULT_EMBEDDER, embed_items, encode
from mmgrid.paradigms.errors import CheckpointMismatchError
from mmgrid.paradigms.examples import load_examples
from mmgrid.paradigms.lm import (TokenExample, collate_lm, left_pad, lm_from_checkpoint, lm_loss, lm_state,  # noqa: F401
                                 model_device)
from mmgrid.paradigms.grounding import (base_score, bigrec_adjust, cooc_matrix, ground_scores,  # noqa: F401
                                        history_terms, history_weights, popularity_adjust)
from mmgrid.paradigms.hf_files import hf_config_file, tokenizer_files, tokenizer_from_files
from mmgrid.paradigms.params import (
    EVAL,
    MAX_BATCH,
    MAX_HISTORY,
    MAX_ITEMS,
    MAX_TOKENS,
    MAX_WIDTH,
    MAX_WINDOW,
    WHERE,
    Knobs,
    knob,
    paradigm_knobs,
)
from mmgrid.paradigms.ranking import topk_items
from mmgrid.paradigms.registration import register_paradigm

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from mmgrid.data.dataset import DomainData
    from mmgrid.models.base import BaseBundle

@paradigm_knobs("text")
class TextKnobs(Knobs):
    """The text paradigm's knobs (``paradigm_params.text``)."""

    embedder: str = knob(DEFAULT_EMBEDDER, None, None, 'str', "local sentence-transformers folder (never downloaded)", use=EVAL)
    embedder_device: str = knob("cpu", None, None, 'str', "torch device of the embedder, e.g. cpu, cuda:0", use=EVAL)
    embed_cache: str | None = knob(None, None, None, 'str?',
                       "folder for item-embedding safetensors (None = memory only)", use=WHERE)
    max_history: int = knob(10, 1, MAX_HISTORY, 'int', "most recent history titles in the prompt")
    max_title_tokens: int = knob(16, 1, MAX_TOKENS, 'int', "each title is cut to this many tokens")
    num_beams: int = knob(4, 1, 1024, 'int', "beam width of title generation", use=EVAL)
    max_new_tokens: int = knob(0, 0, MAX_TOKENS, 'int',
                       "0 = the domain's longest title (capped by max_title_tokens) + 1 for EOS", use=EVAL)
    beam_combine: str = knob("weighted", ('weighted', 'best', 'max'), None, 'choice',
                       "weighted | best (see module docstring)", use=EVAL)
    popularity_gamma: float = knob(1.0, 0, None, 'float',
                       "BIGRec step-2 popularity injection: distance / (1 + pop)^gamma (0 = off)", use=EVAL)
    grounding_scale: str = knob("raw", ('raw', 'minmax'), None, 'choice',
                       "raw = distance / (1 + count/max)^gamma; minmax = BIGRec's code: per-row min-max "
                       "scaled distance * (1 + min-max scaled popularity)^-gamma", use=EVAL)
    ground_embedder: str = knob("sentence", ('sentence', 'model', 'base'), None, 'choice',
                       "embedding of titles and generated text for grounding: sentence = the embedder; model = "
                       "the text model's own last-layer hidden state at the last token (raw L2); base = the same "
                       "from the grid's frozen base LM, as BIGRec's code embeds", use=EVAL)
    popularity_phases: str = knob("last", ('last', 'all'), None, 'choice',
                       "popularity counted over: last = the latest trained phase, all = every trained phase", use=EVAL)
    beam_candidates: int = knob(0, 0, MAX_ITEMS, 'int',
                       "items per beam that keep their grounding similarity (0 = every item; others get -1)", use=EVAL)
    history_weight: float = knob(0.0, 0, None, 'float',
                       "+ weight * recency-weighted cosine of an item's title to the history's titles (0 = off)", use=EVAL)
    cooc_weight: float = knob(0.0, 0, None, 'float',
                       "+ weight * recency-weighted co-occurrence P(item | history item), row-max scaled (0 = off)", use=EVAL)
    cooc_window: int = knob(3, 1, MAX_WINDOW, 'int',
                       "an item co-occurs with the next cooc_window items of a user's training sequence", use=EVAL)
    collab_weight: float = knob(0.0, 0, None, 'float',
                       "+ weight * cosine of an item's collaborative embedding to the history's (0 = off)", use=EVAL)
    collab_dim: int = knob(32, 1, MAX_WIDTH, 'int',
                       "size of the collaborative embeddings (PPMI + truncated SVD of co-occurrence)", use=EVAL)
    history_decay: float = knob(0.8, 0, 1, 'float>',
                       "weight of the j-th most recent history item in both history terms: decay^j", use=EVAL)
    exclude_history: bool = knob(True, None, None, 'bool', "never recommend an item already in the history", use=EVAL)
    rank_batch: int = knob(128, 1, MAX_BATCH, 'int', "histories per generate() call", use=EVAL)

    cross_checks = [(lambda p: p["ground_embedder"] == "sentence" or p["beam_candidates"] == 0,
                     "ground_embedder '{ground_embedder}' grounds every item (beam_candidates must be 0, got "
                     "{beam_candidates}); set beam_candidates: 0 or ground_embedder: sentence")]


DEFAULTS: dict[str, Any] = TextKnobs.defaults()  # the knobs' defaults (the declaration above)
PROMPT, SEP, ANSWER = "Items:", " |", " Next:"


# --------------------------------------------------------------------------- causal-LM plumbing


@dataclass
class TextInfo:
    """What the text paradigm keeps next to the LM (``model.mmgrid_text``)."""

    tokenizer: "PreTrainedTokenizerBase"
    domain: str
    n_items: int
    params: TextKnobs  # the knobs it was built or loaded with
    seed: int
    title_ids: list[list[int]]
    trained_phases: list[str]  # phases whose examples were made (popularity source)
    template: tuple[list[int], list[int], list[int]]  # prompt, separator, answer marker
    base_model: Callable[[], torch.nn.Module] | None = None  # the frozen base LM (ground_embedder: base)


def _info(model: torch.nn.Module) -> TextInfo:
    info = getattr(model, "mmgrid_text", None)
    if info is None:
        raise ModelError("text: this model was not built by the text paradigm (no mmgrid_text); use build/load.")
    return info


def _attach(lm: "PreTrainedModel", tokenizer: Any, domain: "DomainData", params: TextKnobs, seed: int,
            phases: Sequence[str] = (), base_model: Callable[[], torch.nn.Module] | None = None) -> Any:
    if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
        raise ModelError("text: the tokenizer needs eos and pad tokens (set tokenizer.eos_token/pad_token).")
    cut = int(params.max_title_tokens)
    enc = tokenizer([" " + t for t in domain.item_titles], add_special_tokens=False)["input_ids"]
    template = tuple(tokenizer(s, add_special_tokens=False)["input_ids"] for s in (PROMPT, SEP, ANSWER))
    lm.mmgrid_text = TextInfo(tokenizer, domain.name, domain.n_items, params, seed,  # type: ignore[assignment]
                              [list(e[:cut]) for e in enc], list(phases), template, base_model)  # a Module attribute by name
    return lm


def prompt_ids(info: TextInfo, history: Sequence[int]) -> list[int]:
    """Token ids of the prompt for a history (most recent ``max_history`` titles), answer marker last."""
    prompt, sep, answer = info.template
    bos = info.tokenizer.bos_token_id
    ids = ([bos] if bos is not None else []) + list(prompt)
    hist = list(history)[-int(info.params.max_history):] if info.params.max_history > 0 else []
    for j, item in enumerate(hist):
        ids += (sep if j else []) + info.title_ids[item]
    return ids + list(answer)


@torch.no_grad()
def model_embed(model: torch.nn.Module, info: TextInfo, token_lists: Sequence[Sequence[int]],
                batch: int = 256) -> torch.Tensor:
    """BIGRec's title embedding (Bao et al. 2023, section 3.2.2, grounding step): the LM's last-layer
    hidden state (after the final norm, as HF's ``hidden_states[-1]``) at the last token of
    ``<bos> title`` (no ``<bos>`` where the tokenizer has none; an empty title is ``<eos>``), not
    normalised. ``[len(token_lists), hidden]`` float32 on the CPU. BIGRec's code embeds with the frozen
    base LLM (``ground_embedder: base``, :func:`grounding_lm`); this uses the model it is given."""
    tok = info.tokenizer
    head = [tok.bos_token_id] if tok.bos_token_id is not None else []
    seqs = [head + list(t) if (head or t) else [tok.eos_token_id] for t in token_lists]
    inner = getattr(model, "model", model)
    dev = model_device(model)
    out = []
    for s in range(0, len(seqs), batch):
        ids, mask, pos = left_pad(seqs[s:s + batch], tok.pad_token_id)
        h = inner(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev)).last_hidden_state
        out.append(h[:, -1].float().cpu())
    return torch.cat(out) if out else torch.zeros(0, int(model.config.hidden_size))  # type: ignore[union-attr, arg-type]  # an HF LM's config


def grounding_lm(model: torch.nn.Module, params: TextKnobs) -> torch.nn.Module | None:
    """The LM whose hidden states ground generated text (:func:`model_embed`): the text model itself
    (``ground_embedder: model``), the grid's frozen base LM it was trained from (``base``), or None
    (``sentence``: the sentence embedder grounds).

    Raises:
        ModelError: ``base`` for a model that does not know its base (loaded from a checkpoint made
            outside a registry); load it with ``mmgrid.runtime.checkpoints.load_checkpoint``.
    """
    if params.ground_embedder == "sentence":
        return None
    if params.ground_embedder == "model":
        return model
    info = _info(model)
    if info.base_model is None:
        raise ModelError("text: ground_embedder 'base' needs the grid's base LM, and this model does not know it "
                         "(its checkpoint was not read from a registry); load the checkpoint with "
                         "mmgrid.runtime.checkpoints.load_checkpoint, or set ground_embedder: model or sentence.")
    base = info.__dict__.get("_base")
    if base is None:  # resolved once per model: a registry's lineage walk, not one per ranking chunk
        base = info.__dict__["_base"] = info.base_model()
        base.eval()
    return base


def grounding_vectors(model: torch.nn.Module, params: TextKnobs) -> torch.Tensor | None:
    """:func:`model_embed` vectors of every title by :func:`grounding_lm` (None with ``sentence``); the
    frozen base's are computed once per model."""
    lm = grounding_lm(model, params)
    if lm is None:
        return None
    info = _info(model)
    if lm is model:
        return model_embed(model, info, info.title_ids)
    cache = info.__dict__.setdefault("_base_vecs", {})
    if id(lm) not in cache:
        cache.clear()
        cache[id(lm)] = model_embed(lm, info, info.title_ids)
    return cache[id(lm)]


def _pop_phases(trained: list[str], params: TextKnobs) -> list[str]:
    """Phases whose interactions count as popularity: the latest trained one (the stage's own
    data, which follows item turnover) or all trained ones."""
    return trained[-1:] if params.popularity_phases == "last" else list(trained)


def _check_domain(info: TextInfo, domain: "DomainData") -> None:
    if info.n_items != domain.n_items:
        raise CheckpointMismatchError(
            f"text: model of domain {info.domain!r} ({info.n_items} items) asked to rank domain "
            f"{domain.name!r} ({domain.n_items} items); load the checkpoint with its own domain."
        )


def _cooc(info: TextInfo, domain: "DomainData", window: int) -> torch.Tensor:
    """The co-occurrence matrix over every trained phase (cached on the model per phases and window)."""
    key = (tuple(info.trained_phases), window)
    cache = info.__dict__.setdefault("_cooc_cache", {})
    if key not in cache:
        inter = domain.interactions.filter(pl.col("phase").is_in(list(info.trained_phases)))
        cache.clear()
        cache[key] = cooc_matrix(inter.get_column("user_idx").to_numpy(), inter.get_column("item_idx").to_numpy(),
                                 domain.n_items, window)
    return cache[key]


def _collab(info: TextInfo, domain: "DomainData", items: torch.Tensor, window: int, dim: int) -> torch.Tensor:
    """Unit collaborative item embeddings ``[n_items, dim]`` over every trained phase: PPMI of symmetric
    co-occurrence within ``window`` and a truncated SVD (``mmgrid.paradigms.collab.collab_embeddings``, Levy &
    Goldberg 2014); items never co-occurring get a ridge map from their title embedding. Cached on
    the model per phases, window and size."""
    key = (tuple(info.trained_phases), window, dim)
    cache = info.__dict__.setdefault("_collab_cache", {})
    if key not in cache:
        cache.clear()
        emb, _ = collab_embeddings(domain, list(info.trained_phases), dim, window, items.numpy())
        cache[key] = torch.from_numpy(emb.astype(np.float32))
    return cache[key]


@register_paradigm("text")
class TextParadigm:
    """BIGRec-style text-grounded generative recommender (see the module docstring)."""

    name = "text"
    defaults = DEFAULTS  # paradigm_params.<name>: every knob with its default (checked by mmgrid.validate)
    # Training batches are length-bucketed (mmgrid.train.loop.length_buckets, windows of 8 batches):
    # other batch compositions than version 1 (random batches), so the version is part of the stage id.
    bucket_window = 8
    # 3: the last layer only at the target columns (mmgrid.models.partial) and the fused
    # AdamW: the same training up to float rounding, so new ids
    train_version = 3
    fused_optimizer = True

    def example_length(self, example: TokenExample) -> int:
        return len(example.ids)

    def build(self, base: "BaseBundle", domain: "DomainData", params: dict[str, Any], seed: int) -> torch.nn.Module:
        p = TextKnobs.resolve(params)
        frozen = base.model  # build trains a copy; the base itself stays as it is
        return _attach(copy.deepcopy(base.model), base.tokenizer, domain, p, seed, base_model=lambda: frozen)

    def examples(self, model: torch.nn.Module, domain: "DomainData", phase: str) -> list[TokenExample]:
        info = _info(model)
        eos = info.tokenizer.eos_token_id
        if phase not in info.trained_phases:
            info.trained_phases.append(phase)
        out = []
        for ex in load_examples(domain, phase, int(info.params.max_history)):
            target = info.title_ids[ex.target] + [eos]
            out.append(TokenExample(tuple(prompt_ids(info, ex.history) + target), len(target)))
        return out

    def collate(self, model: torch.nn.Module, examples: list[TokenExample]) -> dict[str, torch.Tensor]:
        info = _info(model)
        p = info.params
        max_len = 4 + int(p.max_history) * (int(p.max_title_tokens) + 2) + int(p.max_title_tokens) + 4
        return collate_lm(examples, info.tokenizer.pad_token_id, max_len)

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return lm_loss(model, batch)

    def item_embeddings(self, model: torch.nn.Module, domain: "DomainData") -> np.ndarray:
        """Cached embeddings of the domain's titles (what generated text is grounded to)."""
        p = _info(model).params
        return embed_items(list(domain.item_titles), p.embedder, p.embedder_device, p.embed_cache)

    @torch.no_grad()
    def generate(self, model: torch.nn.Module, histories: list[list[int]]) -> tuple[list[list[str]], np.ndarray]:
        """Beam-search titles: texts [n][num_beams] best first and their beam scores [n, num_beams]."""
        info = _info(model)
        p, tok = info.params, info.tokenizer
        beams = int(p.num_beams)
        new = int(p.max_new_tokens) or min(max(len(t) for t in info.title_ids), int(p.max_title_tokens)) + 1
        ids, mask, _ = left_pad([prompt_ids(info, h) for h in histories], tok.pad_token_id)
        dev = model_device(model)
        out = prefilled_beam_generate(  # the prompt encoded once per history, not once per beam
            model, ids.to(dev), mask.to(dev), beams, num_return_sequences=beams,
            max_new_tokens=new, do_sample=False, early_stopping=True, use_cache=True,
            eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
            output_scores=True, return_dict_in_generate=True,
        )
        texts = tok.batch_decode(out.sequences[:, ids.shape[1]:], skip_special_tokens=True)
        texts = [t.strip() for t in texts]
        scores = out.sequences_scores.float().cpu().numpy() if beams > 1 else np.zeros(len(texts), dtype=np.float32)
        n = len(histories)
        return [texts[i * beams:(i + 1) * beams] for i in range(n)], scores.reshape(n, beams)

    def rank(self, model: torch.nn.Module, domain: "DomainData", histories: list[list[int]], k: int) -> np.ndarray:
        info = _info(model)
        _check_domain(info, domain)
        was_training = model.training
        model.eval()
        out = []
        bs = int(info.params.rank_batch)
        vecs = grounding_vectors(model, info.params)
        for start in range(0, len(histories), bs):
            chunk = histories[start:start + bs]
            texts, scores = self.generate(model, chunk)
            out.append(self.rank_generated(model, domain, chunk, k, texts, scores, model_items=vecs))
        model.train(was_training)
        return np.concatenate(out, axis=0) if out else np.zeros((0, k), dtype=np.int64)

    def rank_generated(self, model: torch.nn.Module, domain: "DomainData", histories: list[list[int]], k: int,
                       texts: list[list[str]], scores: np.ndarray,
                       overrides: dict[str, Any] | None = None, model_items: torch.Tensor | None = None) -> np.ndarray:
        """Ground already generated beams (:meth:`generate`) to the top-``k`` items of each history.

        ``overrides`` replaces grounding knobs (beam_combine, beam_candidates, popularity_*,
        grounding_scale, ground_embedder, history_*, cooc_*) for this call only, so one generation
        serves a sweep of grounding settings (bench/text_emb_tune.py, bench/paradigms.py
        ``--rank-arm``). See :func:`ground_scores` for the score. ``model_items``: the items'
        :func:`grounding_vectors` for these knobs (``ground_embedder: model | base``; computed when None).
        """
        info = _info(model)
        _check_domain(info, domain)
        p = TextKnobs.resolve({**info.params.to_dict(), **(overrides or {})})
        items = torch.from_numpy(np.array(self.item_embeddings(model, domain)))  # a copy: the cache is read-only
        title_row = {t.strip(): i for i, t in reversed(list(enumerate(domain.item_titles)))}
        sims = dist = None
        if p.ground_embedder == "sentence":
            sims = self._ground(texts, scores, items, title_row, p)
        else:
            lm = grounding_lm(model, p)
            vecs = model_items if model_items is not None else grounding_vectors(model, p)
            assert lm is not None and vecs is not None  # None only with ground_embedder: sentence
            dist = self._ground_model(texts, scores, vecs, title_row, p, lambda ts: model_embed(
                lm, info, [e[:int(p.max_title_tokens)] for e in
                           info.tokenizer([" " + t for t in ts], add_special_tokens=False)["input_ids"]]))
        counts = None
        if float(p.popularity_gamma) > 0 and info.trained_phases:
            counts = domain.popularity(_pop_phases(info.trained_phases, p))
        hist_w = cooc = None
        if float(p.history_weight) > 0 or float(p.cooc_weight) > 0:
            hist_w = history_weights(histories, domain.n_items, int(p.max_history), float(p.history_decay))
        if float(p.cooc_weight) > 0 and info.trained_phases:
            cooc = _cooc(info, domain, int(p.cooc_window))
        score = history_terms(base_score(sims, counts, float(p.popularity_gamma), p.grounding_scale, dist),
                              hist_w, items, float(p.history_weight), cooc, float(p.cooc_weight))
        if float(p.collab_weight) > 0 and info.trained_phases:
            hist_c = history_weights(histories, domain.n_items, int(p.max_history), float(p.history_decay))
            emb = _collab(info, domain, items, int(p.cooc_window), int(p.collab_dim))
            user = torch.nn.functional.normalize(hist_c @ emb, dim=1)
            score = score + float(p.collab_weight) * (user @ emb.T)
        return topk_items(score, k, histories if p.exclude_history else None)

    @staticmethod
    def _ground(texts: list[list[str]], scores: np.ndarray, items: torch.Tensor, title_row: dict[str, int],
                p: TextKnobs) -> torch.Tensor:
        """Similarity [n, n_items] of each history's generated text(s) to every item.

        ``best``: cosine to the best beam; ``weighted``: ``sum_b softmax(beam scores)_b *
        cos(beam_b, item)``; ``max``: the largest cosine over beams. With ``beam_candidates``
        c > 0 only the union of each beam's c nearest items keeps its similarity; every other
        item gets -1 (the least a cosine can be), as in BIGRec, where a beam grounds to its
        nearest items only.
        """
        use = [row[:1] for row in texts] if p.beam_combine == "best" else texts
        flat = [t for row in use for t in row]
        novel = sorted({t for t in flat if t not in title_row})
        novel_emb = encode(novel, p.embedder, p.embedder_device) if novel else None
        where = {t: i for i, t in enumerate(novel)}
        vecs = torch.stack([
            items[title_row[t]] if t in title_row else torch.from_numpy(novel_emb[where[t]])  # type: ignore[index]
            for t in flat
        ])
        sims = (vecs @ items.T).view(len(use), -1, items.shape[0])
        c = int(p.beam_candidates)
        keep = None
        if 0 < c < items.shape[0]:
            top = sims.topk(c, dim=2).indices  # [n, beams, c]
            keep = torch.zeros(sims.shape[0], items.shape[0], dtype=torch.bool)
            keep.scatter_(1, top.reshape(sims.shape[0], -1), True)
        if p.beam_combine == "best":
            out = sims[:, 0]
        elif p.beam_combine == "max":
            out = sims.max(1).values
        else:
            w = torch.softmax(torch.from_numpy(np.asarray(scores, dtype=np.float32)), dim=1)
            out = (w[..., None] * sims).sum(1)
        return out if keep is None else out.masked_fill(~keep, -1.0)

    @staticmethod
    def _ground_model(texts: list[list[str]], scores: np.ndarray, vecs: torch.Tensor, title_row: dict[str, int],
                      p: TextKnobs, embed_texts: Any) -> torch.Tensor:
        """L2 distance [n, n_items] of each history's generated text(s) to every item, both embedded
        by the model (:func:`model_embed`, ``ground_embedder: model``; BIGRec's ``cdist`` of raw
        hidden states). Beams combine as in :meth:`_ground`: ``best`` the best beam's distance,
        ``weighted`` ``sum_b softmax(beam scores)_b * D_b``, ``max`` (the most similar beam) the
        smallest distance. A text equal to an item title reuses that item's vector; other text is
        embedded by ``embed_texts`` (a list of strings -> ``[len, hidden]``)."""
        use = [row[:1] for row in texts] if p.beam_combine == "best" else texts
        flat = [t for row in use for t in row]
        novel = sorted({t for t in flat if t not in title_row})
        novel_vecs = embed_texts(novel) if novel else None
        where = {t: i for i, t in enumerate(novel)}
        rows = torch.stack([vecs[title_row[t]] if t in title_row else novel_vecs[where[t]]  # type: ignore[index]
                            for t in flat])
        dist = torch.cdist(rows[None], vecs[None])[0].view(len(use), -1, vecs.shape[0])
        if p.beam_combine == "best":
            return dist[:, 0]
        if p.beam_combine == "max":
            return dist.min(1).values
        w = torch.softmax(torch.from_numpy(np.asarray(scores, dtype=np.float32)), dim=1)
        return (w[..., None] * dist).sum(1)

    def save(self, model: "PreTrainedModel") -> Checkpoint:
        info = _info(model)
        files = {"config.json": hf_config_file(model.config), **tokenizer_files(info.tokenizer)}
        meta = {"paradigm": "text", "domain": info.domain, "n_items": info.n_items,
                "trained_phases": list(info.trained_phases),
                "params": info.params.to_dict(), "seed": info.seed}
        return Checkpoint(state=lm_state(model), files=files, meta=meta)

    def load(self, ckpt: Checkpoint, domain: "DomainData", params: dict[str, Any]) -> torch.nn.Module:
        # No n_items check: the text LM does not depend on the catalog, and a cross-domain
        # merge carries one input's meta, so the checkpoint may name another domain.
        p = TextKnobs.resolve({**ckpt.meta.get("params", {}), **(params or {})})
        lm = lm_from_checkpoint(ckpt, "text checkpoint")
        # Phases named by another domain's meta (a cross-domain merge) still count this domain's items.
        return _attach(lm, tokenizer_from_files(ckpt.files), domain, p, int(ckpt.meta.get("seed", 0)),
                       ckpt.meta.get("trained_phases", []), ckpt.base_model)
