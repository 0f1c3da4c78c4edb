"""Which blobs were checked: in this process (a set of hashes), and across processes by
the blob file's stat identity, as git's index records clean files.

A blob's first use in a process re-hashes it unless a *verification record* vouches for
it: ``verified/ab/<sha256>`` holds one line ``v1 size mtime_ns inode ctime_ns checked_ns``,
written (atomically, without fsync: a lost record only costs a re-hash) after the blob's
bytes hashed to its name. A record is trusted only while

* the blob's current (size, mtime_ns, inode, ctime_ns) equal the recorded ones: any
  rewrite, copy, ``touch`` or in-place edit changes ctime at least, which no user can set;
* the blob had been last changed at least ``RACY_NS`` before the check began (the
  "racily clean" rule of git: a change within the same clock tick as the check would not
  move the timestamps; such blobs are re-hashed and not recorded);
* it was written after the last :func:`forget` of this process.

On a network file system the timestamps come from the server's clock and the check time
from this host's: a server clock ahead only means blobs are never recorded (re-hashed as
before); one more than 2 s behind weakens only the same-tick case of the second rule.

``mmgrid registry verify`` never consults records (it re-hashes everything) and refreshes
them; ``gc`` removes records whose blob is gone. Records are a cache: deleting the
``verified/`` folder is always safe.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterable
from pathlib import Path

from mmgrid.fileio.atomic import atomic_write

RACY_NS = 2_000_000_000  # coarse timestamps (network file systems) stay below 2 s
FOLDER = "verified"

_LOCK = threading.Lock()
_IN_PROCESS: set[str] = set()  # blob hashes checked (or just written) by this process
_CHECKING: dict[str, threading.Lock] = {}  # blob hash -> lock held while one thread checks it
_EPOCH_NS = 0  # records written before this time are ignored (see forget)


def identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """The stat identity of a file: (size, mtime_ns, inode, ctime_ns)."""
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns


def known(sha: str) -> bool:
    return sha in _IN_PROCESS


def mark(shas: Iterable[str]) -> None:
    """Remember hashes this process checked (or wrote from bytes it hashed itself)."""
    with _LOCK:
        _IN_PROCESS.update(shas)


def discard(sha: str) -> None:
    with _LOCK:
        _IN_PROCESS.discard(sha)


def check_lock(sha: str) -> threading.Lock:
    """The lock threads checking one blob share (one hash per blob, however many readers)."""
    with _LOCK:
        return _CHECKING.setdefault(sha, threading.Lock())


def release_lock(sha: str) -> None:
    with _LOCK:
        _CHECKING.pop(sha, None)


def forget(persistent: bool = True) -> None:
    """Forget what this process checked. ``persistent=True`` also stops trusting every
    verification record written before now (a test or a benchmark forcing re-checks);
    ``False`` only clears this process's memory (as a new process starts)."""
    global _EPOCH_NS
    with _LOCK:
        _IN_PROCESS.clear()
        if persistent:
            _EPOCH_NS = time.time_ns()


class Records:
    """The verification records of one registry root."""

    def __init__(self, root: Path, tmp: Path) -> None:
        self.dir = Path(root) / FOLDER
        self.tmp = tmp

    def path(self, sha: str) -> Path:
        return self.dir / sha[:2] / sha

    def trusted(self, sha: str, blob: Path) -> bool:
        """Does a record vouch for the blob's current bytes (rules in the module docstring)?"""
        try:
            fields = self.path(sha).read_text().split()
            st = os.stat(blob)
        except (OSError, UnicodeDecodeError):
            return False
        if len(fields) != 6 or fields[0] != "v1":
            return False
        try:
            size, mtime, ino, ctime, checked = (int(x) for x in fields[1:])
        except ValueError:
            return False
        return (size, mtime, ino, ctime) == identity(st) and checked >= _EPOCH_NS and max(mtime, ctime) < checked - RACY_NS

    def write(self, sha: str, before: os.stat_result, checked_ns: int, blob: Path) -> None:
        """Record that ``blob`` hashed to ``sha`` in a check that began at ``checked_ns``, if
        its identity did not move during the check and it is not racily clean."""
        try:
            after = os.stat(blob)
        except OSError:
            return
        if identity(after) != identity(before) or max(before.st_mtime_ns, before.st_ctime_ns) >= checked_ns - RACY_NS:
            return
        line = "v1 " + " ".join(str(x) for x in (*identity(before), checked_ns)) + "\n"
        try:
            atomic_write(self.path(sha), line.encode(), self.tmp, durable=False)
        except OSError:
            pass  # a read-only registry: every process re-hashes, as before records existed

    def drop(self, sha: str) -> None:
        try:
            self.path(sha).unlink(missing_ok=True)
        except OSError:
            pass

    def all(self) -> list[Path]:
        return sorted(self.dir.glob("*/*")) if self.dir.is_dir() else []
