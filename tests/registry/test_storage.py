"""Storage, derived state and concurrency (issue 30): damaged per-user files, an index that
disagrees with its files, read-only, full and corrupt storage, gc racing writers.

Each test reproduces one case of the issue's probe on a tiny registry made on the fly.
"""

from __future__ import annotations

import numpy as np
import pytest

from mmgrid.eval.table import PerUser
from mmgrid.registry.errors import CorruptBlobError, MissingBlobError

from .conftest import COORDS


def _evaluated(reg, state, n: int = 40):  # noqa: ANN001, ANN202
    """A checkpoint with one recorded evaluation (three groups) and its per-user file."""
    rng = np.random.default_rng(0)
    users = np.arange(n, dtype=np.int64)
    active = rng.random(n) < 0.5
    metrics = {"recall@10": (rng.random(n) < 0.3).astype(float)}
    cid = reg.put(state(), COORDS, "trained")
    rel = reg.put_per_user(users, active, metrics)
    for group, mask in (("all", np.ones(n, bool)), ("active", active), ("non_active", ~active)):
        reg.record_eval(cid, "test", group, {"recall@10": float(metrics["recall@10"][mask].mean())},
                        extra={"per_user": rel})
    return cid, rel


# ----------------------------------------------------------------- 1. damaged per-user files
@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_damaged_per_user_file_is_a_named_error_never_a_smaller_sample(reg, state, damage) -> None:
    cid, rel = _evaluated(reg, state)
    path = reg.root / rel
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.unlink()
    from mmgrid.registry import peruser

    peruser._READ.clear()  # a new process: nothing read yet
    rows = reg.results(metric="recall@10", group="all")
    with pytest.raises(CorruptBlobError if damage == "truncate" else MissingBlobError) as ei:
        PerUser(reg).matrix(rows, "recall@10")
    msg = str(ei.value)
    assert rel.split("/")[-1] in msg and "mmgrid registry verify" in msg and "evaluate" in msg
    assert cid in msg  # which evaluation needed it
