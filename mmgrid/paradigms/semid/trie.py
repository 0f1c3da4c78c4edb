"""Trie of valid item codes and a beam search that can only emit valid codes.

LC-Rec (MMGRid ref. [41]) decodes semantic IDs with beam search constrained to
the codes that exist. Codes here have a fixed length ``L``, so the search is ``L`` steps;
at step ``l`` each beam may only extend its prefix by a child of that prefix in the trie.
Disallowed extensions get score ``-inf`` before the top-``B`` selection, and beams whose
score is ``-inf`` are dropped at the end, so every returned code is a complete, valid
item code (tests/paradigms/test_semid.py checks this with random codebooks and logits).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

StepFn = Callable[[torch.Tensor, int], torch.Tensor]


class CodeTrie:
    """The valid codes of a domain, with per-prefix masks of allowed next codes.

    Args:
        codes: int array [n_items, L]; row ``i`` is item ``i``'s (unique) code.
        level_sizes: number of entries of each level.
    """

    def __init__(self, codes: np.ndarray, level_sizes: list[int]) -> None:
        codes = np.asarray(codes, dtype=np.int64)
        if codes.ndim != 2 or codes.shape[1] != len(level_sizes):
            raise ValueError(f"codes must be [n, {len(level_sizes)}], got {codes.shape}")
        self.codes = codes
        self.level_sizes = list(level_sizes)
        self.item_of: dict[tuple[int, ...], int] = {tuple(map(int, r)): i for i, r in enumerate(codes)}
        if len(self.item_of) != len(codes):
            raise ValueError("codes are not unique; resolve collisions first")
        self._index: list[dict[tuple[int, ...], int]] = []
        self._masks: list[torch.Tensor] = []
        for level, size in enumerate(level_sizes):
            index: dict[tuple[int, ...], int] = {}
            rows: list[torch.Tensor] = []
            for r in codes:
                key = tuple(map(int, r[:level]))
                if key not in index:
                    index[key] = len(rows)
                    rows.append(torch.zeros(size, dtype=torch.bool))
                rows[index[key]][int(r[level])] = True
            rows.append(torch.zeros(size, dtype=torch.bool))  # last row: unknown prefix, nothing allowed
            self._index.append(index)
            self._masks.append(torch.stack(rows))

    @property
    def n_levels(self) -> int:
        return len(self.level_sizes)

    def allowed(self, level: int, prefixes: torch.Tensor) -> torch.Tensor:
        """Bool mask [m, level_sizes[level]] of codes that may follow each prefix [m, level]."""
        index, masks = self._index[level], self._masks[level]
        unknown = masks.shape[0] - 1
        rows = [index.get(tuple(p), unknown) for p in prefixes.tolist()] if level else [index[()]] * len(prefixes)
        return masks[torch.tensor(rows, dtype=torch.long)]


def trie_beam_search(step: StepFn, trie: CodeTrie, n: int, beam: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Beam search over fixed-length codes, restricted to the trie.

    Args:
        step: ``step(prefixes, level) -> logp``; prefixes is a long tensor [n, b, level] of
            the current beams, logp a float tensor [n, b, level_sizes[level]] of the
            log-probabilities of each next code. Beams are reordered between calls; a
            model with a key/value cache should use :func:`trie_beam_search_with_order`.
        trie: the valid codes.
        n: number of queries.
        beam: beam width.

    Returns:
        (codes long [n, b, L], scores float [n, b]) sorted best first; ``b <= beam``; rows
        with score ``-inf`` are not valid codes and must be ignored.
    """
    codes, scores, _ = trie_beam_search_with_order(lambda p, lvl, _o: step(p, lvl), trie, n, beam)
    return codes, scores


def trie_beam_search_with_order(
    step: Callable[[torch.Tensor, int, torch.Tensor | None], torch.Tensor], trie: CodeTrie, n: int, beam: int
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """:func:`trie_beam_search` that also tells ``step`` where each beam came from.

    ``step(prefixes, level, origin)`` gets ``origin`` long [n * b] (the flat index of each
    new beam's parent in the previous call's flattened [n * b_prev] beams; ``None`` at
    level 0), so a model can reorder its key/value cache.
    """
    prefixes = torch.zeros((n, 1, 0), dtype=torch.long)
    scores = torch.zeros((n, 1))
    origin: torch.Tensor | None = None
    origins: list[torch.Tensor] = []
    for level, size in enumerate(trie.level_sizes):
        b = prefixes.shape[1]
        logp = step(prefixes, level, origin).to(device="cpu", dtype=torch.float32)
        mask = trie.allowed(level, prefixes.reshape(n * b, level)).view(n, b, size)
        cand = scores[..., None] + logp
        # Only allowed children survive; a NaN score must not select a code either.
        cand = torch.where(mask & ~torch.isnan(cand), cand, torch.tensor(float("-inf")))
        width = min(beam, b * size)
        top, flat = cand.reshape(n, b * size).topk(width, dim=1)
        parent, code = flat // size, flat % size
        prefixes = torch.cat([prefixes.gather(1, parent[..., None].expand(-1, -1, level)), code[..., None]], dim=2)
        scores = top
        origin = (parent + torch.arange(n)[:, None] * b).reshape(-1)
        origins.append(origin)
    return prefixes, scores, origins


def decode_items(trie: CodeTrie, codes: torch.Tensor, scores: torch.Tensor) -> list[list[int]]:
    """Item ids of the valid beams, best first, one list per query (no duplicates)."""
    out: list[list[int]] = []
    for row_codes, row_scores in zip(codes.tolist(), scores.tolist()):
        items: list[int] = []
        for c, s in zip(row_codes, row_scores):
            if s == float("-inf"):
                continue
            item = trie.item_of.get(tuple(c))
            if item is not None and item not in items:
                items.append(item)
        out.append(items)
    return out
