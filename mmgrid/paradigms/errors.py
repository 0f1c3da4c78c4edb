"""Named errors of the paradigms."""

from __future__ import annotations

from mmgrid.errors import ModelError


class CheckpointMismatchError(ModelError):
    """A checkpoint does not fit the domain or paradigm it is loaded for (n_items, names...)."""
