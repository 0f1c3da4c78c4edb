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
import json
import os
import struct
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from mmgrid.registry.errors import CorruptBlobError, MissingBlobError

if TYPE_CHECKING:  # pragma: no cover
    import torch

TENSOR_KEY = "t"
_VERIFIED: set[str] = set()  # blob hashes checked in this process
_VERIFIED_LOCK = threading.Lock()
_CHECKING: dict[str, threading.Lock] = {}  # blob hash -> lock held while one thread checks it

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


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
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


def tensor_bytes(tensor: "torch.Tensor") -> tuple[bytes, memoryview]:
    """A one-tensor safetensors file as (header, data view), without copying the data.

    The header is the one ``safetensors.torch.save({"t": tensor})`` writes (JSON, spaces
    to an 8-byte boundary), so a blob's bytes do not depend on which path wrote them.
    """
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    info = {TENSOR_KEY: {"dtype": _st_name(t.dtype), "shape": list(t.shape), "data_offsets": [0, t.numel() * t.element_size()]}}
    head = json.dumps(info, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    data = t.reshape(-1).view(torch_uint8()).numpy().data if t.numel() else memoryview(b"")
    return struct.pack("<Q", len(head)) + head, data


def torch_uint8() -> "torch.dtype":
    import torch

    return torch.uint8


def _st_name(dtype: "torch.dtype") -> str:
    from mmgrid.errors import RegistryError

    name = str(dtype).removeprefix("torch.")
    for st, tn in ST_TO_TORCH.items():
        if tn == name:
            return st
    raise RegistryError(f"tensor dtype {dtype} cannot be stored in safetensors; cast it (e.g. to float32).")


def _blob_header(read: Callable[[int, int], bytes], path: Path) -> tuple[int, str, tuple[int, ...], int, int]:
    """(header length n, torch dtype name, shape, start, end) of a one-tensor safetensors
    blob; ``read(offset, size)`` gives its bytes. The data lies at [8 + n + start, 8 + n + end).

    Raises:
        CorruptBlobError: the bytes are not such a blob.
    """
    try:
        (n,) = struct.unpack("<Q", read(0, 8))
        info = json.loads(read(8, n))[TENSOR_KEY]
        start, end = (int(x) for x in info["data_offsets"])
        return n, ST_TO_TORCH[info["dtype"]], tuple(info["shape"]), start, end
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise CorruptBlobError(f"blob {path} is not a one-tensor safetensors file ({exc!r}); re-create the checkpoint.") from exc


def _from_blob(buf: bytearray, path: Path) -> "torch.Tensor":
    """The tensor of a verified one-tensor safetensors blob, sharing ``buf``'s memory (no copy)."""
    import torch

    n, dtype_name, shape, start, end = _blob_header(lambda o, k: bytes(buf[o:o + k]), path)
    dtype = getattr(torch, dtype_name)
    count = end - start
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(buf, dtype=torch.uint8, count=count, offset=8 + n + start)
    return flat.view(dtype).reshape(shape)


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
        self._local = threading.local()  # each thread batches its own puts

    # -- paths -----------------------------------------------------------------
    def blob_path(self, sha: str) -> Path:
        return self.root / "blobs" / sha[:2] / f"{sha}.safetensors"

    def file_path(self, sha: str) -> Path:
        return self.root / "files" / sha[:2] / sha

    # -- batches -----------------------------------------------------------------
    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group the blob writes of one checkpoint.

        Inside the block blobs are hashed and written to temporary files by a thread pool
        (sha256 and file writes release the GIL). On a clean exit every temporary file is
        fsynced (in parallel, so the file system can share journal commits), renamed into
        place, and the folders fsynced. A blob never sits under its final name before its
        bytes are durable, and a failed block leaves no blob at all.
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
                list(pool.map(_fsync_file, [tmp for tmp, _ in b.pending.values()]))
            pause_point("blob_tmp_written")
            for tmp, final in b.pending.values():
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, final)
            if self.durable:
                list(pool.map(fsync_dir, sorted({final.parent for _, final in b.pending.values()})))
        with _VERIFIED_LOCK:
            _VERIFIED.update(b.pending)

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
            with _VERIFIED_LOCK:
                _VERIFIED.add(sha)  # we just hashed these very bytes
            return sha, size, True
        with b.lock:
            if sha in b.pending:  # the same tensor twice in one checkpoint (tied weights)
                return sha, size, False
            tmp = self.tmp / f".{sha}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
            b.pending[sha] = (tmp, path)
        self.tmp.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            for part in parts:
                fh.write(part)
        return sha, size, True

    # -- reading ---------------------------------------------------------------
    @staticmethod
    def _missing(sha: str, path: Path, where: str) -> MissingBlobError:
        return MissingBlobError(
            f"blob {sha} ({where}) is missing from {path.parent}; restore it from a backup or "
            "re-create the checkpoint (run `mmgrid registry verify ROOT` to list every affected checkpoint)."
        )

    @staticmethod
    def _verified(sha: str, got: str, path: Path, where: str) -> None:
        """Record ``sha`` as checked when the bytes hashed to it; else CorruptBlobError."""
        if got != sha:
            raise CorruptBlobError(
                f"blob {path} ({where}) is corrupt: its sha256 is {got}, expected {sha}; restore it "
                "from a backup or re-create the checkpoint (`mmgrid registry verify ROOT` lists all)."
            )
        with _VERIFIED_LOCK:
            _VERIFIED.add(sha)

    def _read_verified(self, sha: str, path: Path, where: str) -> bytearray:
        try:
            with open(path, "rb") as fh:
                data = bytearray(os.fstat(fh.fileno()).st_size)
                fh.readinto(data)
        except FileNotFoundError:
            raise self._missing(sha, path, where) from None
        self._verified(sha, hashlib.sha256(data).hexdigest(), path, where)
        return data

    def locate_tensor(self, sha: str, where: str = "") -> tuple[Path, int]:
        """(blob path, byte offset of the tensor's data in it) for readers that read the
        data themselves: the merge's positioned reads, a sweep's memory map.

        The blob's hash is checked first, as :meth:`read_tensor` does on a process's first
        read, but streamed in 4 MiB pieces (no copy of the tensor is kept); threads
        locating one blob at once wait for a single check.

        Raises:
            MissingBlobError, CorruptBlobError.
        """
        path = self.blob_path(sha)
        if sha not in _VERIFIED:
            with _VERIFIED_LOCK:
                lock = _CHECKING.setdefault(sha, threading.Lock())
            with lock:
                if sha not in _VERIFIED:
                    try:
                        got = sha256_file(path)
                    except FileNotFoundError:
                        raise self._missing(sha, path, where) from None
                    self._verified(sha, got, path, where)
            with _VERIFIED_LOCK:
                _CHECKING.pop(sha, None)
        try:
            with open(path, "rb") as fh:
                n, _, _, start, _ = _blob_header(lambda o, k: os.pread(fh.fileno(), k, o), path)
        except FileNotFoundError:
            with _VERIFIED_LOCK:
                _VERIFIED.discard(sha)
            raise self._missing(sha, path, where) from None
        return path, 8 + n + start

    def read_tensor(self, sha: str, where: str = "", device: str = "cpu") -> "torch.Tensor":
        """Load one tensor; the first read in a process checks the hash."""
        path = self.blob_path(sha)
        if sha not in _VERIFIED:
            tensor = _from_blob(self._read_verified(sha, path, where), path)
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
        return bytes(self._read_verified(sha, self.file_path(sha), where))

    def check(self, path: Path) -> bool:
        """Does the file at ``path`` still hash to its name?"""
        return sha256_file(path) == path.name.split(".")[0]

    def iter_blobs(self) -> list[Path]:
        return sorted((self.root / "blobs").glob("*/*.safetensors"))

    def iter_files(self) -> list[Path]:
        return sorted((self.root / "files").glob("*/*"))


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 4 MiB pieces into one reused buffer."""
    h = hashlib.sha256()
    buf = bytearray(1 << 22)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while k := fh.readinto(buf):
            h.update(view[:k])
    return h.hexdigest()


def forget_verified() -> None:
    """Forget which blobs were checked (tests use it to force a re-check)."""
    with _VERIFIED_LOCK:
        _VERIFIED.clear()
