"""Several processes writing at once lose no rows; a writer killed mid-put leaves a valid registry."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mmgrid.registry.api import Registry

from . import workers
from .test_index import snapshot

N_PROC, N_STAGES = 3, 5


@pytest.mark.parametrize(
    "index", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["sqlite-writers", "file-only-workers"]
)
def test_concurrent_writers_lose_nothing(tmp_path: Path, index: bool) -> None:
    root = tmp_path / "reg"
    driver = Registry.open(root)
    base = driver.put(workers.small_state(0), {"paradigm": "base", "domain": "all", "period": "base"}, "base")
    ctx = mp.get_context("spawn")
    with ctx.Pool(N_PROC) as pool:
        outs = pool.starmap(workers.writer, [(str(root), w, N_STAGES, base, index) for w in range(N_PROC)])
    common = {o[-1] for o in outs}
    assert len(common) == 1  # the same job put by every process is one checkpoint
    expected = {cid for o in outs for cid in o} | {base}
    if not index:
        driver.sync()
    assert set(driver.query()["id"]) == expected and len(expected) == N_PROC * N_STAGES + 2
    res = driver.results()
    assert len(res) == N_PROC * N_STAGES * 2 and res["key"].nunique() == N_PROC * N_STAGES
    assert sorted(res[res.metric == "recall@10"]["value"]) == sorted(w + i / 100 for w in range(N_PROC) for i in range(N_STAGES))
    assert driver.verify().ok
    before = snapshot(driver)
    driver.reindex()
    assert snapshot(driver) == before
    for o in outs:  # every chain is intact
        assert len(driver.lineage(o[-2]).nodes) == N_STAGES + 1
    driver.close()


def test_two_writers_of_one_identity_agree_with_the_file(tmp_path: Path) -> None:
    """The race behind a rare mismatch: two writers pass ``has()`` for the same id and both commit a manifest
    (with their own ``created``). The first file wins; the second writer indexes that file, not its own
    manifest, so the live index equals a rebuilt one whichever order the commits land in."""
    from dataclasses import replace

    from mmgrid.fileio.atomic import atomic_write
    from mmgrid.registry.manifest import read_manifest

    root = tmp_path / "reg"
    a, b = Registry.open(root), Registry.open(root)
    cid = a.put(workers.small_state(1), {"paradigm": "text", "domain": "d", "period": "p0"}, "trained")
    first = read_manifest(a.manifest_path(cid))
    late = replace(first, created="2000-01-01T00:00:00.000000Z")  # the losing writer's own manifest
    b.commit_manifest(late)  # as if b had checked has() before a's manifest landed
    assert read_manifest(a.manifest_path(cid)).created == first.created
    before = snapshot(b)
    assert [r[8] for r in before["checkpoints"] if r[0] == cid] == [first.created]
    b.reindex()
    assert snapshot(b) == before
    # the primitive: exclusive writes keep the first file and say so
    f = tmp_path / "x.json"
    assert atomic_write(f, b"one", tmp_path / "tmp", exclusive=True) is True
    assert atomic_write(f, b"two", tmp_path / "tmp", exclusive=True) is False
    assert f.read_bytes() == b"one" and not any((tmp_path / "tmp").iterdir())
    assert atomic_write(f, b"three", tmp_path / "tmp") is True and f.read_bytes() == b"three"  # plain: replaces
    a.close()
    b.close()


def spawn_writer(root: Path, point: str, flag: Path, seed: int) -> subprocess.Popen:
    env = {**os.environ, "MMGRID_REGISTRY_PAUSE": point, "MMGRID_REGISTRY_PAUSE_FILE": str(flag)}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-m", "tests.registry.workers", str(root), str(seed)], env=env,
                            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("point", ["blob_tmp_written", "manifest_tmp_written"])
def test_writer_killed_mid_put_leaves_valid_registry(tmp_path: Path, point: str) -> None:
    root, flag = tmp_path / "reg", tmp_path / "flag"
    Registry.open(root).close()
    proc = spawn_writer(root, point, flag, seed=3)
    deadline = time.time() + 60
    while not flag.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.time() < deadline, "writer never reached the pause point"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    reg = Registry.open(root)
    cid = Registry.make_id({"paradigm": "text", "domain": "crash", "period": "p0"}, "base")
    assert not reg.has(cid) and reg.query().empty  # absent, not half-present
    report = reg.verify()
    assert report.ok, report.summary()
    litter = sorted(str(p) for p in (root / "tmp").iterdir())
    assert litter and report.temp_files == litter  # the killed writer's temp files, listed by verify
    assert f"{len(litter)} temporary files" in report.summary() and litter[0] in report.summary()
    # a re-run completes the same checkpoint
    assert reg.put(workers.small_state(3), {"paradigm": "text", "domain": "crash", "period": "p0"}, "base") == cid
    out = reg.load(cid)
    assert all(torch.equal(out[k], v) for k, v in workers.small_state(3).items())
    assert reg.verify().temp_files == litter  # the resume neither read nor removed them
    g = reg.gc(grace_s=0)
    assert g.removed_temp == len(litter) and f"{len(litter)} temporary files" in g.summary()
    assert not list((root / "tmp").iterdir()) and reg.verify().ok and not reg.verify().temp_files
    reg.close()
