"""Named errors of the paradigms."""

from __future__ import annotations

from mmgrid.errors import ModelError


class CheckpointMismatchError(ModelError):
    """A checkpoint does not fit the domain or paradigm it is loaded for (n_items, names...)."""


class UnsafeEmbedderError(ModelError):
    """An embedder folder whose weights would be read from a pickle (.bin/.pt/...): refused, never loaded."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"embedder {path}: {reason}; mmgrid loads embedder weights from safetensors only (a pickle can run "
            "code when loaded). Convert the folder where you trust it, e.g. "
            "`SentenceTransformer(folder).save(out, safe_serialization=True)`, and set "
            "paradigm_params.<text|semid>.embedder to the converted folder (or to 'all-minilm-l6-v2')."
        )
        self.path = path
