"""Writing safely: read-only registries, first writes, the writers' lock, OS errors (a mixin of
:class:`~mmgrid.registry.api.Registry`).

Every method that writes is decorated with :func:`writes`: it is refused on a read-only
registry before any work (:class:`ReadOnlyRegistryError`), creates the registry's folders on
the first write (and removes them again if that write fails: a failed command leaves no
skeleton), holds the writers' lock (``locks.py``: gc waits for it), and turns an ``OSError``
(a full disk) into :class:`RegistryStorageError` naming the registry and the fix.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from mmgrid.errors import MmgridError, RegistryError, describe_os_error
from mmgrid.registry.errors import CorruptIndexError, ReadOnlyRegistryError, RegistryStorageError
from mmgrid.registry.index import Index
from mmgrid.registry.locks import WritersLock

FOLDERS = ("blobs", "files", "manifests", "aliases", "results", "tmp")  # peruser/, verified/: on first use
F = TypeVar("F", bound=Callable[..., Any])


def check_root(root: Path) -> Path:
    """``root`` if it is, or can become, a registry folder; else a named error (nothing is created)."""
    if root.exists() and not root.is_dir():
        raise RegistryError(f"registry root {root} is a file; give a folder (it is created if missing).")
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise RegistryError(f"cannot create the registry folders under {root}: {probe} is a file, not a folder; "
                            "give a registry folder whose parents are folders.")
    return root


def read_only_reason(root: Path) -> str | None:
    """Why the registry at ``root`` cannot be written (None: it can). ``os.access`` sees a read-only
    mount (for every user) and missing write permission; a registry not created yet is judged by
    the nearest folder that exists."""
    probe = Path(root)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        return f"{probe} is not writable (a read-only mount, or no write permission)"
    index = Path(root) / "index.sqlite"
    if index.exists() and not os.access(index, os.W_OK):
        return f"{index} is not writable (no write permission)"
    return None


def _storage_error(exc: OSError, action: str, root: Path) -> MmgridError:
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        what = describe_os_error(exc, f"{action} in the registry {root}")
        return ReadOnlyRegistryError(f"{what} The registry {root} cannot be written here: read commands work as they "
                                     "are; write to a writable copy (`cp -r`) or remount it read-write.")
    err = RegistryStorageError(describe_os_error(exc, f"{action} in the registry {root}") + " Nothing half-written "
                               f"was kept: run it again once fixed (`mmgrid registry gc {root}` removes unreferenced "
                               "blobs and temporary files).")
    err.errno = exc.errno
    return err


def writes(action: str) -> Callable[[F], F]:
    """Decorate a Registry method that writes: refused on a read-only registry before any work;
    creates the registry's folders on first use; holds the writers' lock (gc waits for it);
    operating-system errors (a full disk) become :class:`RegistryStorageError`."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: "Guarded", *args: Any, **kwargs: Any) -> Any:
            self.require_writable(action)
            if self._index_broken is not None and fn.__name__ != "reindex":
                raise self._index_broken
            with self._guard(action):
                self._ensure_created()
                try:
                    with self._writers.shared():
                        out = fn(self, *args, **kwargs)
                except BaseException:
                    self._undo_created()
                    raise
                if not getattr(self._writers._local, "depth", 0):  # the outermost write succeeded
                    self._made = None
                return out

        return wrapper  # type: ignore[return-value]

    return deco


class Guarded:
    """Read-only detection, creation on first write and the error guard of a registry."""

    root: Path
    indexed: bool
    read_only_reason: str | None
    _created: bool
    _made: Path | None
    _index: Index
    _index_broken: CorruptIndexError | None
    _writers: WritersLock

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    def require_writable(self, action: str = "this command") -> None:
        """Raise :class:`ReadOnlyRegistryError` now, before any work, if the registry cannot be written.

        Commands that compute before they write (a merge, an evaluation that records) call this first."""
        if self.read_only_reason is not None:
            raise ReadOnlyRegistryError(
                f"registry {self.root} is read-only ({self.read_only_reason}), and {action} writes to it. Read "
                "commands (query, results, show, lineage, eval --no-record, registry verify) work as they are; to "
                "write, copy it somewhere writable (`cp -r`) or remount it read-write.")

    @contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        try:
            yield
        except MmgridError:
            raise
        except OSError as exc:
            raise _storage_error(exc, action, self.root) from exc

    def _ensure_created(self) -> None:
        """Make the registry's folders (first write) and switch to its index file."""
        if self._created:
            return
        top = self.root  # the outermost folder this creates (removed again if the first write fails)
        while not top.parent.exists() and top.parent != top.parent.parent:
            top = top.parent
        self._made = top if not top.exists() else None
        for sub in FOLDERS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        if self.indexed and self._index.path == ":memory:":
            self._index.close()
            self._index = Index(self.root, self.root / "index.sqlite")
            self._index.sync()
        self._created = True

    def _undo_created(self) -> None:
        """After a failed first write: remove the empty skeleton :meth:`_ensure_created` made (a failed
        command leaves nothing behind). Only a registry still without any manifest or result."""
        made, self._made = getattr(self, "_made", None), None
        if made is None or any((self.root / "results").glob("*.jsonl")) \
                or any((self.root / "manifests").glob("*/*.json")):
            return
        self._index.close()
        shutil.rmtree(made, ignore_errors=True)
        self._created = False
        self._index = Index(self.root, ":memory:")
