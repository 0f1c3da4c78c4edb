"""Runs that move and copy: ``mmgrid-run.yaml`` stores its paths relative to its own folder.

After ``mv`` the run works where it now is (query, sweep temporal, report, ``Grid.open``);
after ``cp -a`` an alias or merge made through the copy lands in the copy's registry and the
original stays byte-identical (every file hashed before and after). Older run files (absolute
paths) keep working, reading a moved or copied run's own folders with a note. A run file whose
registry is missing, is not a registry, loops, or leaves the run unannounced is a named error
(exit 2), never "(no rows)" with exit 0. A report never rewrites a run's saved grid.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.workflow.conftest import mmgrid

RUN = "mmgrid-run.yaml"


def _copy(src: Path, dst: Path) -> Path:
    """``cp -a``: symlinks kept, times kept."""
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copy2)
    return dst


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _ids(registry: Path, *filters: str) -> list[str]:
    proc = mmgrid("query", "--registry", str(registry), *filters, "--columns", "id", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    return pd.read_csv(io.StringIO(proc.stdout))["id"].tolist()


@pytest.fixture
def own_run(quick_demo: Path, tmp_path: Path) -> Path:
    """A copy of the quick demo this test may change (the session's demo stays as it is)."""
    run = _copy(quick_demo, tmp_path / "demo")
    _ids(run)  # the copy's registry index notices it was copied (rebuilt once, inside the copy)
    return run


@pytest.mark.slow
def test_a_moved_run_works_where_it_now_is(own_run: Path, tmp_path: Path) -> None:
    from mmgrid.query import Grid

    ids = _ids(own_run)
    moved = tmp_path / "demo-v1"
    os.rename(own_run, moved)
    assert _ids(moved) == ids and len(ids) > 10
    proc = mmgrid("build", str(moved), "--no-progress")  # ids are content: the moved run is every stage cached
    assert proc.returncode == 0, proc.stderr
    assert "(0 trained," in proc.stdout, proc.stdout
    assert sorted(_ids(moved)) == sorted(ids)  # nothing new stored
    proc = mmgrid("sweep", "temporal", str(moved))
    assert proc.returncode == 0, proc.stderr
    assert "lambda*" in proc.stdout
    proc = mmgrid("report", str(moved), "--out", str(moved / "rep"), "--no-diagnostics")
    assert proc.returncode == 0, proc.stderr
    assert str(moved / "registry") in (moved / "rep" / "report.md").read_text()
    for path in (moved, moved / "registry"):
        g = Grid.open(path)
        assert Path(g.registry.root).resolve() == (moved / "registry").resolve()
        assert Path(g.config.prepared) == (moved / "prepared").resolve()
        assert Path(g.config.data.root) == (moved / "world").resolve()


@pytest.mark.slow
def test_a_merge_and_an_alias_through_a_copy_leave_the_original_byte_identical(own_run: Path,
                                                                               tmp_path: Path) -> None:
    from mmgrid.query import Grid

    exp = _copy(own_run, tmp_path / "exp")
    before = _hashes(own_run)
    proc = mmgrid("registry", "alias", "--registry", str(exp), "exp-only", "books-emb-p2")
    assert proc.returncode == 0, proc.stderr
    proc = mmgrid("merge", "--registry", str(exp), "--method", "average", "--inputs", "books-emb-p1", "books-emb-p2")
    assert proc.returncode == 0, proc.stderr
    merged = proc.stdout.strip().splitlines()[-1].strip()
    g = Grid.open(exp)
    assert Path(g.registry.root).resolve() == (exp / "registry").resolve()
    assert g.registry.resolve("exp-only") and g.registry.resolve(merged).startswith(merged)
    assert _hashes(own_run) == before  # not one byte of the original changed
    assert merged not in " ".join(_ids(own_run))  # and its registry does not hold the merge


def _old_style(run: Path, origin: Path) -> None:
    """Rewrite ``run``'s run file as older versions wrote it: absolute paths (into ``origin``)."""
    data = yaml.safe_load((run / RUN).read_text())
    data.pop("run", None)
    data["registry"], data["prepared"] = str(origin / "registry"), str(origin / "prepared")
    data["data"]["root"] = str(origin / "world")
    (run / RUN).write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.slow
def test_an_older_run_file_in_a_copied_run_uses_the_copy_and_says_so(own_run: Path, tmp_path: Path) -> None:
    from mmgrid.query import Grid

    exp = _copy(own_run, tmp_path / "exp")
    _old_style(exp, own_run.resolve())  # as `cp -a` of an older run leaves it: it names the original
    before = _hashes(own_run)
    proc = mmgrid("merge", "--registry", str(exp), "--method", "average", "--inputs", "books-emb-p1", "books-emb-p2")
    assert proc.returncode == 0, proc.stderr
    assert "older run file" in proc.stderr and f"registry {own_run.resolve() / 'registry'} ->" in proc.stderr
    assert _hashes(own_run) == before
    assert Path(Grid.open(exp).registry.root).resolve() == (exp / "registry").resolve()
    # an older report folder naming its run's registry (no registry of its own) still reads it
    rep = tmp_path / "old-report"
    rep.mkdir()
    shutil.copy(exp / RUN, rep / RUN)
    _old_style(rep, own_run.resolve())
    assert _ids(rep) == _ids(own_run)


def _run_with(quick_demo: Path, folder: Path, registry, external: bool = False) -> Path:  # noqa: ANN001
    data = yaml.safe_load((quick_demo / RUN).read_text())
    data["registry"] = registry
    data["prepared"] = data["data"]["root"] = str((quick_demo / "prepared").resolve())
    data["data"]["root"] = str((quick_demo / "world").resolve())
    data["run"] = {"format": 2, "external": ["prepared", "data.root"] + (["registry"] if external else [])}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RUN).write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def test_a_run_file_with_a_bad_registry_is_a_named_error(quick_demo: Path, tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.mkdir()
    os.symlink("registry", loop / "registry")  # registry -> registry
    cases = {
        "missing": (_run_with(quick_demo, tmp_path / "missing", "registry"), "which does not exist"),
        "etc": (_run_with(quick_demo, tmp_path / "etc", "/etc", external=True), "which is not a registry"),
        "loop": (_run_with(quick_demo, loop, "registry"), "symlink loop"),
        "escapes": (_run_with(quick_demo, tmp_path / "escapes", str((quick_demo / "registry").resolve())),
                    "leaves the run folder"),
        "escapes-relative": (_run_with(quick_demo, tmp_path / "rel", "../../x/registry"), "leaves the run folder"),
        "a list": (_run_with(quick_demo, tmp_path / "list", ["registry"]), "must be a path (a string)"),
    }
    for name, (run, message) in cases.items():
        proc = mmgrid("query", "--registry", str(run))
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        assert message in proc.stderr, (name, proc.stderr)
        assert "(no rows)" not in proc.stdout and "Traceback" not in proc.stderr, name
    # the same through the Python API
    from mmgrid.errors import ConfigError, RegistryError
    from mmgrid.query import Grid

    for name in ("missing", "etc", "loop", "escapes"):
        with pytest.raises((RegistryError, ConfigError)):
            Grid.open(cases[name][0])
    # announced as external, the demo's registry is read
    ok = _run_with(quick_demo, tmp_path / "external", str((quick_demo / "registry").resolve()), external=True)
    assert _ids(ok) == _ids(quick_demo)


def test_report_with_overrides_never_rewrites_the_runs_saved_grid(own_run: Path) -> None:
    before = _hashes(own_run)
    proc = mmgrid("report", str(own_run), "--out", str(own_run), "--no-diagnostics", "train.seeds=[0]")
    assert proc.returncode == 2, proc.stderr
    assert "a report never rewrites a run's saved grid" in proc.stderr
    assert "train.seeds: [0, 1] -> [0]" in proc.stderr and "nothing was written" in proc.stderr
    assert _hashes(own_run) == before  # the saved grid and the previous report.md as they were


def test_report_into_its_own_folder_saves_the_overrides_there_and_keeps_the_run(own_run: Path) -> None:
    before = (own_run / RUN).read_bytes()
    out = own_run / "reports" / "moves-seed0"
    proc = mmgrid("report", str(own_run), "--out", str(out), "--no-diagnostics", "train.seeds=[0]")
    assert proc.returncode == 0, proc.stderr
    assert (own_run / RUN).read_bytes() == before
    saved = yaml.safe_load((out / RUN).read_text())
    assert saved["train"]["seeds"] == [0]
    # outside the report's folder, announced; inside the run that holds the report: relative, so
    # the report folder moves and copies with its run
    assert (saved["registry"], saved["prepared"], saved["data"]["root"]) == ("../../registry", "../../prepared",
                                                                            "../../world")
    assert saved["run"]["external"] == ["registry", "prepared", "data.root"]
    copy = _copy(own_run, own_run.parent / "copy")
    assert _ids(copy / "reports" / "moves-seed0") == _ids(own_run)
    from mmgrid.config.runfile import read_run
    assert read_run(copy / "reports" / "moves-seed0" / RUN).path("registry") == str((copy / "registry").resolve())
