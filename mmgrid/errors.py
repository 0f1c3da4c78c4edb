"""Named errors. Every message says what went wrong, where, and how to fix it.

Each concern raises a subclass of :class:`MmgridError`; the CLI prints the message
without a traceback and exits with status 2.
"""

from __future__ import annotations

import difflib


class MmgridError(Exception):
    """Base class of every error mmgrid raises on purpose."""


class ConfigError(MmgridError, ValueError):
    """A grid YAML or a ``key=value`` override is invalid."""


class DataError(MmgridError, ValueError):
    """Raw or prepared data is malformed (corrupt line, missing field, empty phase...)."""


class RegistryError(MmgridError):
    """A registry operation failed (unknown id, missing or corrupt blob...)."""


class MergeError(MmgridError, ValueError):
    """A merge cannot be carried out (mismatched shapes, NaN, bad parameter...)."""


class ModelError(MmgridError, ValueError):
    """A base model or paradigm cannot be built (unknown name, no tokenizer...)."""


class TrainingError(MmgridError, RuntimeError):
    """Training failed (loss became NaN...). The last good checkpoint is kept."""


class UnknownNameError(ConfigError, KeyError):
    """An unknown registered name (method, paradigm, regularizer, builder...)."""

    def __init__(self, kind: str, name: str, known: list[str] | tuple[str, ...]) -> None:
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        msg = f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}.{hint}"
        super().__init__(msg)
        self.kind, self.name, self.known = kind, name, tuple(known)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.args[0]
