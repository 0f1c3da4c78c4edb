"""Training examples of a phase (from the prepared ``examples`` table) and their right-padded batching."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import DomainData


@dataclass(frozen=True)
class Example:
    """One training example: the user's earlier items (oldest first) and the next item."""

    user_idx: int
    history: tuple[int, ...]
    target: int


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
    lengths = np.fromiter((len(s) for s in cut), dtype=np.int64, count=len(cut))
    width = max(1, int(lengths.max()) if len(cut) else 0)
    ids = np.full((len(cut), width), pad, dtype=np.int64)
    if lengths.any():  # one scatter of every entry (a row loop of torch.tensor calls cost ~14 us a row)
        ids[np.repeat(np.arange(len(cut)), lengths), _positions(lengths)] = np.fromiter(
            (int(i) for s in cut for i in s), dtype=np.int64, count=int(lengths.sum()))
    return torch.from_numpy(ids), torch.from_numpy(lengths)


def _positions(lengths: np.ndarray) -> np.ndarray:
    """``0 .. n-1`` for each length ``n``, concatenated."""
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.arange(int(lengths.sum()), dtype=np.int64) - starts


def last_index(lengths: torch.Tensor) -> torch.Tensor:
    """Index of the last real position of each right-padded row (0 for an empty row)."""
    return (lengths - 1).clamp(min=0)
