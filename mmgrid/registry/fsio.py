"""File-system helpers of the registry: the kill-test hook, its temporary files, hashing.

Every write goes through :func:`mmgrid.fileio.atomic.atomic_write` into the registry's
``tmp/`` folder (same file system, so the final rename is atomic) and is renamed into place:
readers see the old state or the whole new file. A writer killed before the rename leaves its
temporary file behind (``fileio.atomic.temp_path``); nothing reads those files, ``verify``
lists them (:func:`temp_files`) and ``gc`` removes them.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

_PASSED: dict[str, int] = {}  # pause_point: times each point was reached in this process


def pause_point(name: str) -> None:
    """Test hook: sleep at a named point so a test can SIGKILL a writer there.

    Set ``MMGRID_REGISTRY_PAUSE=<point>`` (and optionally ``MMGRID_REGISTRY_PAUSE_FILE``,
    touched when the point is reached, and ``MMGRID_REGISTRY_PAUSE_SKIP=<n>``: pass the point
    n times first) in the writer's environment. No effect otherwise.
    """
    if os.environ.get("MMGRID_REGISTRY_PAUSE") != name:
        return
    _PASSED[name] = _PASSED.get(name, 0) + 1
    if _PASSED[name] <= int(os.environ.get("MMGRID_REGISTRY_PAUSE_SKIP", "0")):
        return
    flag = os.environ.get("MMGRID_REGISTRY_PAUSE_FILE")
    if flag:
        Path(flag).write_text(name)
    time.sleep(float(os.environ.get("MMGRID_REGISTRY_PAUSE_S", "60")))


def temp_files(tmp_dir: Path) -> list[Path]:
    """Every file in ``tmp_dir`` (all of them temporary: writes in flight or left by a kill)."""
    if not tmp_dir.is_dir():
        return []
    return sorted(p for p in tmp_dir.iterdir() if p.is_file() or p.is_symlink())


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 4 MiB pieces into one reused buffer."""
    h = hashlib.sha256()
    buf = bytearray(1 << 22)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while k := fh.readinto(buf):
            h.update(view[:k])
    return h.hexdigest()
