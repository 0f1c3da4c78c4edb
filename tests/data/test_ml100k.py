"""MovieLens-100K from the RecBole 1.2.1 wheel: `mmgrid fetch-ml100k` (only two zip members, fixed target
names, a pinned digest) and grids/ml100k.yaml prepared from it.

The tests on the real wheel use ``$MMGRID_RECBOLE_WHEEL`` or ``runs/cache/pip/`` (the command's default
cache); when neither holds it they try ``pip download`` once (PyPI) and skip, saying why, when that fails."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from mmgrid.cli import main
from mmgrid.data import recbole
from mmgrid.data.errors import RecboleWheelError

REPO = Path(__file__).resolve().parents[2]
INTER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t10\t3\t881250949\n"
ITEM = "item_id:token\tmovie_title:token_seq\n10\tToy Story\n"


def _fake_wheel(path: Path, members: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_extract_reads_only_the_two_members_under_fixed_names(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    digest = _fake_wheel(wheel, {
        recbole.ML100K_MEMBERS["ml-100k.inter"]: INTER.encode(),
        recbole.ML100K_MEMBERS["ml-100k.item"]: ITEM.encode(),
        "../../evil.txt": b"escape", "/abs/evil.txt": b"escape",            # paths that would leave the folder
        "recbole/dataset_example/ml-100k/ml-100k.kg": b"not wanted",
        "recbole/__init__.py": b"raise SystemExit('never run')",
    })  # fmt: skip
    out = tmp_path / "out" / "raw"
    folder = recbole.extract_ml100k(wheel, out, sha256=digest)
    assert folder == out / "ml-100k"
    assert _files(tmp_path / "out") == ["raw/ml-100k/ml-100k.inter", "raw/ml-100k/ml-100k.item"]
    assert (folder / "ml-100k.inter").read_text() == INTER and (folder / "ml-100k.item").read_text() == ITEM
    assert not (tmp_path / "evil.txt").exists() and not Path("/abs/evil.txt").exists()
    # again: replaced in place, nothing else left behind
    recbole.extract_ml100k(wheel, out, sha256=digest)
    assert _files(tmp_path / "out") == ["raw/ml-100k/ml-100k.inter", "raw/ml-100k/ml-100k.item"]


def test_extract_refuses_another_wheel_before_writing(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    _fake_wheel(wheel, {recbole.ML100K_MEMBERS["ml-100k.inter"]: INTER.encode(),
                        recbole.ML100K_MEMBERS["ml-100k.item"]: ITEM.encode()})
    with pytest.raises(RecboleWheelError, match="is not RecBole 1.2.1's wheel"):
        recbole.extract_ml100k(wheel, tmp_path / "out")  # the pinned digest
    assert not (tmp_path / "out").exists()
    with pytest.raises(RecboleWheelError, match="no such file"):
        recbole.extract_ml100k(tmp_path / "absent.whl", tmp_path / "out")


def test_extract_missing_or_oversized_member_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    wheel = tmp_path / "w.whl"
    digest = _fake_wheel(wheel, {recbole.ML100K_MEMBERS["ml-100k.inter"]: INTER.encode()})
    out = tmp_path / "out"
    with pytest.raises(RecboleWheelError, match="no member recbole/dataset_example/ml-100k/ml-100k.item"):
        recbole.extract_ml100k(wheel, out, sha256=digest)
    assert _files(out) == []  # the first member's temporary copy is gone too
    digest = _fake_wheel(wheel, {recbole.ML100K_MEMBERS["ml-100k.inter"]: INTER.encode(),
                                 recbole.ML100K_MEMBERS["ml-100k.item"]: ITEM.encode()})
    monkeypatch.setattr(recbole, "ML100K_MAX_BYTES", len(INTER) - 1)
    with pytest.raises(RecboleWheelError, match="not a regular file under"):
        recbole.extract_ml100k(wheel, out, sha256=digest)
    assert _files(out) == []


def test_download_asks_pip_for_the_built_wheel_only(tmp_path: Path) -> None:
    seen = []

    class Done:
        returncode, stderr = 1, "ERROR: Could not find a version that satisfies the requirement\n"

    def runner(cmd):
        seen.append(cmd)
        return Done()

    with pytest.raises(RecboleWheelError, match="PyPI is reachable.*--wheel PATH"):
        recbole.download_recbole_wheel(tmp_path / "cache", runner=runner)
    cmd = seen[0]
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert "recbole==1.2.1" in cmd and cmd[cmd.index("-d") + 1] == str(tmp_path / "cache")


def test_cli_fetch_bad_wheel_exits_nonzero(tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.whl").write_bytes(b"not a zip")
    assert main(["fetch-ml100k", "--wheel", str(tmp_path / "bad.whl"), "--out", str(tmp_path / "raw")]) != 0
    assert "is not RecBole 1.2.1's wheel" in capsys.readouterr().err
    assert not (tmp_path / "raw").exists()


@pytest.fixture(scope="session")
def recbole_wheel() -> Path:
    env = os.environ.get("MMGRID_RECBOLE_WHEEL")
    if env:
        return Path(env)
    cache = REPO / "runs" / "cache" / "pip"
    try:
        return recbole.download_recbole_wheel(cache)  # reused when already there
    except RecboleWheelError as exc:
        pytest.skip(f"the RecBole 1.2.1 wheel is not available (no $MMGRID_RECBOLE_WHEEL, none in {cache}, "
                    f"and pip download failed: {exc})")


@pytest.mark.slow
def test_ml100k_grid_prepares_from_the_wheel(recbole_wheel: Path, tmp_path: Path, capsys) -> None:
    from mmgrid.config import load_grid
    from mmgrid.data.pipeline import prepare

    raw = tmp_path / "raw"
    assert main(["fetch-ml100k", "--wheel", str(recbole_wheel), "--out", str(raw)]) == 0
    lines = (raw / "ml-100k" / "ml-100k.inter").read_text().splitlines()[1:]
    rows = [line.split("\t") for line in lines]
    # MovieLens-100K's published size: 100,000 ratings by 943 users of 1,682 movies
    assert (len(rows), len({r[0] for r in rows}), len({r[1] for r in rows})) == (100_000, 943, 1682)
    cfg = load_grid(REPO / "grids" / "ml100k.yaml", [f"data.root={raw}", f"prepared={tmp_path / 'prep'}"])
    ds = prepare(cfg, log=lambda m: None)
    d = ds.domain("ml-100k")
    s = ds.stats().row(0, named=True)
    # independent count: ML-100K has at least 20 ratings a user, so the 5-core drops items only; the
    # test window's interactions are the raw rows in [1998-03-01, 1998-05-01) of items the core kept
    lo, hi = 888710400, 893980800  # 1998-03-01 and 1998-05-01, 00:00 UTC, in Unix seconds
    kept = set(d.items.get_column("parent_asin").to_list())
    assert s["users"] == 943 and s["items"] == len(kept) < 1682
    assert s["n_test"] == sum(1 for r in rows if lo <= int(r[3]) < hi and r[1] in kept)
    assert "Toy Story" in d.item_titles and s["interactions"] == sum(s[f"n_{p}"] for p in ("pretrain", "p1", "p2", "test"))
