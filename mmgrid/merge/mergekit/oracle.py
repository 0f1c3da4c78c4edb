"""Where mergekit's own Python is (mergekit runs from its own virtual environment, never
mmgrid's): ``$MMGRID_MERGEKIT_PYTHON``, else ``bench/.venv-mergekit/bin/python`` of the
checkout, else ``/tmp/venv-mergekit/bin/python``. Used by the oracle test
(tests/merge/test_mergekit_oracle.py) and the benchmark (bench/merge.py)."""

from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[3]


def candidates() -> list[str]:
    """The places looked at, in order."""
    env = os.environ.get("MMGRID_MERGEKIT_PYTHON")
    return [c for c in (env, str(CHECKOUT / "bench/.venv-mergekit/bin/python"), "/tmp/venv-mergekit/bin/python") if c]


def find_mergekit_python() -> str | None:
    """The first candidate that is an executable file, or None."""
    for cand in candidates():
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None
