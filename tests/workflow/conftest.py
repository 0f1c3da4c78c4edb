"""One quick demo, built once per test session, for the researcher's-day tests and the docs
runner (tests/workflow/test_docs.py).

``MMGRID_TEST_DEMO=DIR`` reuses a quick demo already built there (``mmgrid demo --quick --out
DIR``) instead of building one (about a minute on a quiet 2-core machine); the tests add merges
and aliases to it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` imported as a module (bench/ is scripts, not a package), to test its functions."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mmgrid(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600,
           **kw) -> subprocess.CompletedProcess:
    """Run this checkout's ``mmgrid`` (python -m mmgrid with the repository first on the path)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "MMGRID_QUIET": "1", **(env or {})}
    full.pop("MMGRID_REGISTRY", None) if env is None or "MMGRID_REGISTRY" not in env else None
    return subprocess.run([sys.executable, "-m", "mmgrid", *args], cwd=cwd or REPO, env=full, capture_output=True,
                          text=True, timeout=timeout, **kw)


@pytest.fixture(scope="session")
def quick_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a finished ``mmgrid demo --quick`` (world, prepared, registry, report,
    mmgrid-run.yaml, the DOMAIN-PARADIGM-STAGE and DOMAIN-best aliases)."""
    reuse = os.environ.get("MMGRID_TEST_DEMO")
    if reuse and (Path(reuse) / "mmgrid-run.yaml").is_file():
        return Path(reuse).resolve()
    out = tmp_path_factory.mktemp("demo") / "quick"
    # one process: the follow-ups the docs run reuse this run's grid, and a worker pool's start-up
    # (a few seconds each) would be most of their cost; ids and results do not depend on it
    proc = mmgrid("demo", "--quick", "--out", str(out), "exec.workers=1", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out
