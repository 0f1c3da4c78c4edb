"""The studies compute, the report renders: rendering needs no registry, fits nothing, and the analysis
scripts' text is the report's own."""

from __future__ import annotations

import shutil

import mmgrid.sweep.study_results as sr
from mmgrid.sweep.crossdomain import run_cross_domain
from mmgrid.sweep.lambda_model import predict_lambda
from mmgrid.render.report import render_markdown, section_markdown, write_report
from mmgrid.sweep.study_results import compute_study_results
from mmgrid.sweep.temporal import run_temporal
from sweep_fakes import DOMAINS, STARS, fake_merge


def _studies(grid, counter):
    cfg, reg, prep = grid
    cfg.paradigms = ["fakelin"]
    for i, d in enumerate(DOMAINS):
        cid = reg.resolve({"paradigm": "fakelin", "domain": d, "period": "p2"})
        reg.record_eval(cid, "test", "all", {"recall@10": 0.1 + i / 100, "ndcg@10": 0.05 + i / 100,
                                             "recall@20": 0.2, "ndcg@20": 0.07}, extra={"eval_domain": d})
    run_temporal(cfg, reg, prep, evaluator_factory=counter)
    run_cross_domain(cfg, reg, prep, evaluator_factory=counter, merge_fn=fake_merge)
    predict_lambda(cfg, reg, prep, evaluator_factory=counter)
    return cfg, reg, prep


def _body(text: str) -> str:
    return text[text.index("## Findings"):]  # past the header's time stamp


def test_rendering_needs_no_registry_and_gives_the_reports_text(grid, counter, tmp_path):
    cfg, reg, prep = _studies(grid, counter)
    text = write_report(cfg, reg, prep, tmp_path / "a", diagnostics=False).read_text()
    res = compute_study_results(cfg, reg, prep, diagnostics=False)
    shutil.rmtree(reg.root)  # nothing below may read it
    (tmp_path / "b").mkdir()
    again = render_markdown(res, tmp_path / "b")
    assert _body(again) == _body(text)
    # the typed results hold the numbers the text prints: lambda* per domain, all users, by construction
    stars = res.get("temporal").stars.set_index(["domain", "group"])["lambda_star"]
    assert {d: stars[(d, "all")] for d in DOMAINS} == {d: STARS[d]["all"] for d in DOMAINS}
    for d in DOMAINS:
        assert f"| {d} | {STARS[d]['all']:.2f}" in again


def test_the_regression_is_fitted_once_on_figure_5s_lambda_star(grid, counter, tmp_path, monkeypatch):
    cfg, reg, prep = _studies(grid, counter)
    calls = []
    real = sr.from_stars
    monkeypatch.setattr(sr, "from_stars", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    res = compute_study_results(cfg, reg, prep, diagnostics=False)
    (tmp_path / "r").mkdir()
    render_markdown(res, tmp_path / "r")
    assert len(calls) == 1  # computing fits once, rendering never
    fig5 = res.get("temporal").stars
    assert calls[0]["lambda_star"].tolist() == fig5["lambda_star"].tolist()
    assert res.get("prediction").prediction.table["lambda_star"].tolist() == \
        [STARS[d]["non_active"] for d in sorted(DOMAINS)]


def test_an_analysis_script_prints_the_reports_section(grid, counter, tmp_path):
    cfg, reg, prep = _studies(grid, counter)
    text = write_report(cfg, reg, prep, tmp_path / "rep", diagnostics=False).read_text()
    for key in ("cross_domain", "temporal"):
        fn = {"cross_domain": lambda: sr.cross_domain(cfg, reg), "temporal": lambda: sr.temporal(cfg, reg)}[key]
        part = section_markdown(key, fn(), tmp_path / key)
        assert part in text
        assert any(p.suffix == ".png" for p in (tmp_path / key).iterdir())
