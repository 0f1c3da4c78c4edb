"""mmgrid.fileio.atomic: writes readers see whole, and nothing half-written left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgrid.fileio.atomic import atomic_output, atomic_write, publish_file, swap_dir


def test_atomic_write_replaces_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    f = tmp_path / "sub" / "a.json"
    assert atomic_write(f, b"one") is True and f.read_bytes() == b"one"
    seen = []
    assert atomic_write(f, b"two", durable=False, before_rename=lambda: seen.append(f.read_bytes())) is True
    assert seen == [b"one"] and f.read_bytes() == b"two"  # before the rename the old file is still there
    assert sorted(p.name for p in f.parent.iterdir()) == ["a.json"]


def test_a_failing_write_keeps_the_old_file(tmp_path: Path) -> None:
    f = tmp_path / "a.bin"
    f.write_bytes(b"old")

    def boom() -> None:
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(f, b"new", before_rename=boom)
    with pytest.raises(RuntimeError), atomic_output(f) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed")
    assert f.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["a.bin"]
    with atomic_output(f, durable=True) as tmp:
        tmp.write_bytes(b"new")
    assert f.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["a.bin"]


@pytest.mark.parametrize("old", ["missing", "empty", "full", "file"])
def test_swap_dir_puts_the_new_folder_in_place(tmp_path: Path, old: str) -> None:
    out = tmp_path / "out"
    if old in ("empty", "full"):
        out.mkdir()
    if old == "full":
        (out / "stale.txt").write_text("x")
    if old == "file":
        out.write_text("x")
    new = tmp_path / ".out.tmp"
    new.mkdir()
    (new / "a.txt").write_text("a")
    swap_dir(new, out)
    assert [p.name for p in out.iterdir()] == ["a.txt"] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("durable", [True, False])
def test_publish_file_over_an_old_file(tmp_path: Path, durable: bool) -> None:
    f, tmp = tmp_path / "m.safetensors", tmp_path / "m.safetensors.partial"
    for content in (b"first", b"second"):
        tmp.write_bytes(content)
        publish_file(tmp, f, durable)
        assert f.read_bytes() == content and not tmp.exists()
