"""Training examples of a phase (from the prepared ``examples`` table) and their right-padded batching."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

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
