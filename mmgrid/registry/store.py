"""Content-addressed storage: one safetensors blob per tensor, one raw blob per small file.

Layout under the registry root::

    blobs/ab/ab12...ef.safetensors   one tensor, stored under the key "t"; name = sha256 of the file
    files/ab/ab12...ef               config.json, tokenizer.json, ... ; name = sha256 of the bytes
    verified/ab/ab12...ef            a blob's verification record (see verified.py)
    tmp/                             temporary files (same file system, so rename is atomic)

Every write goes to ``tmp/``, is fsynced and renamed into place (``mmgrid.fileio.atomic``): a killed
writer leaves at most a stray temporary file, never a blob that reads back as valid.
A blob is hashed on its first use in a process unless its verification record vouches
for its unchanged stat identity (``verified.py``); small files are hashed on every read.
Every hash that names a path is checked to be 64 hex digits first, so no stored hash can
point outside the registry.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import mmgrid.registry.verified as verified
from mmgrid.fileio.atomic import atomic_write, fsync_dir, fsync_file, replace, temp_path
from mmgrid.registry.blobfmt import TENSOR_KEY, blob_header, from_blob, tensor_bytes
from mmgrid.registry.contain import check_inside
from mmgrid.registry.errors import CorruptBlobError, MissingBlobError, UnsafePathError
from mmgrid.registry.fsio import pause_point, sha256_file, temp_files
from mmgrid.registry.names import is_sha256

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["BlobStore", "TENSOR_KEY", "forget_verified", "pause_point",
           "sha256_file", "tensor_bytes"]


def forget_verified(persistent: bool = True) -> None:
    """Forget which blobs were checked, so the next use re-hashes them (tests, benchmarks).

    ``persistent=False`` forgets only this process's memory, as a new process starts
    (verification records on disk still count)."""
    verified.forget(persistent)


def _utf8(path: Path) -> bool:
    """True when ``path`` is valid UTF-8 (a folder name in another encoding is not)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Batch:
    """Blob writes of one put: hashed and written by a thread pool, made durable together."""

    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.pending: dict[str, tuple[Path, Path]] = {}  # sha -> (temp file, final path)
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(2 * workers)  # bounds tensors held in memory


class BlobStore:
    """Tensor blobs and file blobs under one root."""

    def __init__(self, root: Path, durable: bool = True, workers: int | None = None) -> None:
        self.root = Path(root)
        self.tmp = self.root / "tmp"
        self.durable = durable
        self.workers = workers or min(8, (os.cpu_count() or 2) + 2)
        self.records = verified.Records(self.root, self.tmp)
        self._local = threading.local()  # each thread batches its own puts

    # -- paths -----------------------------------------------------------------
    @staticmethod
    def _checked(sha: str) -> str:
        if not is_sha256(sha):
            raise UnsafePathError(
                f"blob reference {sha!r} is not a sha256 (64 lowercase hex digits), so it cannot name a file "
                "inside the registry; the manifest holding it was edited or corrupted: restore it from a backup "
                "(`mmgrid registry verify ROOT` lists every bad manifest)."
            )
        return sha

    def blob_path(self, sha: str) -> Path:
        return self.root / "blobs" / sha[:2] / f"{self._checked(sha)}.safetensors"

    def file_path(self, sha: str) -> Path:
        return self.root / "files" / sha[:2] / self._checked(sha)

    # -- batches -----------------------------------------------------------------
    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group the blob writes of one checkpoint.

        Inside the block blobs are hashed and written to temporary files by a thread pool
        (sha256 and file writes release the GIL). On a clean exit every temporary file is
        fsynced (in parallel, so the file system can share journal commits), renamed into
        place, and the folders fsynced. A blob never sits under its final name before its
        bytes are durable, and a failed block leaves no blob and no temporary file.
        """
        if getattr(self._local, "batch", None) is not None:  # nested: the outer block flushes
            yield
            return
        b = _Batch(self.workers)
        self._local.batch = b
        try:
            yield
            b.pool.shutdown(wait=True)
            self._flush(b)
        except BaseException:
            b.pool.shutdown(wait=True, cancel_futures=True)
            for tmp, _ in b.pending.values():
                tmp.unlink(missing_ok=True)
            raise
        finally:
            self._local.batch = None

    def _flush(self, b: _Batch) -> None:
        if not b.pending:
            return
        with ThreadPoolExecutor(max_workers=min(16, len(b.pending))) as pool:
            if self.durable:
                list(pool.map(fsync_file, [tmp for tmp, _ in b.pending.values()]))
            pause_point("blob_tmp_written")
            for tmp, final in b.pending.values():
                final.parent.mkdir(parents=True, exist_ok=True)
                replace(tmp, final)
            if self.durable:
                list(pool.map(fsync_dir, sorted({final.parent for _, final in b.pending.values()})))
        verified.mark(b.pending)  # we hashed these very bytes

    # -- writing ---------------------------------------------------------------
    def put_tensor(self, tensor: "torch.Tensor") -> tuple[str, int, bool]:
        """Store one tensor now; returns (sha256, size in bytes, written?) — False means deduplicated."""
        head, data = tensor_bytes(tensor)
        return self._put([head, data], self.blob_path)

    def submit_tensor(self, tensor: "torch.Tensor") -> "Future[tuple[str, int, bool]]":
        """Inside :meth:`batch`: store one tensor in the background; outside: at once."""
        b = getattr(self._local, "batch", None)
        if b is None:
            fut: Future = Future()
            fut.set_result(self.put_tensor(tensor))
            return fut
        b.slots.acquire()

        def job() -> tuple[str, int, bool]:
            try:
                head, data = tensor_bytes(tensor)
                return self._put([head, data], self.blob_path, b)
            finally:
                b.slots.release()

        return b.pool.submit(job)

    def put_file(self, data: bytes) -> tuple[str, int, bool]:
        return self._put([bytes(data)], self.file_path, getattr(self._local, "batch", None))

    def _put(self, parts: list, where, b: "_Batch | None" = None) -> tuple[str, int, bool]:
        h = hashlib.sha256()
        for part in parts:
            h.update(part)
        sha, size = h.hexdigest(), sum(len(p) for p in parts)
        path = where(sha)
        if path.exists():
            # Refresh mtime: gc's grace period then protects a blob a concurrent put reuses.
            try:
                os.utime(path)
            except OSError:
                pass
            return sha, size, False
        if b is None:
            atomic_write(path, b"".join(parts), self.tmp, self.durable)
            verified.mark({sha})  # we just hashed these very bytes
            return sha, size, True
        with b.lock:
            if sha in b.pending:  # the same tensor twice in one checkpoint (tied weights)
                return sha, size, False
            tmp = temp_path(self.tmp, path.name)
            b.pending[sha] = (tmp, path)
        self.tmp.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            for part in parts:
                fh.write(part)
        return sha, size, True

    # -- checking ----------------------------------------------------------------
    @staticmethod
    def _missing(sha: str, path: Path, where: str) -> MissingBlobError:
        return MissingBlobError(
            f"blob {sha} ({where}) is missing from {path.parent}; restore it from a backup or "
            "re-create the checkpoint (run `mmgrid registry verify ROOT` to list every affected checkpoint)."
        )

    def _corrupt(self, sha: str, got: str, path: Path, where: str) -> CorruptBlobError:
        verified.discard(sha)
        self.records.drop(sha)
        return CorruptBlobError(
            f"blob {path} ({where}) is corrupt: its sha256 is {got}, expected {sha}; restore it "
            "from a backup or re-create the checkpoint (`mmgrid registry verify ROOT` lists all)."
        )

    def _ensure_verified(self, sha: str, path: Path, where: str) -> None:
        """Hash the blob unless this process or a verification record already vouches for it.

        Threads checking one blob at once wait for a single hash.

        Raises:
            MissingBlobError, CorruptBlobError.
        """
        check_inside(self.root, path, f"blob ({where})")
        if verified.known(sha):
            return
        try:
            with verified.check_lock(sha):
                if verified.known(sha) or self.records.trusted(sha, path):
                    verified.mark({sha})
                    return
                try:
                    before, began = os.stat(path), time.time_ns()
                    got = sha256_file(path)
                except FileNotFoundError:
                    raise self._missing(sha, path, where) from None
                if got != sha:
                    raise self._corrupt(sha, got, path, where)
                self.records.write(sha, before, began, path)
                verified.mark({sha})
        finally:
            verified.release_lock(sha)

    def check(self, path: Path) -> bool:
        """Does the file at ``path`` still hash to its name? Always re-hashes (``verify``);
        refreshes a tensor blob's verification record, or drops it when the blob is corrupt."""
        sha = path.name.split(".")[0]
        before, began = os.stat(path), time.time_ns()
        ok = sha256_file(path) == sha
        if path.suffix == ".safetensors":
            if ok:
                self.records.write(sha, before, began, path)
            else:
                verified.discard(sha)
                self.records.drop(sha)
        return ok

    # -- reading ---------------------------------------------------------------
    def _read_verified(self, sha: str, path: Path, where: str) -> bytearray:
        check_inside(self.root, path, f"blob ({where})")
        try:
            with open(path, "rb") as fh:
                before, began = os.fstat(fh.fileno()), time.time_ns()
                data = bytearray(before.st_size)
                fh.readinto(data)
        except FileNotFoundError:
            raise self._missing(sha, path, where) from None
        got = hashlib.sha256(data).hexdigest()
        if got != sha:
            raise self._corrupt(sha, got, path, where)
        if path.suffix == ".safetensors":
            self.records.write(sha, before, began, path)
            verified.mark({sha})
        return data

    def locate_tensor(self, sha: str, where: str = "") -> tuple[Path, int]:
        """(blob path, byte offset of the tensor's data in it) for readers that read the
        data themselves: the merge's positioned reads, a sweep's memory map.

        The blob's hash is checked first, as :meth:`read_tensor` does on a process's first
        read (streamed in 4 MiB pieces, no copy kept), unless its verification record
        vouches for it.

        Raises:
            MissingBlobError, CorruptBlobError, UnsafePathError.
        """
        path = self.blob_path(sha)
        self._ensure_verified(sha, path, where)
        try:
            with open(path, "rb") as fh:
                n, _, _, start, _ = blob_header(lambda o, k: os.pread(fh.fileno(), k, o), path)
        except FileNotFoundError:
            verified.discard(sha)
            raise self._missing(sha, path, where) from None
        return path, 8 + n + start

    def read_tensor(self, sha: str, where: str = "", device: str = "cpu") -> "torch.Tensor":
        """Load one tensor; its first use in a process checks the hash (or its record)."""
        path = check_inside(self.root, self.blob_path(sha), f"blob ({where})")
        if not verified.known(sha) and not self.records.trusted(sha, path):
            tensor = from_blob(self._read_verified(sha, path, where), path)
            return tensor if device == "cpu" else tensor.to(device)
        verified.mark({sha})
        from safetensors import safe_open  # lazy: safetensors' torch bindings import torch

        try:
            if not _utf8(path):  # safe_open takes UTF-8 paths only (a registry under a non-UTF-8 folder name)
                with open(path, "rb") as fh:
                    data = bytearray(os.fstat(fh.fileno()).st_size)
                    fh.readinto(data)
                tensor = from_blob(data, path)
                return tensor if device == "cpu" else tensor.to(device)
            with safe_open(str(path), framework="pt", device=device) as fh:
                return fh.get_tensor(TENSOR_KEY)
        except FileNotFoundError:
            verified.discard(sha)
            return self.read_tensor(sha, where, device)

    def read_file(self, sha: str, where: str = "") -> bytes:
        """Small files are re-hashed on every read (cheap, and they are read rarely)."""
        return bytes(self._read_verified(sha, self.file_path(sha), where))

    # -- listing -----------------------------------------------------------------
    def iter_blobs(self) -> list[Path]:
        return sorted((self.root / "blobs").glob("*/*.safetensors"))

    def iter_files(self) -> list[Path]:
        return sorted((self.root / "files").glob("*/*"))

    def temp_files(self) -> list[Path]:
        """Temporary files in ``tmp/``: writes in flight, or left by a killed writer."""
        return temp_files(self.tmp)
