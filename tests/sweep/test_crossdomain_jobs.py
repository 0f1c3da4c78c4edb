"""The cross-domain study as executor jobs gives what the in-process loop gives: the same rows
in the same order, the same registry records and per-user files; the jobs travel as JSON and
write in worker mode (the index learns their records only at the driver's sync)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))  # the tiny built grid of tests/eval
from jobs_tinygrid import WorkerLikeExecutor, built_grid, per_user_files, records  # noqa: E402

pytestmark = pytest.mark.slow


def _run(cfg, executor):
    from mmgrid.data.dataset import load_prepared
    from mmgrid.registry import Registry
    from mmgrid.sweep.crossdomain import run_cross_domain

    reg = Registry.open(cfg.registry)
    return run_cross_domain(cfg, reg, load_prepared(cfg.prepared), executor=executor), reg


def test_cross_domain_jobs_equal_the_in_process_loop(tmp_path_factory, capsys) -> None:
    cfg_a, _ = built_grid(tmp_path_factory, "registry-cd-here")
    cfg_b, _ = built_grid(tmp_path_factory, "registry-cd-jobs")
    here, reg_a = _run(cfg_a, None)
    skipped_here = sorted(line for line in capsys.readouterr().err.splitlines() if "skipped" in line)
    ex = WorkerLikeExecutor()
    jobs, reg_b = _run(cfg_b, ex)
    skipped_jobs = sorted(line for line in capsys.readouterr().err.splitlines() if "skipped" in line)

    # per paradigm (emb, then sasrec): a baseline job per domain, then a pair job per pair
    a, b, c = sorted(here["eval_domain"].unique())
    names = [f"{p}:{x}" for p in ("emb", "sasrec") for x in (a, b, c, f"{a}+{b}", f"{a}+{c}", f"{b}+{c}")]
    assert [j.name.split(":", 1)[1] for j in ex.jobs] == names
    assert skipped_jobs == skipped_here and skipped_here  # SASRec's merges: the same skips, the same messages
    assert set(here["method"]) == {"single", "average", "task_arithmetic"}
    assert here["alpha"].isna().any() and here["base_id"].isna().any()  # None survives the JSON trip
    pd.testing.assert_frame_equal(jobs, here)  # same rows, same order, same values
    ra, rb = records(reg_a), records(reg_b)  # the driver synced what the jobs wrote
    assert len(rb) == len(ra) > 0 and rb.equals(ra)
    assert per_user_files(cfg_b.registry) == per_user_files(cfg_a.registry)
    again, _ = _run(cfg_b, WorkerLikeExecutor())  # every recipe recorded: the jobs return the stored rows
    keys = ["paradigm", "pair", "method", "base_kind", "alpha", "eval_domain", "group", "metric"]
    pd.testing.assert_frame_equal(again.sort_values(keys).reset_index(drop=True),
                                  here.sort_values(keys).reset_index(drop=True), check_dtype=False)


def test_a_pair_job_writes_in_worker_mode_and_the_index_learns_it_at_sync(tmp_path_factory, monkeypatch) -> None:
    from mmgrid.data.dataset import load_prepared
    from mmgrid.exec.base import Job
    from mmgrid.exec.job import run_job
    from mmgrid.exec.ray import WORKER_ENV, job_to_json
    from mmgrid.registry import Registry
    from mmgrid.sweep.crossdomain import PAIR_JOB, CrossPair, pair_bases, pair_ids

    cfg, _ = built_grid(tmp_path_factory, "registry-cd-worker")
    reg = Registry.open(cfg.registry)
    prepared = load_prepared(cfg.prepared)
    di, dj = prepared.domains[:2]
    ids = pair_ids(cfg, reg, "emb", [(di, dj)])
    pair = CrossPair.of(cfg, "emb", (di, dj), ids)
    assert (pair.name, CrossPair.split(pair.name)) == (f"{di}+{dj}", (di, dj))
    bases = pair_bases(cfg, reg, prepared, pair)
    assert set(bases.ids) == {"none", "original", "historical", "neutral"} and bases.ids["none"] is None
    assert bases.errors == {}
    assert bases.id("historical") == ids[di][0] and all(reg.has(bases.id(k)) for k in ("original", "neutral"))
    job = Job(PAIR_JOB, {"grid": cfg.to_dict(), "pair": pair.to_dict(), "bases": bases.to_dict()})
    job_to_json(job)  # JSON-able kwargs
    before = len(reg.results())
    monkeypatch.setenv(WORKER_ENV, "1")
    rows = run_job(job)
    monkeypatch.delenv(WORKER_ENV)
    # average: base none, alphas 0 and 0.5; task arithmetic: 3 bases x 2 alphas; each on both domains
    assert len({r["recipe_hash"] for r in rows}) == 2 + 3 * 2
    assert {r["eval_domain"] for r in rows} == {di, dj}
    assert len(reg.results()) == before  # recorded in the files only
    reg.sync()
    assert len(reg.results()) == before + len(rows)


def test_a_base_that_cannot_be_made_travels_as_its_error_and_id_raises_it() -> None:
    from mmgrid.errors import MergeError
    from mmgrid.sweep.crossdomain import PairBases

    pb = PairBases({"none": None, "historical": "h1"}, {"neutral": "SASRec item tables differ"})
    assert pb.id("none") is None and pb.id("historical") == "h1"
    with pytest.raises(MergeError, match="SASRec item tables differ"):
        pb.id("neutral")
    assert PairBases(**pb.to_dict()) == pb  # through a job's JSON and back
