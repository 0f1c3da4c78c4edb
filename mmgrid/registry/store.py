"""Content-addressed storage: one safetensors blob per tensor, one raw blob per small file.

Layout under the registry root::

    blobs/ab/ab12...ef.safetensors   one tensor, stored under the key "t"; name = sha256 of the file
    files/ab/ab12...ef               config.json, tokenizer.json, ... ; name = sha256 of the bytes
    tmp/                             temporary files (same file system, so rename is atomic)

Every write goes to ``tmp/``, is fsynced and renamed into place: a killed writer leaves
at most a stray temporary file, never a blob that reads back as valid. Reads check the
hash the first time a blob is read in a process (``_VERIFIED``), then trust it.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from mmgrid.registry.errors import CorruptBlobError, MissingBlobError

if TYPE_CHECKING:  # pragma: no cover
    import torch

TENSOR_KEY = "t"
_VERIFIED: set[str] = set()  # blob hashes checked in this process
_VERIFIED_LOCK = threading.Lock()

# safetensors dtype names <-> torch dtype attribute names
ST_TO_TORCH = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "U16": "uint16", "U32": "uint32", "U64": "uint64",
}


def pause_point(name: str) -> None:
    """Test hook: sleep at a named point so a test can SIGKILL a writer there.

    Set ``MMGRID_REGISTRY_PAUSE=<point>`` (and optionally ``MMGRID_REGISTRY_PAUSE_FILE``,
    touched when the point is reached) in the writer's environment. No effect otherwise.
    """
    if os.environ.get("MMGRID_REGISTRY_PAUSE") != name:
        return
    flag = os.environ.get("MMGRID_REGISTRY_PAUSE_FILE")
    if flag:
        Path(flag).write_text(name)
    time.sleep(float(os.environ.get("MMGRID_REGISTRY_PAUSE_S", "60")))


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


def atomic_write(path: Path, data: bytes, tmp_dir: Path, durable: bool = True, pause: str | None = None) -> None:
    """Write ``data`` to ``path`` so that readers see the old state or the whole new file."""
    tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = tmp_dir / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if pause:
            pause_point(pause)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


class BlobStore:
    """Tensor blobs and file blobs under one root."""

    def __init__(self, root: Path, durable: bool = True) -> None:
        self.root = Path(root)
        self.tmp = self.root / "tmp"
        self.durable = durable

    # -- paths -----------------------------------------------------------------
    def blob_path(self, sha: str) -> Path:
        return self.root / "blobs" / sha[:2] / f"{sha}.safetensors"

    def file_path(self, sha: str) -> Path:
        return self.root / "files" / sha[:2] / sha

    # -- writing ---------------------------------------------------------------
    def put_tensor(self, tensor: "torch.Tensor") -> tuple[str, int, bool]:
        """Store one tensor; returns (sha256, size in bytes, written?) — False means deduplicated."""
        from safetensors.torch import save

        data = save({TENSOR_KEY: tensor.detach().cpu().contiguous()})
        return self._put(data, self.blob_path, pause="blob_tmp_written")

    def put_file(self, data: bytes) -> tuple[str, int, bool]:
        return self._put(bytes(data), self.file_path, pause=None)

    def _put(self, data: bytes, where, pause: str | None) -> tuple[str, int, bool]:
        sha = hashlib.sha256(data).hexdigest()
        path = where(sha)
        if path.exists():
            # Refresh mtime: gc's grace period then protects a blob a concurrent put reuses.
            try:
                os.utime(path)
            except OSError:
                pass
            return sha, len(data), False
        atomic_write(path, data, self.tmp, self.durable, pause=pause)
        with _VERIFIED_LOCK:
            _VERIFIED.add(sha)  # we just hashed these very bytes
        return sha, len(data), True

    # -- reading ---------------------------------------------------------------
    def _read_verified(self, sha: str, path: Path, where: str) -> bytes:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise MissingBlobError(
                f"blob {sha} ({where}) is missing from {path.parent}; restore it from a backup or "
                "re-create the checkpoint (run `mmgrid registry verify ROOT` to list every affected checkpoint)."
            ) from None
        got = hashlib.sha256(data).hexdigest()
        if got != sha:
            raise CorruptBlobError(
                f"blob {path} ({where}) is corrupt: its sha256 is {got}, expected {sha}; restore it "
                "from a backup or re-create the checkpoint (`mmgrid registry verify ROOT` lists all)."
            )
        with _VERIFIED_LOCK:
            _VERIFIED.add(sha)
        return data

    def read_tensor(self, sha: str, where: str = "", device: str = "cpu") -> "torch.Tensor":
        """Load one tensor; the first read in a process checks the hash."""
        path = self.blob_path(sha)
        if sha not in _VERIFIED:
            from safetensors.torch import load

            tensor = load(self._read_verified(sha, path, where))[TENSOR_KEY]
            return tensor if device == "cpu" else tensor.to(device)
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt", device=device) as fh:
                return fh.get_tensor(TENSOR_KEY)
        except FileNotFoundError:
            with _VERIFIED_LOCK:
                _VERIFIED.discard(sha)
            return self.read_tensor(sha, where, device)

    def read_file(self, sha: str, where: str = "") -> bytes:
        """Small files are re-hashed on every read (cheap, and they are read rarely)."""
        return self._read_verified(sha, self.file_path(sha), where)

    def check(self, path: Path) -> bool:
        """Does the file at ``path`` still hash to its name?"""
        sha = path.name.split(".")[0]
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
        return h.hexdigest() == sha

    def iter_blobs(self) -> list[Path]:
        return sorted((self.root / "blobs").glob("*/*.safetensors"))

    def iter_files(self) -> list[Path]:
        return sorted((self.root / "files").glob("*/*"))


def forget_verified() -> None:
    """Forget which blobs were checked (tests use it to force a re-check)."""
    with _VERIFIED_LOCK:
        _VERIFIED.clear()
