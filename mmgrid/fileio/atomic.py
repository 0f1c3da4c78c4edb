"""Writes that readers see whole: the one home of a rename into place (``os.replace``).

A file is written to a temporary file on the same file system (a ``tmp_dir`` the caller
names, such as a registry's ``tmp/``, else the target's own folder), flushed (and fsynced
where ``durable``) and renamed over its final name: a reader sees the old state or the whole
new file. A writer killed before the rename leaves its temporary file behind, named
``.<final name>.<pid>.<8 hex>.tmp`` (:func:`temp_path`); nothing reads such a file. A folder
is built beside its final name and swapped in with renames only (:func:`swap_dir`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"


def temp_path(tmp_dir: Path, final_name: str) -> Path:
    """A fresh temporary file name in ``tmp_dir`` for a write whose result will be called ``final_name``."""
    return Path(tmp_dir) / f".{final_name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"


def fsync_dir(path: Path) -> None:
    """Make a rename durable (POSIX); silently skipped where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush a written file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(src: Path, dst: Path, durable: bool = False) -> None:
    """Rename ``src`` over ``dst`` (atomic on one file system: ``dst`` is the old or the new one, never
    half); ``durable``: the rename is on disk when this returns (its folder fsynced)."""
    os.replace(src, dst)
    if durable:
        fsync_dir(Path(dst).parent)


def atomic_write(path: Path, data: bytes, tmp_dir: Path | None = None, durable: bool = True,
                 before_rename: Callable[[], None] | None = None, exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` so that readers see the old state or the whole new file.

    The temporary file goes to ``tmp_dir`` (same file system as ``path``; default: ``path``'s folder).
    ``before_rename`` runs once the data is written, before it becomes visible (a test hook).
    ``exclusive``: the first writer wins. The file is hard-linked into place, which fails where ``path``
    already exists, so that writers racing on one name all end with the same file. Returns False where
    another writer's file was there first (and is kept). On a filesystem without hard links, it falls back
    to a rename (the last writer wins)."""
    path = Path(path)
    tmp_dir = path.parent if tmp_dir is None else Path(tmp_dir)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(tmp_dir, path.name)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if before_rename is not None:
            before_rename()
        path.parent.mkdir(parents=True, exist_ok=True)
        if exclusive and _link_first(tmp, path) is False:
            tmp.unlink(missing_ok=True)
            return False
        if tmp.exists():
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)
    return True


def _link_first(tmp: Path, path: Path) -> bool | None:
    """Hard-link ``tmp`` to ``path`` and remove ``tmp``: True; False where ``path`` exists already; None where
    the filesystem cannot link (``tmp`` is then left for a rename)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError:
        return None
    tmp.unlink(missing_ok=True)
    return True


@contextmanager
def atomic_output(path: Path, durable: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that takes a file name (``safetensors``' ``save_file``,
    ``Path.write_text``): renamed over ``path`` when the block ends, removed when it raises."""
    path = Path(path)
    tmp = temp_path(path.parent, path.name)
    try:
        yield tmp
        if durable:
            fsync_file(tmp)
        replace(tmp, path, durable)
    finally:
        tmp.unlink(missing_ok=True)


def swap_dir(tmp: Path, out: Path) -> None:
    """Put the complete folder ``tmp`` at ``out`` with renames only: a reader sees the old ``out`` (a
    folder or file, or nothing) or the new one, never half. The old one is moved aside first and removed
    after the swap."""
    tmp, out = Path(tmp), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    trash = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists() or out.is_symlink():
        os.replace(out, trash)
    os.replace(tmp, out)
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)


def publish_file(tmp: Path, path: Path, durable: bool = True) -> None:
    """Rename the complete file ``tmp`` over ``path``, keeping the cost of the file it replaces off the call.

    Replacing a file frees its page cache in the replacing call (0.1-0.4 s per GB): the old file is held
    open across the rename and closed on a background thread. A non-durable write over an existing
    regular file is an exchange (:func:`_exchange`), then the old file is removed from ``tmp``."""
    tmp, path = Path(tmp), Path(path)
    try:
        old = os.open(path, os.O_RDONLY)
    except OSError:
        old = None
    regular = old is not None and stat.S_ISREG(os.fstat(old).st_mode)
    if regular and not durable and _exchange(tmp, path):
        tmp.unlink()  # now the old file; its pages are freed when ``old`` closes
    else:
        os.replace(tmp, path)
    if old is not None:
        threading.Thread(target=os.close, args=(old,), daemon=True).start()


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where that
    is not available, and the caller renames instead.

    Used for non-durable writes over an existing file: ext4 (``auto_da_alloc``) starts
    writing a file's data to disk when it is renamed over another one, which doubles
    the cost of rewriting a large file into the page cache. An exchange is not such a
    rename, and readers still see either the old complete file or the new one.
    """
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _RENAMEAT2 = libc.renameat2
        except (OSError, AttributeError):
            _RENAMEAT2 = False
    if _RENAMEAT2 is False:
        return False
    at_fdcwd, rename_exchange = -100, 2
    return _RENAMEAT2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


_RENAMEAT2: Any = None
