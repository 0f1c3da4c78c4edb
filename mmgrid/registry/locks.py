"""The writers' lock: ``gc`` never runs while a write is in flight (git's ``gc.pid`` idea, made a
lock every writer respects).

Every write of the registry (a ``put`` from its first blob to its manifest, a group of recorded
evaluations with their per-user file, an alias, an import) holds a *shared* ``flock`` on
``ROOT/writers.lock``; ``gc`` takes it *exclusively*, so it waits for the writes in flight to
finish and writes wait for it. Whatever its ``--grace``, gc therefore never sees a put's blobs
before their manifest, nor a per-user file before its records. ``flock`` works across
processes and threads (each hold opens its own descriptor) and, on Linux, over NFS (as POSIX
locks). The lock file is empty and stays; a reader never takes the lock.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from mmgrid.registry.errors import RegistryError, RegistryLockedError

LOCK_NAME = "writers.lock"


class WritersLock:
    """The writers' lock of one registry root (re-entrant within a thread)."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LOCK_NAME
        self._local = threading.local()

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Held by a write; blocks while gc runs."""
        if getattr(self._local, "depth", 0):
            self._local.depth += 1
            try:
                yield
            finally:
                self._local.depth -= 1
            return
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            self._local.depth = 1
            try:
                yield
            finally:
                self._local.depth = 0
        finally:
            os.close(fd)  # releases the lock

    @contextmanager
    def exclusive(self, timeout_s: float = 600.0) -> Iterator[None]:
        """Held by gc: waits (up to ``timeout_s``) for every write in flight to finish."""
        if getattr(self._local, "depth", 0):
            raise RegistryError("gc was called inside a write of the same registry (a put or record in progress "
                                "in this thread); run gc after it.")
        fd = self._open()
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RegistryLockedError(
                            f"gc waited {timeout_s:.0f} s for writers of {self.path.parent} (puts, recorded "
                            f"evaluations) to finish; they hold {self.path}. Run gc when the build or sweep "
                            "is done.") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)
