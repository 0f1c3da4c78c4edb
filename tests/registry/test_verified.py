"""Blob verification paid once: a verification record with the blob's stat identity lets
later processes skip the re-hash; any change of identity (touch, rewrite, a flipped bit)
re-hashes; ``verify`` always re-hashes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mmgrid.registry import store as store_mod
from mmgrid.registry import verified
from mmgrid.registry.api import Registry
from mmgrid.registry.errors import CorruptBlobError
from mmgrid.registry.store import forget_verified

from .conftest import COORDS, tiny_state

RACY_S = 0.05  # the tests shorten the "racily clean" window (2 s) to keep fast; any tick is shorter


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of every blob or file the store hashes from disk, in order."""
    seen: list[str] = []
    real_file, real_read = store_mod.sha256_file, store_mod.BlobStore._read_verified
    monkeypatch.setattr(store_mod, "sha256_file", lambda p: seen.append(Path(p).name.split(".")[0]) or real_file(p))
    monkeypatch.setattr(store_mod.BlobStore, "_read_verified",
                        lambda self, sha, path, where: seen.append(sha) or real_read(self, sha, path, where))
    monkeypatch.setattr(verified, "RACY_NS", int(RACY_S * 1e9))
    return seen


def read_all(root: Path, cid: str) -> None:
    """What a merge (positioned reads) and a training run (whole tensors) read."""
    r = Registry.open(root)
    m = r.get(cid)
    for ref in m.blobs.values():
        r.store.locate_tensor(ref.sha256)
    r.load(cid)
    r.close()


@pytest.fixture
def stored(reg: Registry) -> tuple[Registry, str, set[str]]:
    cid = reg.put(tiny_state(0), COORDS, "base", files={"config.json": b"{}"})
    time.sleep(2 * RACY_S)  # the blobs are no longer "racily clean"
    forget_verified()  # as a process that never wrote them
    return reg, cid, {b.sha256 for b in reg.get(cid).blobs.values()}


def test_second_process_does_not_rehash(stored, hashes: list[str]) -> None:  # noqa: ANN001
    reg, cid, blobs = stored
    read_all(reg.root, cid)
    assert sorted(hashes) == sorted(blobs)  # first use: each blob hashed once, then recorded
    assert all(reg.store.records.path(sha).is_file() for sha in blobs)
    hashes.clear()
    forget_verified(persistent=False)  # a new process: nothing in memory, the records on disk
    read_all(reg.root, cid)
    assert hashes == []


def test_changed_identity_rehashes_and_a_flipped_bit_is_caught(stored, hashes: list[str]) -> None:  # noqa: ANN001
    reg, cid, blobs = stored
    read_all(reg.root, cid)
    ref = reg.get(cid).blobs["model.layers.0.mlp.weight"]
    path = reg.store.blob_path(ref.sha256)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # touch: same bytes, another mtime
    time.sleep(2 * RACY_S)
    hashes.clear()
    forget_verified(persistent=False)
    read_all(reg.root, cid)
    assert hashes == [ref.sha256]  # only the touched blob, and it is recorded again
    hashes.clear()
    forget_verified(persistent=False)
    read_all(reg.root, cid)
    assert hashes == []
    st = path.stat()
    with open(path, "r+b") as fh:  # flip one bit in place, then put the mtime back as it was
        fh.seek(-1, os.SEEK_END)
        last = fh.read(1)[0]
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([last ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns  # only ctime moved
    forget_verified(persistent=False)
    with pytest.raises(CorruptBlobError, match="model.layers.0.mlp.weight"):
        Registry.open(reg.root).store.locate_tensor(ref.sha256, where="tensor model.layers.0.mlp.weight")
    assert not reg.store.records.path(ref.sha256).exists()  # a corrupt blob's record is dropped
    forget_verified(persistent=False)
    with pytest.raises(CorruptBlobError):
        Registry.open(reg.root).load(cid)


def test_rewritten_blob_rehashes(stored, hashes: list[str]) -> None:  # noqa: ANN001
    reg, cid, blobs = stored
    read_all(reg.root, cid)
    ref = reg.get(cid).blobs["model.embed_tokens.weight"]
    path = reg.store.blob_path(ref.sha256)
    raw = path.read_bytes()
    tmp = path.with_suffix(".new")
    tmp.write_bytes(raw[:-1] + bytes([raw[-1] ^ 0x80]))
    os.replace(tmp, path)  # another inode
    forget_verified(persistent=False)
    with pytest.raises(CorruptBlobError, match="model.embed_tokens.weight"):
        Registry.open(reg.root).load(cid)


def test_verify_always_rehashes_and_refreshes_records(stored, hashes: list[str]) -> None:  # noqa: ANN001
    reg, cid, blobs = stored
    read_all(reg.root, cid)
    hashes.clear()
    report = reg.verify()
    assert report.ok and sorted(hashes) == sorted(blobs | set(reg.get(cid).files.values()))
    hashes.clear()
    assert reg.verify().ok and len(hashes) == len(blobs) + 1  # again: verify never trusts a record


def test_racily_clean_blob_is_not_recorded(reg: Registry) -> None:
    cid = reg.put(tiny_state(0), COORDS, "base")  # default 2 s window; the blobs are brand new
    forget_verified()
    read_all(reg.root, cid)
    assert not any(reg.store.records.path(b.sha256).exists() for b in reg.get(cid).blobs.values())


def test_forget_verified_stops_trusting_records(stored, hashes: list[str]) -> None:  # noqa: ANN001
    reg, cid, blobs = stored
    read_all(reg.root, cid)
    hashes.clear()
    forget_verified()  # persistent: what tests and benchmarks use to force re-checks
    read_all(reg.root, cid)
    assert sorted(hashes) == sorted(blobs)


def test_gc_removes_records_of_removed_blobs(stored, hashes: list[str]) -> None:  # noqa: ANN001
    reg, cid, blobs = stored
    read_all(reg.root, cid)
    assert len(reg.store.records.all()) == len(blobs)
    report = reg.gc(keep=[], grace_s=0)
    assert report.removed_checkpoints == [cid] and report.removed_records == len(blobs)
    assert reg.store.records.all() == [] and "stale verification records" in report.summary()


def test_a_real_second_process_reads_without_hashing(reg: Registry, tmp_path: Path) -> None:
    """Across processes, with the default 2 s window: the process that checks a blob older
    than the window records it; the next process hashes nothing."""
    cid = reg.put(tiny_state(0), COORDS, "base")
    time.sleep(verified.RACY_NS / 1e9 + 0.2)
    script = textwrap.dedent(f"""
        import hashlib, sys
        from mmgrid.registry import store
        from mmgrid.registry.api import Registry
        n = []
        real = store.sha256_file
        store.sha256_file = lambda p: n.append(p) or real(p)
        real_rv = store.BlobStore._read_verified
        store.BlobStore._read_verified = lambda self, *a: n.append(a) or real_rv(self, *a)
        r = Registry.open({str(reg.root)!r})
        for ref in r.get({cid!r}).blobs.values():
            r.store.locate_tensor(ref.sha256)
        r.load({cid!r})
        print(len(n))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True) for _ in range(2)]
    n_blobs = len({b.sha256 for b in reg.get(cid).blobs.values()})
    assert [int(r.stdout.strip()) for r in runs] == [n_blobs, 0], [r.stderr for r in runs]
