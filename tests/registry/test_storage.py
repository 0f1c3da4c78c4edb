"""Storage, derived state and concurrency: damaged per-user files, an index that
disagrees with its files, read-only, full and corrupt storage, gc racing writers.

Each test reproduces one case of the issue's probe on a tiny registry made on the fly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from mmgrid.eval.table import PerUser
from mmgrid.registry.api import Registry
from mmgrid.registry.errors import (CorruptBlobError, CorruptIndexError, MissingBlobError, NonFiniteTensorError,
                                    ReadOnlyRegistryError, RegistryStorageError, RegistryWarning)
from mmgrid.registry.index import Index
from mmgrid.registry.store import forget_verified

from .conftest import COORDS, tiny_state


def _evaluated(reg, state, n: int = 40):  # noqa: ANN001, ANN202
    """A checkpoint with one recorded evaluation (three groups) and its per-user file."""
    rng = np.random.default_rng(0)
    users = np.arange(n, dtype=np.int64)
    active = rng.random(n) < 0.5
    metrics = {"recall@10": (rng.random(n) < 0.3).astype(float)}
    cid = reg.put(state(), COORDS, "trained")
    rel = reg.put_per_user(users, active, metrics)
    for group, mask in (("all", np.ones(n, bool)), ("active", active), ("non_active", ~active)):
        reg.record_eval(cid, "test", group, {"recall@10": float(metrics["recall@10"][mask].mean())},
                        extra={"per_user": rel})
    return cid, rel


# ----------------------------------------------------------------- 1. damaged per-user files
@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_damaged_per_user_file_is_a_named_error_never_a_smaller_sample(reg, state, damage) -> None:
    cid, rel = _evaluated(reg, state)
    path = reg.root / rel
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.unlink()
    from mmgrid.registry import peruser

    peruser._READ.clear()  # a new process: nothing read yet
    rows = reg.results(metric="recall@10", group="all")
    with pytest.raises(CorruptBlobError if damage == "truncate" else MissingBlobError) as ei:
        PerUser(reg).matrix(rows, "recall@10")
    msg = str(ei.value)
    assert rel.split("/")[-1] in msg and "mmgrid registry verify" in msg and "evaluate" in msg
    assert cid in msg  # which evaluation needed it


# ----------------------------------------------------------------- helpers
def _filled(root: Path, n: int = 2) -> tuple[list[str], str]:
    """A closed registry with ``n`` checkpoints (a chain), an alias, and an evaluation with per-user values."""
    reg = Registry.open(root)
    ids, parent = [], None
    for i in range(n):
        ids.append(reg.put(tiny_state(i), {**COORDS, "period": f"p{i}"}, "trained" if parent else "base",
                           parents=[(parent, "previous_stage")] if parent else None))
        parent = ids[-1]
    reg.alias("last", ids[-1])
    users, active = np.arange(20, dtype=np.int64), np.arange(20) % 2 == 0
    with reg.recording():
        rel = reg.put_per_user(users, active, {"recall@10": np.linspace(0, 1, 20)})
        for group in ("all", "active", "non_active"):
            reg.record_eval(ids[-1], "test", group, {"recall@10": 0.5}, extra={"per_user": rel})
    reg.close()
    return ids, rel


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of every file under ``root``."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def _run(*argv: str) -> tuple[int, str, str]:
    from mmgrid.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore", RegistryWarning)
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def _can_mount() -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    probe = Path(tempfile.mkdtemp(prefix="mmgrid-mount-probe-"))
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                            capture_output=True).returncode == 0
        if ok:
            subprocess.run(["umount", str(probe)], check=True)
        return ok
    finally:
        probe.rmdir()


CAN_MOUNT = _can_mount()


@contextlib.contextmanager
def read_only(src: Path, tmp: Path):  # noqa: ANN201
    """``src`` made read-only the way a user meets it, yielding the path to read it through.

    As root (who ignores permission bits): a read-only bind mount of ``src`` (``mount --bind`` then
    ``remount,bind,ro``): every write fails with EROFS, for root too. As another user: ``chmod -R a-w``.
    Skipped where neither is possible.
    """
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(src)], check=True)
        try:
            yield src
        finally:
            subprocess.run(["chmod", "-R", "u+w", str(src)], check=True)
        return
    if not CAN_MOUNT:
        pytest.skip("running as root without mount: a read-only registry cannot be simulated here")
    ro = tmp / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", str(src), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        yield ro
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=True)


# ----------------------------------------------------------------- 2. derived state vs its source
def test_a_deleted_results_file_is_not_served(tmp_path) -> None:
    root = tmp_path / "reg"
    _filled(root)
    files = list((root / "results").glob("*.jsonl"))
    assert len(Registry.open(root).results()) == 3 and len(files) == 1
    files[0].unlink()
    with pytest.warns(RegistryWarning, match=re.escape(files[0].name) + ".* is gone"):
        reg = Registry.open(root)
    assert reg.results().empty  # before: all 3 rows were still listed from the index
    assert any(files[0].name in r for r in reg.index_repairs)
    report = reg.verify()  # what the opening found is reported
    assert not report.ok and files[0].name in report.summary() and "reindex" in report.summary()
    reg.close()
    assert Registry.open(root).verify().ok  # brought in line: the next open agrees


def test_a_foreign_index_copied_in_is_rebuilt(tmp_path) -> None:
    mine, other = tmp_path / "mine", tmp_path / "other"
    ids, _ = _filled(mine, n=1)
    with contextlib.closing(Registry.open(other)) as reg:
        foreign = reg.put(tiny_state(9), {**COORDS, "domain": "Games"}, "base")
        reg.record_eval(foreign, "test", "all", {"recall@10": 0.9})
    shutil.copy(other / "index.sqlite", mine / "index.sqlite")
    with pytest.warns(RegistryWarning, match="built for another registry folder"):
        reg = Registry.open(mine)
    assert list(reg.query()["id"]) == ids and foreign not in set(reg.results()["id"])
    assert len(reg.results()) == 3


def test_manifests_broken_or_changed_in_place_are_not_served(tmp_path) -> None:
    root = tmp_path / "reg"
    ids, _ = _filled(root, n=3)
    reg = Registry.open(root)
    assert set(reg.query()["id"]) == set(ids)
    broken, edited = reg.manifest_path(ids[0]), reg.manifest_path(ids[1])
    with open(broken, "r+b") as fh:  # in place: the folder's mtime does not move
        fh.write(b'{"broken')
        fh.truncate()
    data = json.loads(edited.read_text())
    data["coords"]["variant"] = "edited"
    with open(edited, "w") as fh:
        json.dump(data, fh)
    with pytest.warns(RegistryWarning, match=re.escape(str(broken))):
        listed = reg.query()
    assert ids[0] not in set(listed["id"])  # before: listed from the index
    assert listed.set_index("id").loc[ids[1], "variant"] == "edited"  # what the manifest says now
    with pytest.warns(RegistryWarning):  # the next open skips it too, and says so
        report = Registry.open(root).verify()
    assert not report.ok and str(broken) in report.summary()


def test_verify_reports_an_index_that_disagrees_with_the_files(tmp_path) -> None:
    root = tmp_path / "reg"
    _filled(root)
    with contextlib.closing(Registry.open(root)) as reg:
        for i in range(3):
            reg.record_eval(reg.resolve("last"), "valid", "all", {"ndcg@10": 0.25 + i / 10})
    path = next(p for p in (root / "results").glob("*.jsonl") if b'"recall@10":0.5' in p.read_bytes())
    data = path.read_bytes()
    at = data.index(b'"recall@10":0.5')
    assert at < len(data) - 300  # the edit is not in the bytes just before the end (which open checks)
    with open(path, "r+b") as fh:  # same size, in place: only a full comparison can see it
        fh.seek(at)
        fh.write(b'"recall@10":0.7')
    reg = Registry.open(root)
    report = reg.verify()
    assert not report.ok and "result rows" in report.summary() and "reindex" in report.summary()
    reg.reindex()
    assert reg.verify().ok and 0.7 in set(reg.results(metric="recall@10")["value"])


# ----------------------------------------------------------------- 3. read-only registries
def test_a_read_only_registry_is_fully_readable_and_refuses_writes_by_name(tmp_path) -> None:
    root = tmp_path / "reg"
    ids, rel = _filled(root)
    with contextlib.closing(Registry.open(root, index=False)) as worker:  # the index is now behind the files
        late = worker.put(tiny_state(7), {**COORDS, "period": "late"}, "base")
    before = snapshot(root)
    with read_only(root, tmp_path) as ro:
        forget_verified(persistent=False)
        reg = Registry.open(ro)
        assert reg.read_only
        assert set(reg.query()["id"]) == {*ids, late}  # served from an in-memory copy, brought up to date
        assert len(reg.results()) == 3 and len(reg.per_user(reg.results().iloc[0])) > 0
        assert reg.get("last").id == ids[-1] and len(reg.lineage(ids[-1])) == 2
        assert set(reg.load(ids[0])) == set(tiny_state(0))
        assert reg.verify().ok
        for name, write in [("put", lambda: reg.put(tiny_state(5), {**COORDS, "period": "x"}, "base")),
                            ("record", lambda: reg.record_eval(ids[0], "test", "all", {"recall@10": 1.0})),
                            ("alias", lambda: reg.alias("x", ids[0])), ("gc", lambda: reg.gc(grace_s=0)),
                            ("reindex", reg.reindex)]:
            with pytest.raises(ReadOnlyRegistryError, match="read-only.*copy it somewhere writable"):
                write()
        with pytest.raises(ReadOnlyRegistryError):
            with reg.recording():
                raise AssertionError("the block must not run")
        for argv in (["query", ro], ["results", ro], ["show", ids[0], "--registry", ro],
                     ["lineage", "last", "--registry", ro], ["registry", "verify", ro]):
            rc, out, err = _run(*argv)
            assert rc == 0 and "Traceback" not in err, (argv, err)
        rc, _, err = _run("registry", "gc", ro, "--grace", "0")
        assert rc == 2 and "read-only" in err and err.count("\n") == 1
        # commands that compute before they write are refused before the work (named, one line)
        rc, _, err = _run("merge", "--registry", ro, "--method", "average", "--inputs", ids[0], ids[1])
        assert rc == 2 and "read-only" in err and "`mmgrid merge`" in err and "Traceback" not in err, err
        reg.close()
    assert snapshot(root) == before  # nothing was written


def test_opening_a_registry_that_does_not_exist_creates_nothing(tmp_path) -> None:
    root = tmp_path / "no" / "reg"
    reg = Registry.open(root)
    assert reg.query().empty and reg.results().empty and not (tmp_path / "no").exists()
    with pytest.raises(NonFiniteTensorError):  # a failed first write leaves no skeleton either
        reg.put({"w": torch.tensor([float("nan")])}, COORDS, "base")
    assert not (tmp_path / "no").exists()
    rc, _, err = _run("query", tmp_path / "absent")
    assert rc == 2 and not (tmp_path / "absent").exists()


def test_reads_do_not_rewrite_an_index_that_agrees_with_the_files(tmp_path) -> None:
    root = tmp_path / "reg"
    ids, _ = _filled(root)
    Registry.open(root).close()
    time.sleep(2.1)  # past the window in which a folder's mtime is not trusted
    Registry.open(root).close()
    before = snapshot(root)
    for argv in (["query", root], ["results", root], ["show", ids[0], "--registry", root]):
        assert _run(*argv)[0] == 0
    after = {k: v for k, v in snapshot(root).items() if not k.endswith(("-wal", "-shm"))}  # SQLite's read side files
    assert after == before


# ----------------------------------------------------------------- 4. a damaged index
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "deleted"])
def test_reindex_rebuilds_a_damaged_index_and_commands_name_it(tmp_path, damage) -> None:
    root = tmp_path / "reg"
    ids, _ = _filled(root, n=3)
    index = root / "index.sqlite"
    data = index.read_bytes()
    if damage == "truncated":
        index.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        index.write_bytes(np.random.default_rng(0).bytes(len(data)))
    elif damage == "empty":
        index.write_bytes(b"")
    else:
        index.unlink()
    if damage in ("truncated", "garbage"):
        reg = Registry.open(root)  # opens: manifests stay readable
        assert reg.get(ids[0]).id == ids[0]
        for read in (reg.query, reg.results):
            with pytest.raises(CorruptIndexError, match=re.escape(str(index)) + ".*mmgrid registry reindex"):
                read()
        with pytest.raises(CorruptIndexError):
            reg.put(tiny_state(4), {**COORDS, "period": "p9"}, "base")
        reg.close()
        rc, _, err = _run("query", root)
        assert rc == 2 and str(index) in err and "reindex" in err and "Traceback" not in err
    rc, out, err = _run("registry", "reindex", root)
    assert rc == 0, err
    reg = Registry.open(root)
    assert set(reg.query()["id"]) == set(ids) and len(reg.results()) == 3 and reg.verify().ok


# ----------------------------------------------------------------- 5. gc racing writers
def test_gc_with_no_grace_never_races_a_put(tmp_path) -> None:
    """A writer paused after its blobs are in place and before its manifest (the window in which
    they are unreferenced): gc --grace 0 waits for it instead of deleting them."""
    root, flag = tmp_path / "reg", tmp_path / "flag"
    Registry.open(root).put(tiny_state(0), COORDS, "base")
    env = {**os.environ, "MMGRID_REGISTRY_PAUSE": "manifest_tmp_written", "MMGRID_REGISTRY_PAUSE_FILE": str(flag),
           "MMGRID_REGISTRY_PAUSE_S": "2", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "tests.registry.workers", str(root), "5"], env=env,
                            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not flag.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.time() < deadline, "the writer never reached its pause"
        time.sleep(0.02)
    reg = Registry.open(root)
    report = reg.gc(grace_s=0)  # before: removed the paused put's blobs, and its manifest then named missing blobs
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    cid = out.decode().split()[-1]
    assert report.removed_blobs == 0
    forget_verified()
    assert reg.verify().ok and set(reg.load(cid)) == {"shared", "w", "b"}


# ----------------------------------------------------------------- 6. full disks, OS errors, odd names
def test_a_full_disk_while_recording_keeps_no_group_row(reg, state, monkeypatch) -> None:
    """Recording an evaluation's three groups on a full disk: all or nothing (before: 1 of 3 rows kept)."""
    import mmgrid.registry.results as results_io
    from mmgrid.eval.ranking import EvalResults, PerUser as Values, record_evaluation

    cid = reg.put(state(), COORDS, "trained")
    users, active = np.arange(30, dtype=np.int64), np.arange(30) % 3 == 0
    values = np.linspace(0, 1, 30)
    groups = {g: {"recall@10": float(values[m].mean()), "n": float(m.sum())}
              for g, m in (("all", np.ones(30, bool)), ("active", active), ("non_active", ~active))}
    results = EvalResults(groups, per_user=Values(users, active, {"recall@10": values}))
    real_write = os.write

    def short_write(fd: int, data: bytes) -> int:  # the disk fills up part-way through the lines
        return real_write(fd, bytes(data)[: len(data) // 3])

    monkeypatch.setattr(results_io.os, "write", short_write)
    with pytest.raises(RegistryStorageError, match="recording an evaluation.*free space"):
        record_evaluation(reg, cid, "test", results)
    monkeypatch.setattr(results_io.os, "write", real_write)
    assert reg.results().empty
    assert not list((reg.root / "peruser").glob("*/*")) and not list((reg.root / "results").glob("*.jsonl"))
    reg.close()
    assert Registry.open(reg.root).results().empty  # nor in the files
    record_evaluation(reg, cid, "test", results)  # with space again: all three groups
    assert sorted(reg.results(metric="recall@10")["group"]) == ["active", "all", "non_active"]


def test_an_index_that_cannot_be_written_keeps_no_record(reg, state, monkeypatch) -> None:
    cid = reg.put(state(), COORDS, "trained")
    before = snapshot(reg.root)

    def full(conn, rec, src=None):  # noqa: ANN001, ANN202
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Index, "add_record", staticmethod(full))
    with pytest.raises(RegistryStorageError, match="index.sqlite.*free space"):
        reg.record_eval(cid, "test", "all", {"recall@10": 0.5})
    monkeypatch.undo()
    assert reg.results().empty
    assert {k: v for k, v in snapshot(reg.root).items() if "index.sqlite" not in k} == \
        {k: v for k, v in before.items() if "index.sqlite" not in k}


def _tmpfs(path: Path, size: str):  # noqa: ANN202
    if not CAN_MOUNT:
        pytest.skip("a full disk needs a small tmpfs (root with mount)")
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    return path


def test_a_full_disk_on_put_is_named_and_stores_nothing(tmp_path) -> None:
    disk = _tmpfs(tmp_path / "disk", "2m")
    try:
        reg = Registry.open(disk / "reg")
        base = reg.put(tiny_state(0), COORDS, "base")
        before = snapshot(disk / "reg")
        big = {"w": torch.randn(1024, 1024)}  # 4 MB > the disk
        with pytest.raises(RegistryStorageError, match=r"No space left on device.*free space") as ei:
            reg.put(big, {**COORDS, "period": "p1"}, "trained", parents=[(base, "previous_stage")])
        assert "Traceback" not in str(ei.value)
        after = snapshot(disk / "reg")
        assert {k for k in after if "index.sqlite" not in k} == {k for k in before if "index.sqlite" not in k}
        assert list(reg.query()["id"]) == [base] and reg.verify().ok
        rc, _, err = _run("registry", "verify", disk / "reg")
        assert rc == 0, err
        reg.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)  # lazily: a leaked descriptor must not fail the test


def test_a_registry_under_a_non_utf8_folder_name_is_readable(tmp_path) -> None:
    root = Path(os.fsencode(tmp_path).decode("utf-8") + os.fsdecode(b"/reg-\xff"))
    ids, rel = _filled(root)
    time.sleep(2.1)  # old enough for verify to leave verification records (later reads then skip hashing)
    reg = Registry.open(root)
    assert reg.verify().ok
    forget_verified(persistent=False)  # a new process: trusts the records, reads through the fast path
    assert set(reg.load(ids[0])) == set(tiny_state(0))
    assert set(reg.query()["id"]) == set(ids) and len(reg.per_user(reg.results().iloc[0])) > 0
    assert len(reg.lineage("last")) == 2


def test_verify_on_a_damaged_index_still_checks_everything_and_names_it(tmp_path) -> None:
    root = tmp_path / "reg"
    _filled(root)
    (root / "index.sqlite").write_bytes(b"not a database" * 100)
    report = Registry.open(root).verify()
    assert not report.ok and report.blobs_checked > 0 and "reindex" in report.summary()


def test_a_registry_created_by_another_process_after_opening_is_read(tmp_path) -> None:
    root = tmp_path / "reg"
    early = Registry.open(root)  # nothing there yet
    ids, _ = _filled(root)  # another writer creates it
    assert set(early.query()["id"]) == set(ids)


def test_reads_of_a_registry_on_a_full_disk_without_its_index_work(tmp_path) -> None:
    disk = _tmpfs(tmp_path / "disk", "1m")
    try:
        ids, _ = _filled(disk / "reg")
        (disk / "reg" / "index.sqlite").unlink()
        (disk / "filler").write_bytes(b"")
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as fh:  # fill the disk to the last byte
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
        with pytest.warns(RegistryWarning, match="in-memory index"):
            reg = Registry.open(disk / "reg")  # before: `database or disk is full` on the first query
        assert set(reg.query()["id"]) == set(ids) and len(reg.results()) == 3
        with pytest.raises((RegistryStorageError, ReadOnlyRegistryError)):
            reg.put(tiny_state(8), {**COORDS, "period": "p8"}, "base")
        reg.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)
