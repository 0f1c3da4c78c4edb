"""Resumed = uninterrupted, byte for byte: a real tiny build (a trained tiny base,
the text and SASRec paradigms, three stages) is SIGKILLed at several points, resumed, and
its registry compared with an uninterrupted build's.

Kill points (the registry's test hook ``MMGRID_REGISTRY_PAUSE`` / ``..._SKIP``: the writer
sleeps at the n-th time it reaches a point and is killed there):

* ``blob_tmp_written`` #1: the base's blobs written to tmp/, not yet renamed into place;
* ``manifest_tmp_written`` #2: the base stored, the first stage's manifest not yet in place;
* ``blob_tmp_written`` #5: mid-build, the blobs of the fifth checkpoint written to tmp/.

The killed build is ``python -m mmgrid build`` in a new process; the resume runs in the test
process with its caches dropped, as a new process would start (a forked child instead of
the subprocess hung in the fork: torch/tokenizers threads).

Compared: every file under ``blobs/``, ``files/``, ``manifests/``, ``aliases/``, ``results/``
byte for byte, except the manifests' volatile fields (:data:`VOLATILE`: when it was written
and how long training took), which are compared with those fields removed; the index rows
(checkpoints, coords, edges, aliases, results) except their ``created`` timestamps and the
manifests' stat identity the index caches (``mstat``: a file's size, mtime and inode). Not
compared: ``verified/`` (a cache of verification records, present or not depending on what
was read) and ``index.sqlite`` as a file (rebuilt from the manifests; its rows are compared).
After a resume the only extra files are the kill's temporary files under ``tmp/``: ``verify``
lists exactly those and ``gc`` removes and counts them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

OVERRIDES = [
    "world.n_domains=1", "world.scale=0.3", "paradigms=[text, sasrec]", "variants=[{name: default}]",
    "base.lm_epochs=1", "base.vocab_size=300", "base.max_length=24", "data.lm_text_docs=40",
    "train.max_examples=16", "train.batch_size=8", "train.device=cpu", "train.threads=1",
    "train.epochs={pretrain: 1, p1: 1, p2: 1}", "train.seeds=[0]",  # one replicate (the demo grid has three)
    "exec.workers=1",  # the stages in the build's own process, where the kill points are counted
]  # fmt: skip
VOLATILE = ("created", "meta.train_log.seconds")  # manifest fields that differ between two runs
KILL_POINTS = [("blob_tmp_written", 0), ("manifest_tmp_written", 1), ("blob_tmp_written", 4)]
COMPARED = ("blobs", "files", "manifests", "aliases", "results")


def _args(root: Path) -> list[str]:
    return [*OVERRIDES, f"data.root={root / 'world'}", f"prepared={root / 'prepared'}", f"registry={root / 'reg'}"]


def _cfg(root: Path) -> Any:
    from mmgrid.config import load_grid

    return load_grid("demo", _args(root))


def _fresh_process_state() -> None:
    """What a new process would have: no open registry, no cached base, no verified hashes."""
    from mmgrid.models import base
    from mmgrid.registry.store import forget_verified
    from mmgrid.runtime import context

    for reg in list(context._REGISTRIES.values()):
        reg.close()
    context.forget()
    base._CACHE.clear()
    forget_verified()


def _build_in_process(root: Path) -> None:
    from mmgrid.train.build import build_grid

    _fresh_process_state()
    build_grid(_cfg(root), progress=False)
    _fresh_process_state()


def _build_killed_at(root: Path, point: str, skip: int) -> None:
    """``mmgrid build`` in a new process that pauses at the (skip + 1)-th ``point``; SIGKILL it there."""
    flag = root / "paused"
    flag.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MMGRID_REGISTRY_PAUSE": point,
           "MMGRID_REGISTRY_PAUSE_FILE": str(flag), "MMGRID_REGISTRY_PAUSE_SKIP": str(skip)}
    proc = subprocess.Popen([sys.executable, "-m", "mmgrid", "build", "demo", *_args(root)], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    try:
        while not flag.exists():
            assert proc.poll() is None, f"the build ended before {point} #{skip + 1}: {proc.stderr.read().decode()}"
            assert time.time() < deadline, f"the build never reached {point} #{skip + 1}"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _drop(d: dict[str, Any], dotted: str) -> None:
    *path, last = dotted.split(".")
    for p in path:
        d = d.get(p) or {}
    d.pop(last, None)


def _stored(reg: Path) -> dict[str, Any]:
    """Every compared file's bytes (manifests parsed, volatile fields removed)."""
    out: dict[str, Any] = {}
    for top in COMPARED:
        for p in sorted((reg / top).rglob("*")):
            if not p.is_file():
                continue
            key = str(p.relative_to(reg))
            if top == "manifests":
                m = json.loads(p.read_bytes())
                for f in VOLATILE:
                    _drop(m, f)
                out[key] = m
            else:
                out[key] = p.read_bytes()
    return out


def _field_diff(a: Any, b: Any, path: str = "") -> str:
    """The first field where two parsed manifests differ, with both values (for the failure message)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _field_diff(a.get(k), b.get(k), f"{path}.{k}")
    return f"{path or '.'}: {str(a)[:200]} != {str(b)[:200]}"


def _index_rows(reg: Path) -> dict[str, list[tuple]]:
    con = sqlite3.connect(reg / "index.sqlite")
    try:
        rows = {}
        for table in ("checkpoints", "coord_kv", "edges", "aliases", "results"):
            cols = [c[1] for c in con.execute(f"PRAGMA table_info({table})") if c[1] not in ("created", "mstat")]
            rows[table] = sorted(con.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall(), key=repr)
        return rows
    finally:
        con.close()


def _all_files(reg: Path) -> set[str]:
    skip = ("verified", "index.sqlite", "tmp")
    return {str(p.relative_to(reg)) for p in reg.rglob("*") if p.is_file()
            and not str(p.relative_to(reg)).startswith(skip)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any], set[str]]:
    """A prepared world and an uninterrupted build, moved to ``ref/`` (ids depend on the
    registry's path, so every build below uses the same ``reg/`` path)."""
    from mmgrid.data.pipeline import prepare
    from mmgrid.data.world_files import write_world

    root = tmp_path_factory.mktemp("killresume")
    cfg = _cfg(root)
    write_world(cfg.data.root, cfg.world)
    prepare(cfg, log=lambda m: None)
    _build_in_process(root)
    (root / "reg").rename(root / "ref")
    ref = root / "ref"
    return root, _stored(ref), _index_rows(ref), _all_files(ref)


@pytest.mark.parametrize(("point", "skip"), KILL_POINTS, ids=[f"{p}#{s + 1}" for p, s in KILL_POINTS])
def test_killed_and_resumed_build_stores_the_same_bytes(reference, point: str, skip: int) -> None:
    from mmgrid.registry import Registry

    root, ref_files, ref_rows, ref_names = reference
    reg_root = root / "reg"
    shutil.rmtree(reg_root, ignore_errors=True)
    _build_killed_at(root, point, skip)
    assert len(_all_files(reg_root)) < len(ref_names)  # killed before the end
    _build_in_process(root)  # the resume

    assert _all_files(reg_root) == ref_names  # no missing and no extra file outside tmp/
    got = _stored(reg_root)
    assert got.keys() == ref_files.keys()
    differ = [k for k in got if got[k] != ref_files[k]]
    assert not differ, f"stored bytes differ after a kill at {point} #{skip + 1}: {differ[:5]}: " + "; ".join(
        f"{k}: {_field_diff(got[k], ref_files[k])}" for k in differ[:3])
    assert _index_rows(reg_root) == ref_rows

    reg = Registry.open(reg_root)
    try:
        litter = sorted(str(p) for p in (reg_root / "tmp").iterdir())
        report = reg.verify()
        assert report.ok and report.temp_files == litter  # the kill's temporary files, listed
        gc = reg.gc(grace_s=0)
        assert gc.removed_temp == len(litter)
        assert not list((reg_root / "tmp").iterdir()) and not reg.verify().temp_files
        assert _all_files(reg_root) == ref_names and _stored(reg_root) == ref_files  # gc removed only litter
    finally:
        reg.close()
