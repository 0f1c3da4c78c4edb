"""sha256 of input files, reusing a previous run's hash when size and mtime are unchanged."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Streaming sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def hash_inputs(paths: list[Path], previous: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Path → {sha256, size, mtime_ns}; a file whose size and mtime match ``previous`` is not re-read.

    Args:
        paths: input files.
        previous: the ``inputs`` mapping of an earlier manifest (may be empty).
    """
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(paths):
        st = p.stat()
        key = str(p.resolve())
        old = previous.get(key)
        if old and old.get("size") == st.st_size and old.get("mtime_ns") == st.st_mtime_ns:
            digest = old["sha256"]
        else:
            digest = sha256_file(p)
        out[key] = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out
