"""Helpers shared by the paradigms: examples, padding, params, item-text tokens, checkpoints.

Nothing here knows a particular paradigm. Signatures are kept stable because every
paradigm module (text, semid, emb, sasrec) may import them.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import torch

from mmgrid.errors import ConfigError, ModelError

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerBase

    from mmgrid.data.dataset import DomainData


class CheckpointMismatchError(ModelError):
    """A checkpoint does not fit the domain or paradigm it is loaded for (n_items, names...)."""


@dataclass(frozen=True)
class Example:
    """One training example: the user's earlier items (oldest first) and the next item."""

    user_idx: int
    history: tuple[int, ...]
    target: int


# --------------------------------------------------------------------------- params


def resolve_params(params: dict[str, Any] | None, defaults: dict[str, Any], where: str) -> dict[str, Any]:
    """Defaults overlaid with ``params``; unknown keys and wrongly typed values raise ConfigError.

    Args:
        params: the grid's ``paradigm_params.<name>`` mapping (may be None or empty).
        defaults: every known key with its default value; the default's type is the schema
            (an int default accepts ints, a float default accepts ints and floats).
        where: config path for messages, e.g. ``paradigm_params.emb``.

    Returns:
        A new dict with every key of ``defaults``.
    """
    out = dict(defaults)
    for key, value in (params or {}).items():
        if key not in defaults:
            raise ConfigError(f"{where}.{key}: unknown parameter; known: {', '.join(sorted(defaults))}.")
        want = type(defaults[key])
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = defaults[key] is None or (isinstance(value, want) and isinstance(value, bool) == (want is bool))
        if not ok:
            raise ConfigError(
                f"{where}.{key}: expected {want.__name__}, got {value!r}; fix the value in the grid YAML."
            )
        out[key] = value
    return out


# --------------------------------------------------------------------------- examples


def load_examples(domain: "DomainData", phase: str, max_history: int | None = None) -> list[Example]:
    """A phase's examples from the prepared ``examples`` table, histories cut to the last ``max_history``.

    Args:
        domain: the prepared domain (``domain.examples(phase)`` gives user_idx, target, history).
        phase: phase name, e.g. ``pretrain``.
        max_history: keep at most this many most recent history items (None = all).

    Returns:
        Examples in table order (time order within the phase as prepared).
    """
    df = domain.examples(phase)
    users = df["user_idx"].to_list()
    targets = df["target"].to_list()
    hists = df["history"].to_list()
    out = []
    for u, t, h in zip(users, targets, hists):
        h = list(h or [])
        if max_history is not None and max_history > 0:
            h = h[-max_history:]
        out.append(Example(int(u), tuple(int(i) for i in h), int(t)))
    return out


def pad_right(seqs: Sequence[Sequence[int]], pad: int, max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad integer sequences, keeping each one's last ``max_len`` entries.

    An empty sequence gets length 0 but still one padded column, so every batch has
    at least one position to read from (paradigms treat that position as "no history").

    Returns:
        ``(ids [B, L] long, lengths [B] long)``.
    """
    cut = [list(s)[-max_len:] if max_len else list(s) for s in seqs]
    width = max(1, max((len(s) for s in cut), default=0))
    ids = torch.full((len(cut), width), pad, dtype=torch.long)
    for row, s in enumerate(cut):
        if s:
            ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in cut], dtype=torch.long)
    return ids, lengths


def last_index(lengths: torch.Tensor) -> torch.Tensor:
    """Index of the last real position of each right-padded row (0 for an empty row)."""
    return (lengths - 1).clamp(min=0)


# --------------------------------------------------------------------------- ranking


def topk_items(scores: torch.Tensor, k: int, exclude: Sequence[Iterable[int]] | None = None) -> np.ndarray:
    """Top-``k`` column indices of each row, best first, optionally masking some columns per row.

    Args:
        scores: ``[n, n_items]`` float scores (higher is better).
        k: how many to return; must not exceed ``n_items``.
        exclude: per row, item indices that may not be returned (e.g. the history).

    Returns:
        ``np.ndarray [n, k]`` of int64 item indices.
    """
    n_items = scores.shape[1]
    if k > n_items or k < 1:
        raise ConfigError(f"rank: k={k} must be between 1 and the domain's {n_items} items.")
    scores = scores.float().clone()
    if exclude is not None:
        for row, items in enumerate(exclude):
            idx = [i for i in items if 0 <= i < n_items]
            # Keep at least k candidates even for a history that covers the catalog.
            if idx and n_items - len(set(idx)) >= k:
                scores[row, idx] = float("-inf")
    return torch.topk(scores, k, dim=1).indices.cpu().numpy().astype(np.int64)


# --------------------------------------------------------------------------- item text tokens


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


# --------------------------------------------------------------------------- checkpoints


def module_state(module: torch.nn.Module, prefix: str, skip: Iterable[str] = ()) -> dict[str, torch.Tensor]:
    """A module's tensors under ``prefix``: detached, contiguous CPU copies (no shared storage).

    Args:
        module: the module whose ``state_dict`` is copied.
        prefix: prepended to every name, e.g. ``"item_llm."``.
        skip: names (without prefix) left out, e.g. a tied ``lm_head.weight``.
    """
    skip = set(skip)
    return {
        prefix + k: v.detach().to("cpu").contiguous().clone()
        for k, v in module.state_dict().items()
        if k not in skip and v.is_floating_point()
    }


def sub_state(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries of ``state`` that start with ``prefix``, with the prefix removed."""
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def load_module_state(
    module: torch.nn.Module, state: dict[str, torch.Tensor], where: str, allow_missing: Iterable[str] = ()
) -> None:
    """Load ``state`` into ``module`` strictly (except ``allow_missing``), with a named error on mismatch.

    Tensors are cast to each parameter's dtype, so a merged float32 state loads into a
    bfloat16 model and vice versa.
    """
    own = module.state_dict()
    missing = sorted(set(own) - set(state) - set(allow_missing))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise CheckpointMismatchError(
            f"{where}: checkpoint does not match the model: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}. Was it saved by this paradigm?"
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise CheckpointMismatchError(
                f"{where}: tensor {name!r} has shape {tuple(tensor.shape)} but the model expects "
                f"{tuple(own[name].shape)}; the checkpoint was made for another size or domain."
            )
    fixed = {k: v.to(own[k].dtype) for k, v in state.items()}
    module.load_state_dict(fixed, strict=False)


def check_n_items(meta: dict[str, Any], domain: "DomainData", paradigm: str) -> None:
    """Raise :class:`CheckpointMismatchError` if a checkpoint was made for a different catalog size."""
    n = meta.get("n_items")
    if n is not None and int(n) != int(domain.n_items):
        raise CheckpointMismatchError(
            f"{paradigm} checkpoint of domain {meta.get('domain')!r} has n_items={n}, but domain "
            f"{domain.name!r} has {domain.n_items} items; load it with the domain it was trained on."
        )


def tokenizer_files(tokenizer: "PreTrainedTokenizerBase") -> dict[str, bytes]:
    """The tokenizer as files (``tokenizer.json``, ``tokenizer_config.json``, ...) for a checkpoint."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}


def tokenizer_from_files(files: dict[str, bytes]) -> "PreTrainedTokenizerBase":
    """Rebuild a fast tokenizer from :func:`tokenizer_files` output (local files only)."""
    from transformers import PreTrainedTokenizerFast

    if "tokenizer.json" not in files:
        raise CheckpointMismatchError(
            f"checkpoint has no tokenizer.json (files: {sorted(files)}); it was not saved by an LLM paradigm."
        )
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            if name.startswith("tokenizer") or name in ("special_tokens_map.json", "added_tokens.json"):
                (Path(tmp) / name).write_bytes(data)
        return PreTrainedTokenizerFast.from_pretrained(tmp)


def hf_config_file(config: Any) -> bytes:
    """An HF config as ``config.json`` bytes."""
    return config.to_json_string(use_diff=False).encode()


def hf_config_from_file(data: bytes) -> Any:
    """A Qwen3 (or other causal-LM) config back from ``config.json`` bytes (no hub access)."""
    import json

    from transformers import AutoConfig

    d = json.loads(data)
    model_type = d.pop("model_type", "qwen3")
    return AutoConfig.for_model(model_type, **d)
