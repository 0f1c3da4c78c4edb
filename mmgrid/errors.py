"""Named errors. Every message says what went wrong, where, and how to fix it.

Each concern raises a subclass of :class:`MmgridError`; the CLI prints the message
without a traceback and exits with status 2.
"""

from __future__ import annotations

import difflib
import errno as errno_mod


class MmgridError(Exception):
    """Base class of every error mmgrid raises on purpose."""


class ConfigError(MmgridError, ValueError):
    """A grid YAML or a ``key=value`` override is invalid."""


class YamlLimitError(ConfigError):
    """A YAML document would expand past the loader's bounds (an alias "bomb"): too many nodes once its
    aliases are expanded, too many aliases, or an alias to itself. Refused before anything is expanded."""


class DataError(MmgridError, ValueError):
    """Raw or prepared data is malformed (corrupt line, missing field, empty phase...)."""


class RegistryError(MmgridError):
    """A registry operation failed (unknown id, missing or corrupt blob...)."""


class StorageError(MmgridError):
    """Reading or writing a file failed for a reason of the storage, not of the input: a full
    disk, an I/O error, a read-only file system, a permission. The message names the file, the
    operating system's reason and what to do; nothing half-written is left behind."""


def describe_os_error(exc: BaseException, action: str, path: object = None) -> str:
    """One sentence for an ``OSError`` (or sqlite's / safetensors' I/O errors): what failed (``action``),
    where (``path``, else the error's own file name), the system's reason and how to fix it."""
    where = path if path is not None else getattr(exc, "filename", None)
    code = getattr(exc, "errno", None)
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    text = str(exc).lower()
    if code in (errno_mod.ENOSPC, errno_mod.EDQUOT) or "disk is full" in text or "no space" in text:
        fix = "free space on that file system (or write elsewhere) and run the command again"
    elif code == errno_mod.EROFS or "read-only" in text or "readonly" in text:
        fix = "write to a writable folder (copy the data there) or remount the file system read-write"
    elif code in (errno_mod.EACCES, errno_mod.EPERM):
        fix = "check the permissions of that path (or write to a folder you own) and run the command again"
    elif code == errno_mod.EIO or "i/o error" in text:
        fix = "the disk may be failing: check it (`dmesg`), then run `mmgrid registry verify ROOT` on any registry there"
    else:
        fix = "check that path and its file system, then run the command again"
    at = f" ({where})" if where else ""
    return f"{action}{at} failed: {reason}; {fix}."


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


class PluginError(MmgridError, RuntimeError):
    """A registered extension (merge method, paradigm, study) cannot be used: an installed
    distribution's entry point fails to import or does not hold what its group takes, or a name is
    registered twice by two different sources (a built-in and a plugin, or two plugins). The message
    names the name, both sources (the distribution and its entry point) and how to fix it."""


class PreflightError(ConfigError):
    """A check before any work failed (``mmgrid build`` / ``sweep`` / ``calibrate``): a model folder that
    is missing, a size that does not fit the data, a device that is not there, too little disk, an
    unreachable Ray cluster. Every failed check is listed (``failures``: ``(check, message)`` pairs),
    each with its fix; nothing was trained or written."""

    def __init__(self, command: str, failures: list[tuple[str, str]]) -> None:
        self.command, self.failures = command, list(failures)
        lines = "\n  ".join(f"[{check}] {msg}" for check, msg in self.failures)
        n = len(self.failures)
        super().__init__(f"mmgrid {command}: {n} preflight check{'s' if n != 1 else ''} failed before any work; "
                         f"nothing was trained or written:\n  {lines}")

    @property
    def checks(self) -> list[str]:
        """The names of the failed checks, in order (a check may fail more than once)."""
        return [c for c, _ in self.failures]
