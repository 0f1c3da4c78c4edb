"""The grid evaluation as executor jobs gives what the in-process loop gives: the same summary,
the same registry records and per-user files, the same baseline table; the jobs travel as JSON
and write in worker mode (the index learns their records only at the driver's sync)."""

from __future__ import annotations

import json
import math

import pytest

from jobs_tinygrid import WorkerLikeExecutor, built_grid, per_user_files, records

pytestmark = pytest.mark.slow


def _evaluate(cfg, build, executor):
    from mmgrid.eval.grid import evaluate_grid
    from mmgrid.eval.table import baseline_table
    from mmgrid.registry import Registry

    reg = Registry.open(cfg.registry)
    summary = evaluate_grid(cfg, build, progress=False, registry=reg, executor=executor)
    domains = list(dict.fromkeys(s.domain for s in build.stages))
    table = baseline_table(reg, cfg.paradigms, domains, ks=cfg.eval.ks, split=cfg.eval.split, period="p2")
    return summary, reg, table


def _same(a, b) -> bool:
    """Equal values, NaN equal to NaN."""
    return json.dumps(a, sort_keys=True, default=float) == json.dumps(b, sort_keys=True, default=float)


def test_evaluation_jobs_equal_the_in_process_loop(tmp_path_factory) -> None:
    from mmgrid.eval.grid import CheckpointKey

    cfg_a, build = built_grid(tmp_path_factory, "registry-eval-here")
    cfg_b, _ = built_grid(tmp_path_factory, "registry-eval-jobs")
    here, reg_a, table_a = _evaluate(cfg_a, build, None)
    ex = WorkerLikeExecutor()
    jobs, reg_b, table_b = _evaluate(cfg_b, build, ex)

    # 2 paradigms x 3 domains cells + 3 popular jobs; 2 seeds of each cell's model
    assert len(ex.jobs) == 6 + 3 and len(here.results) == 2 * 6
    assert list(jobs.results) == list(here.results)  # the in-process key order
    assert all(_same(dict(jobs.results[k]), dict(here.results[k])) for k in here.results)
    assert _same(jobs.popular, here.popular) and list(jobs.popular) == list(here.popular)
    # one key for a checkpoint everywhere: retention (first seed only) is keyed like the results
    assert set(here.retention) == {CheckpointKey(cfg_a.train.seed, "default", p, d) for p in ("sasrec", "emb")
                                   for d in jobs.popular}
    assert set(here.retention) <= set(here.results) and all(isinstance(k, CheckpointKey) for k in here.results)
    assert _same({str(k): v for k, v in jobs.retention.items()}, {str(k): v for k, v in here.retention.items()})
    assert list(jobs.matrices) == list(here.matrices) == [("emb", d) for d in jobs.popular]
    assert _same({str(k): v for k, v in jobs.matrices.items()}, {str(k): v for k, v in here.matrices.items()})
    assert math.isfinite(here.base_text_loss) and jobs.base_text_loss == here.base_text_loss
    assert table_b == table_a
    ra, rb = records(reg_a), records(reg_b)  # the driver synced what the jobs wrote
    assert len(rb) == len(ra) > 0 and rb.equals(ra)
    assert per_user_files(cfg_b.registry) == per_user_files(cfg_a.registry)


def test_a_cell_job_writes_in_worker_mode_and_the_index_learns_it_at_sync(tmp_path_factory, monkeypatch) -> None:
    from mmgrid.eval.grid import CELL_JOB, CheckpointKey, EvalWork, eval_jobs
    from mmgrid.exec.job import run_job
    from mmgrid.exec.ray import WORKER_ENV
    from mmgrid.registry import Registry

    cfg, build = built_grid(tmp_path_factory, "registry-eval-worker")
    reg = Registry.open(cfg.registry)
    before = len(reg.results())
    finals = {CheckpointKey(s.seed, s.variant, s.paradigm, s.domain): s.id for s in build.stages if s.stage == "p2"}
    jobs = eval_jobs(cfg, EvalWork(finals, [], ["Books"], build.ids), float("nan"))
    job = next(j for j in jobs if j.fn == CELL_JOB)
    monkeypatch.setenv(WORKER_ENV, "1")
    got = run_job(job)
    monkeypatch.delenv(WORKER_ENV)
    assert [r[:4] for r in got["results"]] == [[0, "default", job.kwargs["paradigm"], job.kwargs["domain"]],
                                               [1, "default", job.kwargs["paradigm"], job.kwargs["domain"]]]
    assert [r[:3] for r in got["retention"]] == [["default", job.kwargs["paradigm"], job.kwargs["domain"]]]  # seed 0
    assert got["matrix"] is None  # none asked
    assert len(reg.results()) == before  # recorded in the files only
    reg.sync()
    rows = sum(len([v for v in ms.values() if v == v]) for r in got["results"] for ms in r[4].values())
    rows += len([v for v in got["retention"][0][3].values() if v == v])
    assert len(reg.results()) == before + rows > before
