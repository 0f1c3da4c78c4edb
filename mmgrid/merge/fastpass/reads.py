"""The fast pass's reads: positioned reads of tensor entries straight from the inputs'
files into reused buffers, in blocks of about :data:`BLOCK_BYTES` (few syscalls and
thread hand-offs), and the look-ahead that resolves (hash-checks) registry blobs while
the merge runs.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from mmgrid.merge.errors import SourceError
from mmgrid.merge.tensors import TensorSource

BLOCK_BYTES = 2 << 20  # bytes per read or write call: few syscalls and thread hand-offs (measured best of 0.25-8 MiB)
# read the next chunk of file inputs on a background thread while merging this one
PREFETCH = os.environ.get("MMGRID_MERGE_PREFETCH", "1") != "0"

# descriptors a BlockReader keeps open (a registry source has a file per tensor, and
# a common per-process limit is 1024)
MAX_OPEN_FILES = 64


def _open(path: str, label: str) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise SourceError(f"{label}: {path} vanished while the merge was reading it (removed by `registry gc`?); "
                          "run the merge again") from None


def _pread(fd: int, view: memoryview, pos: int, label: str) -> None:
    """Fill ``view`` from ``fd`` at byte ``pos`` (preadv may return short counts)."""
    got = 0
    while got < len(view):
        r = os.preadv(fd, [view[got:]], pos + got)
        if r <= 0:
            raise SourceError(f"{label}: tensor data is truncated; the file is incomplete")
        got += r


class ChunkInput:
    """The first ``n`` entries of one source's tensor, read chunk by chunk as stored."""

    def __init__(self, src: TensorSource, name: str, n: int, chunk: int, slots: int = 1) -> None:
        self.label = src.label
        self.dtype = src.shapes[name][1]
        self.n = n
        loc = src.locate(name) if src.locate is not None else None
        self.fd = -1
        if loc is None:
            self.flat = src.get(name).reshape(-1)[:n]
        else:
            path, self.offset = loc
            self.fd = _open(path, src.label)
            self.bufs = [torch.empty(min(chunk, max(n, 1)), dtype=self.dtype) for _ in range(slots)]
            self.raws = [memoryview(b.view(torch.uint8).numpy()) for b in self.bufs]  # type: ignore[arg-type]  # numpy declares ndarray.__buffer__ for Python >= 3.12 only
            self.item = self.bufs[0].element_size()

    def chunk(self, a: int, b: int, slot: int = 0) -> torch.Tensor:
        """Entries [a, b) in the stored dtype, in buffer ``slot`` (valid until that slot
        is read into again)."""
        if self.fd < 0:
            return self.flat[a:b]
        _pread(self.fd, self.raws[slot][: (b - a) * self.item], self.offset + a * self.item, self.label)
        return self.bufs[slot][: b - a]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1



def block_entries(step: int, itemsize: int, block_bytes: int | None = None) -> int:
    """Entries per I/O block: about ``block_bytes`` (default :data:`BLOCK_BYTES`), a
    whole number of chunks."""
    return max(step, ((block_bytes or BLOCK_BYTES) // max(itemsize, 1)) // step * step)


def locate_ahead(srcs: list[TensorSource], names: list[str], n_threads: int = 2) -> ThreadPoolExecutor:
    """Resolve every source's location of ``names`` (in order) on ``n_threads`` threads
    while the merge runs behind: for a registry source that is the blob's hash check
    (1.2 GB/s per core here), which otherwise falls on whichever merge worker first
    reads a tensor while the other waits for the same blob. Errors are not raised here:
    the merge's own ``locate`` call raises them. Shut the executor down when done."""
    ex = ThreadPoolExecutor(n_threads, thread_name_prefix="mmgrid-locate")
    seen: set[str] = set()
    for name in names:
        if name not in seen:
            seen.add(name)
            for s in srcs:
                if s.locate is not None:
                    ex.submit(s.locate, name)
    return ex


class BlockReader:
    """Entries [a, b) of any source's tensor, for any thread: positioned reads into that
    thread's own buffers (file-backed sources; one descriptor per file, shared), or a
    slice (in-memory sources)."""

    def __init__(self, srcs: list[TensorSource]) -> None:
        self.srcs = srcs
        self.fds: dict[str, int] = {}
        self.lock = threading.Lock()

    def _fd(self, path: str, label: str) -> tuple[int, bool]:
        """(descriptor, kept): the first :data:`MAX_OPEN_FILES` files stay open until
        :meth:`close`; beyond them (a registry checkpoint is a file per tensor) the
        caller closes its descriptor after the read."""
        fd = self.fds.get(path)
        if fd is not None:
            return fd, True
        with self.lock:
            if path not in self.fds and len(self.fds) < MAX_OPEN_FILES:
                self.fds[path] = _open(path, label)
            if path in self.fds:
                return self.fds[path], True
        return _open(path, label), False

    def read(self, i: int, name: str, a: int, b: int, buf: torch.Tensor) -> torch.Tensor:
        """Entries [a, b) of source ``i``'s tensor ``name`` (a view of ``buf``, uint8,
        grown by the caller to fit, or a slice of the in-memory tensor)."""
        src = self.srcs[i]
        loc = src.locate(name) if src.locate is not None else None
        dtype = src.shapes[name][1]
        if loc is None:
            return src.get(name).reshape(-1)[a:b]
        path, offset = loc
        item = dtype.itemsize
        want = (b - a) * item
        fd, kept = self._fd(path, src.label)
        try:
            _pread(fd, memoryview(buf.numpy())[:want], offset + a * item, src.label)  # type: ignore[arg-type]  # as above
        finally:
            if not kept:
                os.close(fd)
        return buf[:want].view(dtype)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
