"""On a copy of the quick demo: building its run again trains nothing, and a registry that also
holds every checkpoint under the id an earlier mmgrid gave it (equal coordinates, kind and seed)
still runs the temporal and cross-domain studies and the report; ``registry verify`` lists the pairs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.identity_v1 import put_under_identity_v1
from tests.workflow.conftest import mmgrid

pytestmark = pytest.mark.slow


def _copy(demo: Path, dest: Path) -> Path:
    """``demo`` copied to ``dest``, its saved run naming the copy's own folders."""
    shutil.copytree(demo, dest, symlinks=True, ignore=shutil.ignore_patterns("index.sqlite*"))
    run = dest / "mmgrid-run.yaml"
    run.write_text(run.read_text().replace(str(demo.resolve()), str(dest)))
    return dest


def test_building_the_quick_demo_again_trains_nothing(quick_demo: Path, tmp_path: Path) -> None:
    run = _copy(quick_demo, tmp_path / "q")
    proc = mmgrid("build", str(run), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"\d+ stages \(0 trained, \d+ cached\)", proc.stdout), proc.stdout


def test_a_registry_with_duplicate_coordinates_runs_every_study(quick_demo: Path, tmp_path: Path) -> None:
    from mmgrid.config.runfile import load_run
    from mmgrid.registry import Registry
    from mmgrid.runtime.context import forget

    run = _copy(quick_demo, tmp_path / "q")
    cfg = load_run(run / "mmgrid-run.yaml")
    forget()
    reg = Registry.open(run / "registry")
    mapping = put_under_identity_v1(cfg, reg, reg)  # stored after the demo's own: the newest by coordinates
    reg.close()

    verify = mmgrid("registry", "verify", "--registry", str(run / "registry"))
    assert verify.returncode == 0, verify.stdout[-3000:]
    assert f"warning: {len(mapping)} groups of checkpoints" in verify.stdout
    pairs = {frozenset((old[:12], new[:12])) for old, new in mapping.items()}
    listed = [frozenset(re.findall(r"\b[0-9a-f]{12}\b", line)) for line in verify.stdout.splitlines()
              if line.startswith("  ") and "kind=" in line]
    assert listed and all(ids in pairs for ids in listed)  # each group: a checkpoint and its earlier id
    for study in ("temporal", "cross-domain"):
        proc = mmgrid("sweep", study, str(run))
        assert proc.returncode == 0, f"{study}: {proc.stderr[-3000:]}"
    rep = mmgrid("report", str(run), "--out", str(tmp_path / "report"), "--no-diagnostics")
    assert rep.returncode == 0, rep.stderr[-3000:]
    cited = set(re.findall(r"`([0-9a-f]{16})`", (tmp_path / "report" / "report.md").read_text()))
    assert cited and not cited & set(mapping)  # the report reads the grid's own checkpoints, never the others
