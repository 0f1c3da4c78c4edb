"""SemID paradigm, LC-Rec-style: items as semantic-ID token sequences, trie-constrained decoding.

MMGRid (section 3.2, "SemID (LC-Rec)", ref. [41]): item embeddings are
quantized into ``levels`` codes (RQ-KMeans here, see quantizer.py; paper 4 x 256, tiny
default 3 x 16); each (level, code) is a new vocabulary token. The embeddings are chosen by
``codes`` (collab.py): the item text's, collaborative ones from item co-occurrence in the
training phases (default since train_version 3), or both. Training mixes, in every
stage, next-item code generation with LC-Rec's alignment tasks (``align_ratio``, default 0
since train_version 3):

- seqrec: ``<bos> History: <codes of h_1> ... <codes of h_n> Next: -> <codes of target>``
- text → code: ``<bos> Item: <item text> Code: -> <codes of item>``
- code → text: ``<bos> Code: <codes of item> Item: -> <title> <eos>``

(loss on the part after ``->`` only). ``align_ratio`` alignment examples per seqrec
example are drawn per stage from a seeded permutation of all items (half each task).

Ranking is beam search over the ``L`` code levels restricted to a trie of valid codes
(trie.py), so an invalid code can never come out; the beam width is
``max(num_beams, k + 10)`` so that, after dropping history items (``exclude_history``),
``k`` distinct items usually remain. If fewer remain (tiny catalogs), the list is padded
with the items seen most often in the ranked batch's histories, then by item index.

The model is the ``Qwen3ForCausalLM`` itself (HF names); the paradigm's data hangs off
``model.mmgrid_semid``. Checkpoints record ``added_rows`` for the embedding (and an untied
LM head) and, in ``meta["semid_domains"][domain]``, the codes and token names, so a merged
checkpoint holding several domains' code rows loads for each of them.
"""

from __future__ import annotations

import copy
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import polars as pl
import torch

from mmgrid.errors import ConfigError, ModelError
from mmgrid.models.prefix_decode import SharedPrefixDecoder
from mmgrid.paradigms.base import Checkpoint
from mmgrid.paradigms.embedder import DEFAULT_EMBEDDER, embed_items, texts_key
from mmgrid.paradigms.errors import CheckpointMismatchError
from mmgrid.paradigms.examples import load_examples
from mmgrid.paradigms.hf_files import hf_config_file, tokenizer_files, tokenizer_from_files
from mmgrid.paradigms.params import (
    EVAL,
    MAX_BATCH,
    MAX_DEPTH,
    MAX_HISTORY,
    MAX_RATIO,
    MAX_TOKENS,
    MAX_WIDTH,
    MAX_WINDOW,
    WHERE,
    Knobs,
    knob,
    paradigm_knobs,
)
from mmgrid.paradigms.registration import register_paradigm
from mmgrid.paradigms.collab import CODE_SOURCES, PHASE_CHOICES, code_inputs, collab_embeddings, collab_phases
from mmgrid.paradigms.semid.quantizer import SemanticIDs, SemIDError, semantic_ids
from mmgrid.paradigms.semid.tokens import add_code_tokens, code_token_names, sync_tokenizer
from mmgrid.paradigms.semid.trie import CodeTrie, decode_items, trie_beam_search_with_order
from mmgrid.paradigms.lm import TokenExample, collate_lm, is_tied, left_pad, lm_from_checkpoint, lm_loss, lm_state

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from mmgrid.data.dataset import DomainData
    from mmgrid.models.base import BaseBundle

@paradigm_knobs("semid")
class SemIdKnobs(Knobs):
    """The semantic-ID paradigm's knobs (``paradigm_params.semid``)."""

    embedder: str = knob(DEFAULT_EMBEDDER, None, None, 'str', "local sentence-transformers folder (never downloaded)")
    embedder_device: str = knob("cpu", None, None, 'str', "torch device of the embedder, e.g. cpu, cuda:0")
    embed_cache: str | None = knob(None, None, None, 'str?',
                       "folder for item-embedding safetensors (None = memory only)", use=WHERE)
    levels: int = knob(3, 1, MAX_DEPTH, 'int', "residual code levels (paper: 4)")
    codebook_size: int = knob(16, 2, MAX_WIDTH, 'int', "entries per level (paper: 256); needs at least this many items")
    quantizer_seed: int = knob(0, 0, None, 'int',
                       "k-means seed: codes depend only on (texts, embedder, sizes, this seed)")
    max_history: int = knob(10, 1, MAX_HISTORY, 'int', "most recent history items in the prompt")
    max_text_tokens: int = knob(24, 1, MAX_TOKENS, 'int', "item text tokens in the text -> code task")
    max_title_tokens: int = knob(16, 1, MAX_TOKENS, 'int', "title tokens in the code -> text task")
    # 0 since train_version 3: the stage's example cap (train.max_examples) is shared, so alignment took a
    # third of the next-item examples; measured R@10 0.155 -> 0.182 on the dense world, same within noise on
    # the default one
    align_ratio: float = knob(0.0, 0, MAX_RATIO, 'float',
                              "alignment examples per seqrec example, each stage (LC-Rec's text <-> code tasks)")
    num_beams: int = knob(20, 1, 1024, 'int', "beam width is max(num_beams, k + 10)", use=EVAL)
    exclude_history: bool = knob(True, None, None, 'bool', "never recommend an item already in the history", use=EVAL)
    rank_batch: int = knob(256, 1, MAX_BATCH, 'int', "histories per beam search", use=EVAL)
    # collab since train_version 3 (was text): dense world R@10 0.118 -> 0.155 (align 0.5), default world
    # same within noise (docs/paradigms_text_semid.md)
    codes: str = knob("collab", CODE_SOURCES, None, 'choice',
                      "what the RQ codes quantize (collab.py): text (the item-text embedding), collab (item "
                      "co-occurrence PPMI + SVD over the training interactions) or fused (both, normalised, side by side)")
    collab_phases: str = knob("train", PHASE_CHOICES, None, 'choice',
                       "phases counted for co-occurrence: train = every phase but the latest (the eval window); first")
    collab_dim: int = knob(32, 1, MAX_WIDTH, 'int', "SVD dimensions of the collaborative embedding")
    collab_window: int = knob(20, 1, MAX_WINDOW, 'int',
                       "items within this many positions of a user's sequence co-occur (docs: 20 vs 100)")
    collab_weight: float = knob(0.5, 0, 1, 'float',
                       "fused: share of the squared norm carried by the collaborative part")


DEFAULTS: dict[str, Any] = SemIdKnobs.defaults()  # the knobs' defaults (the declaration above)
TEMPLATES = {"history": "History:", "next": " Next:", "item": "Item:", "code": " Code:", "code_first": "Code:",
             "item_after": " Item:"}


@dataclass
class SemIDInfo:
    """What the semid paradigm keeps next to the LM (``model.mmgrid_semid``)."""

    tokenizer: "PreTrainedTokenizerBase"
    domain: str
    n_items: int
    params: SemIdKnobs  # the knobs it was built or loaded with
    seed: int
    codes: np.ndarray  # [n_items, L] code index per level
    level_sizes: list[int]
    names: list[list[str]]  # this domain's token names per level
    added_first: int  # first added row of the embedding (all domains' code tokens follow)
    added_names: list[str]  # every added token name, in row order (may hold other domains')
    rows: list[torch.Tensor]  # rows[level][code] -> embedding row
    trie: CodeTrie
    text_ids: list[list[int]]
    title_ids: list[list[int]]
    template: dict[str, list[int]]

    def item_code_rows(self, item: int) -> list[int]:
        return [int(self.rows[lvl][c]) for lvl, c in enumerate(self.codes[item])]


def _info(model: torch.nn.Module) -> SemIDInfo:
    info = getattr(model, "mmgrid_semid", None)
    if info is None:
        raise ModelError("semid: this model was not built by the semid paradigm (no mmgrid_semid); use build/load.")
    return info


def _attach(lm: "PreTrainedModel", tokenizer: Any, domain: "DomainData", p: SemIdKnobs, seed: int,
            sids: SemanticIDs, added_first: int, added_names: list[str]) -> Any:
    """Hang a :class:`SemIDInfo` on ``lm`` (token rows looked up by name among the added rows)."""
    codes, level_sizes = sids.codes, sids.level_sizes
    if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
        raise ModelError("semid: the tokenizer needs eos and pad tokens (set tokenizer.eos_token/pad_token).")
    names = code_token_names(domain.name, level_sizes)
    row_of = {n: added_first + j for j, n in enumerate(added_names)}
    lost = [n for lvl in names for n in lvl if n not in row_of]
    if lost:
        raise CheckpointMismatchError(
            f"semid: the checkpoint's added rows lack {len(lost)} code tokens of domain {domain.name!r} "
            f"(e.g. {lost[0]}); it was trained for another domain. Load it with a domain whose tokens it holds."
        )
    rows = [torch.tensor([row_of[n] for n in lvl], dtype=torch.long) for lvl in names]

    def enc(texts: Sequence[str], cut: int) -> list[list[int]]:
        return [list(e[:cut]) for e in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    template = {k: enc([v], 64)[0] for k, v in TEMPLATES.items()}
    lm.mmgrid_semid = SemIDInfo(  # type: ignore[assignment]  # a Module attribute set by name
        tokenizer, domain.name, domain.n_items, p, seed, np.asarray(codes, dtype=np.int64), list(level_sizes),
        names, added_first, list(added_names), rows, CodeTrie(codes, level_sizes),
        enc([" " + t for t in domain.item_texts], int(p.max_text_tokens)),
        enc([" " + t for t in domain.item_titles], int(p.max_title_tokens)), template,
    )
    return lm


def seq_prompt(info: SemIDInfo, history: Sequence[int]) -> list[int]:
    """``<bos> History: <codes>... Next:`` as token ids (most recent ``max_history`` items)."""
    bos = info.tokenizer.bos_token_id
    ids = ([bos] if bos is not None else []) + info.template["history"]
    mh = int(info.params.max_history)
    for item in (list(history)[-mh:] if mh > 0 else []):
        ids += info.item_code_rows(item)
    return ids + info.template["next"]


def _alignment(info: SemIDInfo, n: int, phase: str) -> list[TokenExample]:
    """``n`` alignment examples (text→code and code→title alternating) over a seeded item permutation."""
    if n <= 0:
        return []
    rng = np.random.default_rng([info.seed, zlib.crc32(phase.encode())])
    order = np.concatenate([rng.permutation(info.n_items) for _ in range(n // info.n_items + 1)])[:n]
    bos = info.tokenizer.bos_token_id
    head = [bos] if bos is not None else []
    eos = info.tokenizer.eos_token_id
    t = info.template
    out = []
    for j, item in enumerate(order.tolist()):
        code = info.item_code_rows(item)
        if j % 2 == 0:
            out.append(TokenExample(tuple(head + t["item"] + info.text_ids[item] + t["code"] + code), len(code)))
        else:
            target = info.title_ids[item] + [eos]
            out.append(TokenExample(tuple(head + t["code_first"] + code + t["item_after"] + target), len(target)))
    return out


@register_paradigm("semid")
class SemIDParadigm:
    """LC-Rec-style semantic-ID generative recommender (see the module docstring)."""

    name = "semid"
    defaults = DEFAULTS  # paradigm_params.<name>: every knob with its default (checked by mmgrid.validate)
    # Length-bucketed training batches, as the text paradigm (see TextParadigm.train_version): 2.
    # 3: codes from collaborative embeddings and no alignment examples by default.
    bucket_window = 8
    # 4: the last layer only at the target columns (mmgrid.models.partial) and the fused AdamW
    train_version = 4
    fused_optimizer = True

    def example_length(self, example: TokenExample) -> int:
        return len(example.ids)

    def build(self, base: "BaseBundle", domain: "DomainData", params: dict[str, Any], seed: int) -> torch.nn.Module:
        p = SemIdKnobs.resolve(params)
        sids = domain_codes(domain, p)
        lm, tok = copy.deepcopy(base.model), copy.deepcopy(base.tokenizer)
        flat = [n for lvl in code_token_names(domain.name, sids.level_sizes) for n in lvl]
        first = add_code_tokens(lm, tok, flat, seed)
        return _attach(lm, tok, domain, p, seed, sids, first, flat)

    def examples(self, model: torch.nn.Module, domain: "DomainData", phase: str) -> list[TokenExample]:
        info = _info(model)
        seq = []
        for ex in load_examples(domain, phase, int(info.params.max_history)):
            code = info.item_code_rows(ex.target)
            seq.append(TokenExample(tuple(seq_prompt(info, ex.history) + code), len(code)))
        return seq + _alignment(info, int(round(float(info.params.align_ratio) * len(seq))), phase)

    def collate(self, model: torch.nn.Module, examples: list[TokenExample]) -> dict[str, torch.Tensor]:
        info = _info(model)
        p = info.params
        max_len = 8 + (int(p.max_history) + 1) * len(info.level_sizes) + int(p.max_text_tokens) + \
            int(p.max_title_tokens)
        return collate_lm(examples, info.tokenizer.pad_token_id, max_len)

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return lm_loss(model, batch)

    @torch.no_grad()
    def beam_search(self, model: torch.nn.Module, histories: list[list[int]], beam: int) -> list[list[int]]:
        """Items of the valid beams, best first, for each history (trie-constrained, KV-cached)."""
        info = _info(model)
        dev = next(model.parameters()).device
        ids, mask, pos = (t.to(dev) for t in left_pad([seq_prompt(info, h) for h in histories],
                                                       info.tokenizer.pad_token_id))
        rows = [r.to(dev) for r in info.rows]
        n, state = len(histories), {}

        def step(prefixes: torch.Tensor, level: int, origin: torch.Tensor | None) -> torch.Tensor:
            # the prompt's keys/values are kept once per history and shared by its beams (no per-beam copy)
            if origin is None:
                state["dec"] = SharedPrefixDecoder(model, ids, mask, pos)
                logp = state["dec"].logits.float().log_softmax(-1)[:, rows[level]]
            else:  # this level's codes only (the normalizer over the whole vocabulary, in row chunks)
                last = rows[level - 1][prefixes[:, :, -1].reshape(-1).to(dev)]
                logp = state["dec"].step(last, origin.to(dev), columns=rows[level])
            return logp.view(n, -1, rows[level].shape[0])

        codes, scores, _ = trie_beam_search_with_order(step, info.trie, n, beam)
        return decode_items(info.trie, codes, scores)

    def rank(self, model: torch.nn.Module, domain: "DomainData", histories: list[list[int]], k: int) -> np.ndarray:
        info = _info(model)
        if info.n_items != domain.n_items or info.domain != domain.name:
            raise CheckpointMismatchError(
                f"semid: model of domain {info.domain!r} ({info.n_items} items) asked to rank domain "
                f"{domain.name!r} ({domain.n_items} items); load the checkpoint with that domain."
            )
        if not 1 <= k <= info.n_items:
            raise ConfigError(f"rank: k={k} must be between 1 and the domain's {info.n_items} items.")
        was_training = model.training
        model.eval()
        beam = max(int(info.params.num_beams), k + 10)
        out = np.zeros((len(histories), k), dtype=np.int64)
        bs = int(info.params.rank_batch)
        for start in range(0, len(histories), bs):
            chunk = histories[start:start + bs]
            found = self.beam_search(model, chunk, beam)
            fallback = _fallback_order(chunk, info.n_items)
            for j, (hist, items) in enumerate(zip(chunk, found)):
                out[start + j] = _fill(items, hist if info.params.exclude_history else (), fallback, k)
        model.train(was_training)
        return out

    def save(self, model: "PreTrainedModel") -> Checkpoint:
        info = _info(model)
        files = {"config.json": hf_config_file(model.config), **tokenizer_files(info.tokenizer)}
        entry = {"codes": info.codes.tolist(), "level_sizes": info.level_sizes, "n_items": info.n_items,
                 "token_names": [n for lvl in info.names for n in lvl]}
        meta = {
            "paradigm": "semid", "domain": info.domain, "n_items": info.n_items, "params": info.params.to_dict(),
            "seed": info.seed, "levels": len(info.level_sizes), "codebook_size": int(info.params.codebook_size),
            "semid_domains": {info.domain: entry},
        }
        added = (info.added_first, list(info.added_names))
        added_rows = {"model.embed_tokens.weight": added}
        if not is_tied(model):
            added_rows["lm_head.weight"] = added
        return Checkpoint(state=lm_state(model), files=files, meta=meta, added_rows=added_rows)

    def load(self, ckpt: Checkpoint, domain: "DomainData", params: dict[str, Any]) -> torch.nn.Module:
        p = SemIdKnobs.resolve({**ckpt.meta.get("params", {}), **(params or {})})
        entry = _domain_entry(ckpt.meta, domain, p)
        added = ckpt.added_rows.get("model.embed_tokens.weight") or \
            (ckpt.meta.get("added_rows") or {}).get("model.embed_tokens.weight")
        if not added:
            raise CheckpointMismatchError("semid checkpoint has no added_rows for model.embed_tokens.weight; "
                                          "it was not saved by the semid paradigm.")
        first, names = int(added[0]), list(added[1])
        lm = lm_from_checkpoint(ckpt, "semid checkpoint")
        tok = tokenizer_from_files(ckpt.files)
        sync_tokenizer(tok, first, names)
        sids = SemanticIDs(codes=np.asarray(entry["codes"]), level_sizes=list(entry["level_sizes"]))
        return _attach(lm, tok, domain, p, int(ckpt.meta.get("seed", 0)), sids, first, names)


_CODES: dict[tuple, SemanticIDs] = {}
_MAX_CODES = 64


def domain_codes(domain: "DomainData", p: SemIdKnobs) -> SemanticIDs:
    """The domain's unique semantic IDs: a deterministic function of its texts and the params.

    Cached per process by (texts and embedder, levels, codebook size, quantizer seed): a grid
    builds semid start models many times (each row's first stage, regularizer origins,
    accuracy-matrix start rows), and RQ-KMeans gives the same codes every time. Each call
    returns its own copy of the codes array.
    """
    texts = list(domain.item_texts)
    key: tuple = (texts_key(texts, p.embedder), int(p.levels), int(p.codebook_size),
                  int(p.quantizer_seed), domain.name)
    phases: list[str] = []
    if p.codes != "text":
        phases = collab_phases(domain.interactions, p.collab_phases)
        seen = domain.interactions.filter(pl.col("phase").is_in(phases))
        data_key = zlib.crc32(seen.select("user_idx", "item_idx", "timestamp").to_numpy().tobytes())
        key += (p.codes, tuple(phases), int(p.collab_dim), int(p.collab_window),
                float(p.collab_weight), data_key)
    if key not in _CODES:
        emb = embed_items(texts, p.embedder, p.embedder_device, p.embed_cache)
        collab = None
        if p.codes != "text":
            collab, _ = collab_embeddings(domain, phases, int(p.collab_dim), int(p.collab_window), emb)
        x = code_inputs(p.codes, emb, collab, float(p.collab_weight))
        if len(_CODES) >= _MAX_CODES:
            _CODES.pop(next(iter(_CODES)))
        _CODES[key] = semantic_ids(x, int(p.levels), int(p.codebook_size), seed=int(p.quantizer_seed),
                                   domain=domain.name)
    sids = _CODES[key]
    return SemanticIDs(codes=sids.codes.copy(), level_sizes=list(sids.level_sizes))


def _domain_entry(meta: dict[str, Any], domain: "DomainData", p: SemIdKnobs) -> dict[str, Any]:
    """This domain's codes from a (possibly merged) checkpoint's meta.

    A merged checkpoint whose meta came from another input lacks this domain's entry;
    the codes are then recomputed (they depend only on the texts, the embedder, the sizes
    and ``quantizer_seed``), and loading checks that the checkpoint holds their tokens.
    """
    entry = (meta.get("semid_domains") or {}).get(domain.name)
    if entry is None:
        sids = domain_codes(domain, p)
        return {"codes": sids.codes.tolist(), "level_sizes": sids.level_sizes, "n_items": domain.n_items}
    if int(entry["n_items"]) != int(domain.n_items):
        raise CheckpointMismatchError(
            f"semid checkpoint has codes for {entry['n_items']} items of {domain.name!r}, the domain has "
            f"{domain.n_items}; it was trained on another version of the data."
        )
    return entry


def _fallback_order(histories: list[list[int]], n_items: int) -> np.ndarray:
    """Items by how often they appear in the batch's histories (a popularity proxy), then by index."""
    flat = np.fromiter((i for h in histories for i in h), dtype=np.int64)
    counts = np.bincount(flat, minlength=n_items) if flat.size else np.zeros(n_items, dtype=np.int64)
    return np.argsort(-counts, kind="stable")


def _fill(items: list[int], history: Sequence[int], fallback: np.ndarray, k: int) -> list[int]:
    """``k`` distinct items: beam items not in the history, then fallback ones, then history ones."""
    seen = set(history)
    out = [i for i in items if i not in seen][:k]
    chosen = set(out)
    for pool in (fallback, items, history):
        for i in pool:
            if len(out) == k:
                return out
            i = int(i)
            if i not in chosen and (i not in seen or pool is history):
                out.append(i)
                chosen.add(i)
    return out


__all__ = ["SemIDParadigm", "SemIDError", "seq_prompt"]
