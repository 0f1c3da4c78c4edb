"""bench/train_eval_cell.py imports the functions it times from both code paths it compares.

The benchmark runs the same cell with ``PYTHONPATH`` set to the current checkout and to a
``git worktree`` of its baseline commit, whose modules lived elsewhere. Each run must take every
function from its own tree: a name that only one layout has fails the other path's run, and a
function taken from the installed checkout instead would time the current code twice.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CELL = REPO / "bench" / "train_eval_cell.py"
_spec = importlib.util.spec_from_file_location("bench_train_eval", REPO / "bench" / "train_eval.py")
DRIVER = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(DRIVER)
NEEDED = {"write_world", "prepare", "open_prepared", "open_registry", "derive_seed", "seed_everything",
          "set_threads", "get_base", "demo_config", "Evaluator", "get_paradigm", "train_stage"}
PROBE = """
import importlib.util, inspect, json, sys
spec = importlib.util.spec_from_file_location("train_eval_cell", sys.argv[1])
cell = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cell)
ns = cell._imports()
print(json.dumps({k: inspect.getfile(v) for k, v in ns.items() if callable(v)}))
"""


def _files(tree: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), MMGRID_QUIET="1")
    done = subprocess.run([sys.executable, "-c", PROBE, str(CELL)], env=env, cwd=tree, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check(tree: Path) -> None:
    files = _files(tree)
    assert NEEDED <= set(files), f"missing from the cell's imports: {sorted(NEEDED - set(files))}"
    outside = {k: f for k, f in files.items() if k in NEEDED and not Path(f).resolve().is_relative_to(tree.resolve())}
    assert not outside, f"taken from another tree than {tree}: {outside}"


def test_cell_imports_the_current_layout() -> None:
    _check(REPO)


def test_cell_imports_the_baseline_layout(tmp_path: Path) -> None:
    baseline = DRIVER.BASELINE
    have = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{baseline}^{{commit}}"], capture_output=True)
    if have.returncode != 0:
        pytest.skip(f"the baseline commit {baseline} is not in this clone's history (a shallow clone)")
    with DRIVER.baseline_tree(baseline, tmp_path / "baseline") as tree:
        _check(tree)
