"""File-system primitives of the registry: atomic writes, fsync, temporary files, hashing.

Every write goes to a temporary file in the registry's ``tmp/`` folder (same file system,
so the final rename is atomic), is fsynced and renamed into place: readers see the old
state or the whole new file. A writer killed before the rename leaves its temporary file
behind, named ``.<final name>.<pid>.<8 hex>.tmp``; nothing reads those files, ``verify``
lists them and ``gc`` removes them.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path

TMP_SUFFIX = ".tmp"
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


def temp_path(tmp_dir: Path, final_name: str) -> Path:
    """A fresh temporary file name for a write whose result will be called ``final_name``."""
    return tmp_dir / f".{final_name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"


def temp_files(tmp_dir: Path) -> list[Path]:
    """Every file in ``tmp_dir`` (all of them temporary: writes in flight or left by a kill)."""
    if not tmp_dir.is_dir():
        return []
    return sorted(p for p in tmp_dir.iterdir() if p.is_file() or p.is_symlink())


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
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, tmp_dir: Path, durable: bool = True, pause: str | None = None,
                 exclusive: bool = False) -> bool:
    """Write ``data`` to ``path`` so that readers see the old state or the whole new file.

    ``exclusive``: the first writer wins. The file is hard-linked into place, which fails where ``path``
    already exists, so that writers racing on one name all end with the same file. Returns False where
    another writer's file was there first (and is kept). On a filesystem without hard links, it falls back
    to a rename (the last writer wins)."""
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(tmp_dir, path.name)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if pause:
            pause_point(pause)
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


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 4 MiB pieces into one reused buffer."""
    h = hashlib.sha256()
    buf = bytearray(1 << 22)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while k := fh.readinto(buf):
            h.update(view[:k])
    return h.hexdigest()
