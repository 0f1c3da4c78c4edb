"""No path read from a stored artifact leaves the registry; symlinks in imported folders
stay inside them; a broken config.json is named."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from mmgrid.cli import main
from mmgrid.registry.api import Registry
from mmgrid.registry.errors import InvalidFileError, UnknownCheckpointError, UnsafePathError

from .conftest import COORDS, tiny_state


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def edit_manifest(reg: Registry, cid: str, fn) -> None:  # noqa: ANN001
    path = reg.manifest_path(cid)
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))
    reg.forget(cid)


@pytest.fixture
def exported(reg: Registry) -> str:
    return reg.put(tiny_state(0), COORDS, "base", files={"config.json": b'{"model_type": "x"}'})


def test_manifest_file_name_leaving_the_folder_refused_on_export_and_reported(
    reg: Registry, exported: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    edit_manifest(reg, exported, lambda d: d["files"].update({"../../X": d["files"]["config.json"]}))
    out = tmp_path / "deep" / "er" / "OUT"
    out.parent.mkdir(parents=True)
    before = tree(tmp_path)
    rc = main(["registry", "export-hf", str(reg.root), exported, str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "'../../X'" in err and "verify" in err and "Traceback" not in err
    assert tree(tmp_path) == before  # nothing written: no X, no OUT, no temporary export folder
    with pytest.raises(UnsafePathError, match=r"file name '\.\./\.\./X'"):
        reg.export_hf(exported, out)
    assert tree(tmp_path) == before
    report = reg.verify()
    path = str(reg.manifest_path(exported))
    assert not report.ok and report.bad_manifests == [path] and "../../X" in report.problems[path]
    rc = main(["registry", "verify", str(reg.root)])
    assert rc == 1 and "bad manifest" in capsys.readouterr().out


@pytest.mark.parametrize("field", ["blob", "file"])
def test_manifest_hash_leaving_the_registry_refused(reg: Registry, exported: str, field: str) -> None:
    outside = reg.root.parent / "secret.safetensors"
    save_file({"t": torch.zeros(2)}, str(outside))
    evil = "../../../secret"
    if field == "blob":
        edit_manifest(reg, exported, lambda d: d["blobs"]["model.position_ids"].update(sha256=evil))
    else:
        edit_manifest(reg, exported, lambda d: d["files"].update({"config.json": evil}))
    with pytest.raises(UnsafePathError, match="not a sha256"):
        reg.load(exported)
    with pytest.raises(UnsafePathError, match="not a sha256"):
        reg.store.blob_path(evil)  # the store refuses it too, whoever asks
    report = reg.verify()
    assert report.bad_manifests == [str(reg.manifest_path(exported))] and "not a sha256" in report.summary()


def test_alias_with_a_path_for_an_id_gets_a_named_error(reg: Registry, exported: str) -> None:
    (reg.root / "aliases" / "evil.json").write_text(json.dumps({"id": "../../etc/passwd"}))
    with pytest.raises(UnsafePathError, match="not a checkpoint id") as err:
        reg.resolve("evil")
    assert "vanished" not in str(err.value) and "registry alias" in str(err.value)
    (reg.root / "aliases" / "gone.json").write_text(json.dumps({"id": "0123456789abcdef"}))
    with pytest.raises(UnknownCheckpointError, match="alias 'gone' points at checkpoint 0123456789abcdef"):
        reg.get("gone")
    assert reg.aliases() == {"gone": "0123456789abcdef"}  # listed; the broken one is not
    report = reg.verify()
    assert not report.ok and len(report.bad_aliases) == 2 and "not a checkpoint id" in report.summary()
    with pytest.warns(UserWarning, match="evil"):
        reg.reindex()
    assert [p for p, _ in reg.index_problems] == [str(reg.root / "aliases" / "evil.json")]


# -- import-hf: symlinks and config.json --------------------------------------------------------
def hf_dir(path: Path, config: bytes = b'{"model_type": "tiny"}') -> Path:
    path.mkdir(parents=True)
    save_file({"w": torch.ones(3, 3)}, str(path / "model.safetensors"))
    (path / "config.json").write_bytes(config)
    return path


def test_import_symlink_outside_the_folder_refused(reg: Registry, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    folder = hf_dir(tmp_path / "m")
    (folder / "tokenizer.json").symlink_to(secret)
    with pytest.raises(UnsafePathError, match="tokenizer.json is a symlink") as err:
        reg.import_hf(folder, COORDS)
    assert "Nothing was stored" in str(err.value)
    rc = main(["registry", "import-hf", str(reg.root), str(folder), "--paradigm", "text", "--domain", "B", "--period", "p0"])
    assert rc == 2 and "outside" in capsys.readouterr().err
    assert reg.query().empty and not reg.store.iter_blobs() and not reg.store.iter_files() and not reg.store.temp_files()
    (folder / "tokenizer.json").unlink()
    (folder / "model.safetensors").rename(tmp_path / "weights.safetensors")
    (folder / "model.safetensors").symlink_to(tmp_path / "weights.safetensors")  # the weights themselves
    with pytest.raises(UnsafePathError, match="model.safetensors is a symlink"):
        reg.import_hf(folder, COORDS)
    assert reg.query().empty and not reg.store.iter_blobs()


def test_import_symlink_inside_the_folder_followed(reg: Registry, tmp_path: Path) -> None:
    folder = hf_dir(tmp_path / "m")
    (folder / "sub").mkdir()
    (folder / "sub" / "tok.json").write_text('{"v": 1}')
    (folder / "tokenizer.json").symlink_to("sub/tok.json")  # relative, inside
    cid = reg.import_hf(folder, COORDS)
    assert reg.file(cid, "tokenizer.json") == b'{"v": 1}'


def test_import_hf_cache_snapshot_follows_links_into_its_blobs(reg: Registry, tmp_path: Path) -> None:
    """The Hugging Face cache layout: snapshot files are symlinks into ../../blobs."""
    model = tmp_path / "hub" / "models--org--tiny"
    blobs, snap = model / "blobs", model / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    save_file({"w": torch.full((2, 2), 3.0)}, str(blobs / "b1"))
    (blobs / "b2").write_text('{"model_type": "tiny"}')
    (snap / "model.safetensors").symlink_to("../../blobs/b1")
    (snap / "config.json").symlink_to("../../blobs/b2")
    cid = reg.import_hf(snap, COORDS)
    assert torch.equal(reg.load(cid)["w"], torch.full((2, 2), 3.0)) and reg.file(cid, "config.json") == b'{"model_type": "tiny"}'
    outside = tmp_path / "hub" / "models--org--other"
    outside.mkdir()
    (outside / "x.json").write_text("{}")
    (snap / "tokenizer.json").symlink_to(outside / "x.json")  # another model's folder: refused
    with pytest.raises(UnsafePathError, match="models--ORG--NAME"):
        reg.import_hf(snap, {**COORDS, "period": "p1"})
    plain = tmp_path / "notcache" / "snapshots" / "r"  # not under models--*: only the folder itself
    plain.mkdir(parents=True)
    save_file({"w": torch.ones(1)}, str(tmp_path / "notcache" / "w.safetensors"))
    (plain / "model.safetensors").symlink_to("../../w.safetensors")
    with pytest.raises(UnsafePathError):
        reg.import_hf(plain, {**COORDS, "period": "p2"})


@pytest.mark.parametrize("config", [b"{not json", b"\xff\xfe", b"[1, 2]"])
def test_import_non_json_config_named(reg: Registry, tmp_path: Path, config: bytes, capsys: pytest.CaptureFixture) -> None:
    folder = hf_dir(tmp_path / "m", config)
    with pytest.raises(InvalidFileError, match="config.json"):
        reg.import_hf(folder, COORDS)
    rc = main(["registry", "import-hf", str(reg.root), str(folder), "--paradigm", "text", "--domain", "B", "--period", "p0"])
    err = capsys.readouterr().err
    assert rc == 2 and "config.json" in err and "Traceback" not in err
    assert reg.query().empty and not reg.store.iter_blobs() and not reg.store.iter_files()


def test_registry_tree_symlink_in_store_not_followed_outside(reg: Registry, exported: str, tmp_path: Path) -> None:
    """A blob replaced by a symlink to a file outside the registry is refused before it is read (no trust by
    name; a link with the right bytes outside is refused too)."""
    ref = reg.get(exported).blobs["model.layers.0.mlp.weight"]
    path = reg.store.blob_path(ref.sha256)
    other = tmp_path / "other.safetensors"
    save_file({"t": torch.zeros(8, 8)}, str(other))
    os.remove(path)
    path.symlink_to(other)
    from mmgrid.registry.store import forget_verified

    forget_verified()
    with pytest.raises(UnsafePathError, match="outside the registry"):
        reg.load(exported)


def test_import_ignores_a_symlinked_subfolder_but_refuses_a_broken_link_outside(reg: Registry, tmp_path: Path) -> None:
    folder = hf_dir(tmp_path / "m")
    (folder / "elsewhere").symlink_to(tmp_path)  # a folder: never read, so not refused
    cid = reg.import_hf(folder, COORDS)
    assert set(reg.get(cid).files) == {"config.json"}
    (folder / "vocab.txt").symlink_to(tmp_path / "missing" / "vocab.txt")  # would be read if it existed
    with pytest.raises(UnsafePathError, match="vocab.txt is a symlink"):
        reg.import_hf(folder, {**COORDS, "period": "p1"})
