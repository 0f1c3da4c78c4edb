"""Semantic-ID tokens: names, adding them to a tokenizer and an LM, finding their rows again.

Each (level, code) pair of a domain becomes one new token ``<{domain}_{letter}_{code}>``
(``letter`` = a, b, c, ... for level 0, 1, 2, ...). Names carry the domain so that a
cross-domain merge can keep both domains' rows side by side (MMGRid section
4, footnote 3: "we retain the token embeddings from both domains").

The rows of the added tokens are appended after the LM's existing rows; if the tokenizer
is shorter than the embedding (padded vocabularies such as Qwen3's), unused filler tokens
are added first so that a token's id always equals its row (an exported HF folder then
decodes correctly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tokenizers import AddedToken

from mmgrid.paradigms.errors import CheckpointMismatchError

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def code_token_names(domain: str, level_sizes: list[int]) -> list[list[str]]:
    """Token names per level: ``names[level][code]``."""
    if len(level_sizes) > len(LETTERS):
        raise ValueError(f"at most {len(LETTERS)} levels")
    return [[f"<{domain}_{LETTERS[lvl]}_{c}>" for c in range(size)] for lvl, size in enumerate(level_sizes)]


def _special(names: list[str]) -> list[Any]:

    return [AddedToken(n, special=True, normalized=False, single_word=False) for n in names]


def _weight(layer: torch.nn.Module) -> torch.Tensor:
    """An embedding layer's weight (a Module attribute, which the type checker sees as Tensor | Module)."""
    w = layer.weight
    assert isinstance(w, torch.Tensor)
    return w


def add_code_tokens(lm: "PreTrainedModel", tokenizer: "PreTrainedTokenizerBase", names: list[str], seed: int) -> int:
    """Append ``names`` as new rows of the LM (input and output embeddings) and the tokenizer.

    New rows start as the mean of the existing rows plus small seeded noise (so codes are
    distinguishable from the first step; HF's default would sample from a covariance).

    Returns:
        The first added row (``names[j]`` has row ``first + j``).
    """
    rows = _weight(lm.get_input_embeddings()).shape[0]
    if len(tokenizer) > rows:
        lm.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        rows = len(tokenizer)
    fill = [f"<|mmgrid_unused_{i}|>" for i in range(len(tokenizer), rows)]
    tokenizer.add_tokens(_special(fill + names))
    first = rows
    got = tokenizer.convert_tokens_to_ids(names[0]) if names else first
    if got != first:
        raise CheckpointMismatchError(
            f"semid: token {names[0]!r} got id {got} but row {first}; the tokenizer already holds "
            f"code tokens of this domain. Build from a base without them."
        )
    lm.resize_token_embeddings(first + len(names), mean_resizing=False)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        tensors = [_weight(lm.get_input_embeddings())]
        out = lm.get_output_embeddings()
        if out is not None and _weight(out) is not tensors[0]:
            tensors.append(_weight(out))
        for w in tensors:
            old = w[:first].float()
            noise = torch.randn((len(names), w.shape[1]), generator=gen) * old.std(0, keepdim=True) * 0.5
            w[first:] = (old.mean(0, keepdim=True) + noise).to(w.dtype)
    return first


def sync_tokenizer(tokenizer: "PreTrainedTokenizerBase", first: int, names: list[str]) -> None:
    """Add the tokens of ``names`` a (merged) checkpoint's tokenizer lacks, at their rows if possible.

    A merged checkpoint carries one input's tokenizer files; the other domain's code
    tokens are appended in row order so that ids keep equalling rows. The paradigm itself
    addresses code tokens by row, so a tokenizer that cannot be aligned only affects
    decoding of exported folders.
    """
    vocab = tokenizer.get_vocab()
    missing = [(first + j, n) for j, n in enumerate(names) if n not in vocab]
    todo: list[str] = []
    for row, name in missing:
        if len(tokenizer) + len(todo) != row:
            break
        todo.append(name)
    if todo:
        tokenizer.add_tokens(_special(todo))
