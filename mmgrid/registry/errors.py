"""Named errors of the registry. Each message says what, where and how to fix it."""

from __future__ import annotations

from mmgrid.errors import RegistryError, StorageError


class UnknownCheckpointError(RegistryError, KeyError):
    """No checkpoint has this id, alias or coordinates."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class AmbiguousCheckpointError(RegistryError, LookupError):
    """Coordinates (or an id prefix) match more than one checkpoint."""


class MissingBlobError(RegistryError, FileNotFoundError):
    """A blob a manifest refers to is not in the store."""


class CorruptBlobError(RegistryError, ValueError):
    """A blob's bytes no longer hash to its name (bit rot, partial copy, tampering)."""


class UnsafeFormatError(RegistryError, ValueError):
    """A pickle-based checkpoint (.bin/.pt/.pkl...) was offered; only safetensors are read."""


class InvalidNameError(RegistryError, ValueError):
    """A coordinate, alias or file name is not allowed (path separators, '..', empty...)."""


class ArchitectureMismatchError(RegistryError, ValueError):
    """An imported checkpoint's architecture or tensor shapes differ from what was expected."""


class IndexLockedError(RegistryError):
    """The SQLite index stayed locked past every retry."""


class UnsafePathError(RegistryError, ValueError):
    """A path read from a stored artifact (a manifest's file name or blob hash, an alias's
    target id) or a symlink inside an imported folder would lead outside where it may go."""


class InvalidFileError(RegistryError, ValueError):
    """A file offered to the registry is not what its name says (a config.json that is not
    a JSON object, say)."""


class NonFiniteTensorError(RegistryError, ValueError):
    """A tensor offered to ``put`` holds NaN or Inf values; they never enter the registry."""


class IdentityConflictError(RegistryError, ValueError):
    """A checkpoint identity already stored was put again with different content."""


class ReadOnlyRegistryError(RegistryError):
    """A write (put, record_eval, alias, gc, reindex, import) was asked of a registry that cannot
    be written (read-only mount, no write permission); raised before any work is done."""


class CorruptIndexError(RegistryError):
    """``index.sqlite`` is damaged (not a database, malformed pages); it is a cache of the files,
    so ``mmgrid registry reindex ROOT`` rebuilds it."""


class RegistryStorageError(RegistryError, StorageError):
    """A full disk or another operating-system error while the registry read or wrote a file;
    what was being written is undone (nothing half-written), the message says what to do."""

    errno: int | None = None  # the operating system's error code (ENOSPC: a full disk), read by describe_os_error


class RegistryLockedError(RegistryError):
    """``gc`` waited too long for writers (puts, recorded evaluations) to finish."""


class RegistryWarning(UserWarning):
    """Something was skipped rather than refused (an unreadable manifest while indexing)."""
