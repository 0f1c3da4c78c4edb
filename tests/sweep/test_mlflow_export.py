"""`mmgrid export mlflow` read back with MlflowClient from a local sqlite store: every checkpoint a run with
its coordinates, params, results and lineage; every study a parent run; a second export adds nothing."""

from __future__ import annotations

import json

import pytest

from mmgrid.cli import main
from mmgrid.render.mlflow_export import export_mlflow
from mmgrid.sweep.temporal import run_temporal
from sweep_fakes import DOMAINS

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install -e '.[mlflow]')")


def _runs(client, exp_id):
    out, token = [], None
    while True:
        page = client.search_runs([exp_id], max_results=1000, page_token=token)
        out += list(page)
        token = page.token
        if not token:
            return out


@pytest.fixture()
def exported(grid, counter, tmp_path):
    cfg, reg, prep = grid
    cfg.paradigms = ["fakelin"]
    for i, d in enumerate(DOMAINS):
        cid = reg.resolve({"paradigm": "fakelin", "domain": d, "period": "p2"})
        reg.record_eval(cid, "test", "all", {"recall@10": 0.1 + i / 100, "ndcg@10": 0.05}, extra={"eval_domain": d},
                        ci={"recall@10": [0.05 + i / 100, 0.15 + i / 100]})
    run_temporal(cfg, reg, prep, evaluator_factory=counter)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = export_mlflow(reg, uri, "grid")
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    return reg, uri, first, client, client.get_experiment_by_name("grid").experiment_id


def test_every_checkpoint_is_a_run_with_coordinates_params_results_and_lineage(exported):
    reg, uri, first, client, exp = exported
    runs = _runs(client, exp)
    by_id = {r.data.tags["mmgrid.id"]: r for r in runs if "mmgrid.id" in r.data.tags}
    q = reg.query()
    assert set(by_id) == set(q["id"]) and first.runs_created == len(runs)
    for cid in q["id"]:
        m, r = reg.get(cid), by_id[cid]
        for k, v in m.coords.items():
            assert r.data.tags[f"mmgrid.{k}"] == str(v)
        assert r.data.tags["mmgrid.kind"] == m.kind
        for k, v in m.params.items():
            if not isinstance(v, dict):
                assert r.data.params[k] == str(v)
        # lineage: the first parent is MLflow's parent run, every parent is named by role
        for p in m.parents:
            assert p.id in r.data.tags[f"mmgrid.parent.{p.role}"].split(",")
        if m.parents:
            assert r.data.tags["mlflow.parentRunId"] == by_id[m.parents[0].id].info.run_id
    # results with their intervals, as recorded
    for i, d in enumerate(DOMAINS):
        cid = reg.resolve({"paradigm": "fakelin", "domain": d, "period": "p2"})
        got = by_id[cid].data.metrics
        assert got["test/all/recall_at_10"] == pytest.approx(0.1 + i / 100, rel=1e-12)
        assert got["test/all/recall_at_10_ci_low"] == pytest.approx(0.05 + i / 100, rel=1e-12)
        assert got["test/all/recall_at_10_ci_high"] == pytest.approx(0.15 + i / 100, rel=1e-12)
        assert by_id[cid].data.tags["mmgrid.period"] == "p2"


def test_every_study_is_a_parent_run_of_its_merges(exported):
    reg, uri, first, client, exp = exported
    runs = _runs(client, exp)
    studies = [r for r in runs if r.data.tags.get("mmgrid.key", "").startswith("study:")]
    assert [r.data.tags["mmgrid.study"] for r in studies] == ["temporal"]
    res = reg.results(study="temporal")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == studies[0].info.run_id]
    assert len(children) == res["recipe_hash"].nunique()  # one seed here
    # one child: lambda and domain as tags, each group's metric as recorded
    row = res[(res["group"] == "non_active") & (res["metric"] == "ndcg@10")].iloc[0]
    child = next(r for r in children if r.data.tags["mmgrid.recipe_hash"] == row["recipe_hash"])
    assert float(child.data.tags["mmgrid.lambda"]) == pytest.approx(float(row["lambda"]))
    assert child.data.tags["mmgrid.domain"] == row["domain"]
    key = f"{row['split']}/non_active/on_{row['eval_domain']}/ndcg_at_10"
    assert child.data.metrics[key] == pytest.approx(float(row["value"]), rel=1e-12)
    assert set(child.data.tags["mmgrid.parent.merge_input"].split(",")) == set(json.loads(row["recipe"])["inputs"])


def test_a_second_export_adds_nothing_and_a_new_result_only_itself(exported, capsys):
    reg, uri, first, client, exp = exported
    before = {r.info.run_id: (dict(r.data.metrics), dict(r.data.params), dict(r.data.tags)) for r in _runs(client, exp)}
    again = export_mlflow(reg, uri, "grid")
    assert again.added == 0 and again.runs_found == len(before)
    after = {r.info.run_id: (dict(r.data.metrics), dict(r.data.params), dict(r.data.tags)) for r in _runs(client, exp)}
    assert after == before
    cid = reg.resolve({"paradigm": "fakelin", "domain": "A", "period": "p2"})
    run_id = next(k for k, v in before.items() if v[2].get("mmgrid.id") == cid)
    assert len(client.get_metric_history(run_id, "test/all/recall_at_10")) == 1  # logged once, not once per export
    reg.record_eval(cid, "test", "active", {"recall@10": 0.3})
    assert main(["export", "mlflow", "--registry", str(reg.root), "--tracking-uri", uri, "--experiment", "grid"]) == 0
    assert "0 runs created" in capsys.readouterr().out
    third = export_mlflow(reg, uri, "grid")
    assert third.added == 0
    run = next(r for r in _runs(client, exp) if r.data.tags.get("mmgrid.id") == cid)
    assert run.data.metrics["test/active/recall_at_10"] == pytest.approx(0.3)


def test_bad_tracking_uri_is_a_named_error(grid, capsys):
    _, reg, _ = grid
    assert main(["export", "mlflow", "--registry", str(reg.root), "--tracking-uri", "no-scheme-here"]) == 2
    assert "expected a URI such as sqlite:///mlflow.db" in capsys.readouterr().err
