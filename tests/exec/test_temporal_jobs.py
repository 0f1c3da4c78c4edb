"""The temporal sweep and its extension past an edge as executor jobs give the same rows and records
as the in-process loop (the demo runs them on its executor)."""

from __future__ import annotations

import pytest

from exec_tinygrid import tiny_grid
from mmgrid.exec.base import LocalExecutor


@pytest.mark.slow
def test_temporal_sweep_and_extension_as_jobs_equal_the_loop(tmp_path_factory: pytest.TempPathFactory) -> None:
    from mmgrid.data.dataset import load_prepared
    from mmgrid.registry.api import Registry
    from mmgrid.sweep.lambda_model import extend_temporal
    from mmgrid.sweep.temporal import run_temporal
    from mmgrid.train.build import build_grid

    out = {}
    for name, ex in (("loop", None), ("jobs", LocalExecutor())):
        cfg = tiny_grid(tmp_path_factory, f"registry-temporal-{name}")
        cfg.sweeps.temporal.start, cfg.sweeps.temporal.stop = 0.0, 0.5  # lambda* on an edge is likely: extend
        cfg.sweeps.temporal.extend_steps, cfg.sweeps.temporal.extend_max = 1, 1.0
        build_grid(cfg, progress=False)
        reg = Registry.open(cfg.registry)
        prepared = load_prepared(cfg.prepared)
        sweep = run_temporal(cfg, reg, prepared, executor=ex)
        ext = extend_temporal(cfg, reg, prepared, executor=ex)
        stored = Registry.open(cfg.registry).results(study="temporal")  # what the driver indexed
        out[name] = (sweep, ext, stored)
    (s_l, e_l, r_l), (s_j, e_j, r_j) = out["loop"], out["jobs"]
    assert len(s_l) > 0 and s_j.drop(columns="seed").equals(s_l.drop(columns="seed"))
    assert len(e_l) > 0 and e_j.drop(columns="seed").equals(e_l.drop(columns="seed"))  # (45 rows when written)
    key = ["domain", "lambda", "group", "metric"]
    a, b = (r.sort_values(key)[key + ["value"]].reset_index(drop=True) for r in (r_l, r_j))
    assert len(a) == len(s_l) + len(e_l) and a.equals(b)  # every point recorded and indexed, same values
