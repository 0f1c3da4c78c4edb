"""verify finds flipped bytes and missing blobs; reads refuse them; gc keeps what is needed."""

from __future__ import annotations

import os
import time

import pytest
import torch

from mmgrid.registry.api import Registry
from mmgrid.registry.errors import CorruptBlobError, MissingBlobError
from mmgrid.registry.store import forget_verified

from .conftest import COORDS, tiny_state
from .test_dedupe_lineage import grid_with_merge


def flip_byte(path, offset: int = -3) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_finds_a_flipped_byte(reg: Registry) -> None:
    cid = reg.put(tiny_state(0), COORDS, "base", files={"config.json": b"{}"})
    assert reg.verify().ok
    ref = reg.get(cid).blobs["model.layers.0.mlp.weight"]
    flip_byte(reg.store.blob_path(ref.sha256))
    report = reg.verify()
    assert not report.ok and report.corrupt == [str(reg.store.blob_path(ref.sha256))]
    assert report.affected == [cid] and "PROBLEMS" in report.summary()
    forget_verified()
    with pytest.raises(CorruptBlobError, match="model.layers.0.mlp.weight"):
        reg.load(cid)
    assert torch.equal(reg.open_tensors(cid)["model.embed_tokens.weight"], tiny_state(0)["model.embed_tokens.weight"])


def test_verify_finds_corrupt_file_and_missing_blob(reg: Registry) -> None:
    cid = reg.put(tiny_state(0), COORDS, "base", files={"config.json": b'{"x": 1}'})
    m = reg.get(cid)
    flip_byte(reg.store.file_path(m.files["config.json"]), 0)
    reg.store.blob_path(m.blobs["model.position_ids"].sha256).unlink()
    report = reg.verify()
    assert len(report.corrupt) == 1 and report.missing == [(cid, "model.position_ids", m.blobs["model.position_ids"].sha256)]
    with pytest.raises(CorruptBlobError, match="config.json"):
        reg.file(cid, "config.json")
    with pytest.raises(MissingBlobError, match="verify"):
        reg.load(cid)


def test_verify_reports_bad_manifest(reg: Registry) -> None:
    cid = reg.put(tiny_state(0), COORDS, "base")
    reg.manifest_path(cid).write_text("{not json")
    assert reg.verify().bad_manifests == [str(reg.manifest_path(cid))]


def test_gc_default_keeps_checkpoints_and_drops_orphans(reg: Registry) -> None:
    grid_with_merge(reg)
    orphan_sha, _, _ = reg.store.put_tensor(torch.randn(3))  # as a killed writer would leave
    n = len(reg.store.iter_blobs())
    assert reg.gc().removed_blobs == 0  # inside the grace period
    dry = reg.gc(grace_s=0, dry_run=True)
    assert dry.removed_blobs == 1 and len(reg.store.iter_blobs()) == n
    report = reg.gc(grace_s=0)
    assert report.removed_blobs == 1 and not report.removed_checkpoints
    assert not reg.store.blob_path(orphan_sha).exists() and len(reg.query()) == 5 and reg.verify().ok


def test_gc_keep_removes_unreachable_with_their_blobs(reg: Registry) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    extra = reg.put(tiny_state(11), {**COORDS, "period": "x"}, "trained", parents=[(base, "init")])
    reg.alias("games", b1)
    old = time.time() - 7200
    for p in reg.store.iter_blobs():
        os.utime(p, (old, old))
    dry = reg.gc(keep=[a2], dry_run=True)
    assert set(dry.removed_checkpoints) == {merged, extra} and reg.has(merged)
    report = reg.gc(keep=[a2])
    assert set(report.removed_checkpoints) == {merged, extra} and report.removed_blobs > 0
    assert set(reg.query()["id"]) == {base, a1, a2, b1}  # kept, aliased, and their ancestors
    assert not reg.has(merged) and reg.verify().ok
    for cid in (base, a1, a2, b1):
        assert reg.load(cid)
    fresh = Registry.open(reg.root)
    assert fresh.reindex() and set(fresh.query()["id"]) == {base, a1, a2, b1}


def test_temp_litter_is_listed_never_read_and_counted_by_gc(reg: Registry) -> None:
    """Files named as a killed writer leaves them (fileio.atomic.temp_path): a blob's partial bytes
    and a complete manifest that was never renamed into place."""
    from mmgrid.fileio.atomic import temp_path
    from mmgrid.registry.names import make_id

    cid = make_id(COORDS, "base")
    other = reg.put(tiny_state(1), {**COORDS, "period": "p1"}, "base")
    blob_tmp = temp_path(reg.store.tmp, "ab" * 32 + ".safetensors")
    blob_tmp.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"t\":")  # torn
    man_tmp = temp_path(reg.store.tmp, f"{cid}.json")
    man_tmp.write_text(reg.get(other).dumps().replace(other, cid))  # whole, but never renamed
    fresh = Registry.open(reg.root)
    assert not fresh.has(cid) and list(fresh.query()["id"]) == [other]
    assert fresh.reindex() and list(fresh.query()["id"]) == [other] and not fresh.index_problems
    report = fresh.verify()
    assert report.ok and report.temp_files == sorted([str(blob_tmp), str(man_tmp)])
    assert "2 temporary files" in report.summary() and str(man_tmp) in report.summary()
    assert fresh.gc().removed_temp == 0 and blob_tmp.exists()  # younger than the grace period
    dry = fresh.gc(grace_s=0, dry_run=True)
    assert dry.removed_temp == 2 and blob_tmp.exists() and man_tmp.exists()
    report = fresh.gc(grace_s=0)
    assert report.removed_temp == 2 and "2 temporary files" in report.summary()
    assert not blob_tmp.exists() and not man_tmp.exists() and not fresh.verify().temp_files


def test_reindex_names_a_corrupt_manifest_and_exits_non_zero(reg: Registry, capsys: pytest.CaptureFixture) -> None:
    from mmgrid.cli import main

    good = reg.put(tiny_state(0), COORDS, "base")
    bad = reg.put(tiny_state(1), {**COORDS, "period": "p1"}, "base")
    reg.manifest_path(bad).write_text('{"id": "' + bad + '", "coords": ')  # truncated
    with pytest.warns(UserWarning, match=f"{bad}.json"):
        n = reg.reindex()
    assert n == 1 and list(reg.query()["id"]) == [good]
    assert reg.index_problems[0][0] == str(reg.manifest_path(bad)) and "not valid JSON" in reg.index_problems[0][1]
    rc = main(["registry", "reindex", str(reg.root)])
    err = capsys.readouterr().err
    assert rc == 1 and "SKIPPED 1 unreadable" in err and str(reg.manifest_path(bad)) in err and "not valid JSON" in err
    reg.manifest_path(bad).unlink()
    assert main(["registry", "reindex", str(reg.root)]) == 0


@pytest.mark.parametrize("edit", [
    lambda d: d["coords"].pop("paradigm"),
    lambda d: d.update(kind="finetuned"),
    lambda d: d.update(blobs=[1, 2]),
    lambda d: d["blobs"]["model.position_ids"].update(shape=["a"]),
    lambda d: d["blobs"]["model.position_ids"].update(dtype="X9"),
])
def test_edited_manifest_is_named_not_a_traceback(reg: Registry, edit, capsys: pytest.CaptureFixture) -> None:  # noqa: ANN001
    import json

    from mmgrid.cli import main
    from mmgrid.errors import RegistryError

    cid = reg.put(tiny_state(0), COORDS, "base")
    d = json.loads(reg.manifest_path(cid).read_text())
    edit(d)
    reg.manifest_path(cid).write_text(json.dumps(d))
    reg.forget(cid)
    with pytest.raises(RegistryError, match="manifest"):
        reg.get(cid)
    fresh = Registry.open(reg.root)
    with pytest.warns(UserWarning, match=cid):
        fresh.reindex()  # the index skips it, loudly, and does not fail
    assert fresh.query().empty and fresh.verify().bad_manifests == [str(reg.manifest_path(cid))]
    assert main(["registry", "verify", str(reg.root)]) == 1 and "bad manifest" in capsys.readouterr().out


def test_edited_results_line_is_skipped_loudly(reg: Registry) -> None:
    import json

    cid = reg.put(tiny_state(0), COORDS, "base")
    reg.record_eval(cid, "test", "all", {"r": 0.5})
    path = reg._log.path
    good = json.loads(path.read_text().splitlines()[0])
    with open(path, "a") as fh:
        fh.write(json.dumps({**good, "key": "k2", "metrics": {"r": "high"}}) + "\n")
        fh.write(json.dumps({**good, "key": "k3", "split": {"a": 1}}) + "\n")
    with pytest.warns(UserWarning, match="malformed") as caught:
        assert reg.reindex()
    assert sorted(str(w.message).split("record ")[1][:4] for w in caught) == ["'k2'", "'k3'"]
    assert len(reg.results()) == 1 and [p for p, _ in reg.index_problems] == [str(path), str(path)]


def test_verify_lists_checkpoints_that_share_coordinates_as_a_warning(reg: Registry) -> None:
    a = reg.put(tiny_state(0), COORDS, "trained", params={"lr": 1e-3}, seed=0)
    b = reg.put(tiny_state(0), COORDS, "trained", params={"lr": 1e-3, "v": 2}, seed=0)  # other identity, same coords
    reg.put(tiny_state(1), COORDS, "trained", params={"lr": 1e-3}, seed=1)  # another seed: not a repeat
    reg.put(tiny_state(2), {**COORDS, "period": "p9"}, "trained", seed=0)  # other coords
    report = reg.verify()
    assert report.ok and len(report.duplicates) == 1
    shared, ids = report.duplicates[0]
    assert sorted(ids) == sorted([a, b]) and "kind=trained" in shared and "seed=0" in shared
    text = report.summary()
    assert text.startswith("OK") and "warning: 1 groups of checkpoints (2 in all)" in text
    assert a[:12] in text and b[:12] in text
