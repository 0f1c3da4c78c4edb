"""Item texts as token ids (HLLM's item LLM reads them), cached across models of one domain."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from mmgrid.errors import ConfigError, ModelError
from mmgrid.paradigms.examples import pad_right

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerBase

    from mmgrid.data.dataset import DomainData


@dataclass
class ItemTokens:
    """Tokenized item texts, right-padded: ``ids [n_items, T]`` and ``lengths [n_items]``."""

    ids: torch.Tensor
    lengths: torch.Tensor


def tokenizer_fingerprint(tokenizer: "PreTrainedTokenizerBase") -> str:
    """A short hash of the tokenizer's vocabulary and rules (cache key)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tokenize_items(
    tokenizer: "PreTrainedTokenizerBase", texts: Sequence[str], max_tokens: int, append_eos: bool = True
) -> ItemTokens:
    """Tokenize item texts to at most ``max_tokens`` tokens, the last one EOS when ``append_eos``.

    HLLM reads an item's embedding at a trailing special token, so the EOS is kept even
    when the text is truncated.
    """
    if max_tokens < 2:
        raise ConfigError(f"max_item_tokens={max_tokens}: need at least 2 (text + EOS).")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    if append_eos and eos is None:
        raise ModelError("tokenizer has no eos_token; set one (tokenizer.eos_token = ...) before building.")
    pad = pad if pad is not None else (eos if eos is not None else 0)
    enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    room = max_tokens - 1 if append_eos else max_tokens
    seqs = [list(e[:room]) + ([eos] if append_eos else []) for e in enc]
    ids, lengths = pad_right(seqs, pad)
    return ItemTokens(ids, lengths)


_ITEM_TOKEN_CACHE: dict[tuple[str, str, int, str, int, bool], ItemTokens] = {}


def cached_item_tokens(
    tokenizer: "PreTrainedTokenizerBase", domain: "DomainData", max_tokens: int, append_eos: bool = True
) -> ItemTokens:
    """:func:`tokenize_items` of ``domain.item_texts``, cached across models (weights do not matter).

    The key holds the tokenizer's fingerprint, the domain's name and a hash of its texts, so
    loading many checkpoints of one domain (merges, sweeps) tokenizes once.
    """
    texts = list(domain.item_texts)
    text_hash = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
    key = (tokenizer_fingerprint(tokenizer), domain.name, len(texts), text_hash, max_tokens, append_eos)
    if key not in _ITEM_TOKEN_CACHE:
        if len(_ITEM_TOKEN_CACHE) > 64:  # bounded: a sweep touches few (tokenizer, domain) pairs
            _ITEM_TOKEN_CACHE.clear()
        _ITEM_TOKEN_CACHE[key] = tokenize_items(tokenizer, texts, max_tokens, append_eos)
    return _ITEM_TOKEN_CACHE[key]
