"""The report on the fake grid: files written, tables equal registry queries, graceful gaps."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from mmgrid.render.markdown import markdown_table
from mmgrid.render.report import write_report
from mmgrid.sweep import tables as tb
from mmgrid.sweep.crossdomain import run_cross_domain
from mmgrid.sweep.lambda_model import predict_lambda
from mmgrid.sweep.temporal import run_temporal, temporal_results
from sweep_fakes import DOMAINS, fake_merge


def _record_baselines(reg):
    for i, d in enumerate(DOMAINS):
        cid = reg.resolve({"paradigm": "fakelin", "domain": d, "period": "p2"})
        reg.record_eval(cid, "test", "all", {"recall@10": 0.1 + i / 100, "ndcg@10": 0.05 + i / 100,
                                             "recall@20": 0.2, "ndcg@20": 0.07}, extra={"eval_domain": d})


def test_empty_registry_report_degrades(grid, tmp_path):
    cfg, reg, prep = grid
    cfg.paradigms = ["fakelin"]
    path = write_report(cfg, reg, prep, tmp_path / "r0", diagnostics=False)
    text = path.read_text()
    assert "Not available" in text and "sweep temporal" in text and "cross-domain" in text


def test_full_report_and_tables_equal_registry(grid, counter, tmp_path):
    cfg, reg, prep = grid
    cfg.paradigms = ["fakelin"]
    _record_baselines(reg)
    run_temporal(cfg, reg, prep, evaluator_factory=counter)
    run_cross_domain(cfg, reg, prep, evaluator_factory=counter, merge_fn=fake_merge)
    predict_lambda(cfg, reg, prep, evaluator_factory=counter)
    out = tmp_path / "rep"
    path = write_report(cfg, reg, prep, out)
    text = path.read_text()
    for png in ("figure2_norms.png", "figure3_heatmaps.png", "figure4_alpha.png", "figure5_lambda.png",
                "lambda_regression.png"):
        assert (out / png).stat().st_size > 1000 and f"({png})" in text
    assert "could not be produced" not in text
    m = re.search(r"rho = (-?[0-9.]+)", text)
    assert m and float(m.group(1)) == -1.0 and "falls" in text
    assert "Orbit" in text and "Not available" in text  # no orbit variants here

    # Table 2 cells are the registry's numbers for the ids its appendix names
    t2, prov = tb.table2(cfg, reg, DOMAINS)
    for d, cid in zip(DOMAINS, prov["fakelin"]):
        res = reg.results(id=cid, split="test", group="all", metric="recall@10")
        assert np.isclose(t2.loc["fakelin", (d, "R@10")], 100 * res["value"].iloc[-1])
        assert cid in text
    # Table 3: lambda = 1 row is the sweep at 1.0, the lambda_hat row the lambda_hat study
    temp = temporal_results(reg, paradigm="fakelin")
    hat = temporal_results(reg, paradigm="fakelin", study="lambda_hat")
    t3, _ = tb.table3(temp, hat, DOMAINS)
    q1 = reg.results(study="temporal", domain="A", group="all", metric="ndcg@10", **{"lambda": 1.0})
    assert np.isclose(t3.loc["lambda = 1", ("A", "N@10")], 100 * q1["value"].iloc[-1])
    qh = reg.results(study="lambda_hat", domain="B", group="all", metric="recall@20")
    assert np.isclose(t3.loc["lambda = lambda_hat*", ("B", "R@20")], 100 * qh["value"].iloc[-1])
    # Table 4's lambda* row equals the argmax over the registry's non-active curve
    pred = predict_lambda(cfg, reg, prep, evaluate=False)
    t4, _ = tb.table4(pred)
    curve = reg.results(study="temporal", domain="C", group="non_active", metric="ndcg@10")
    best = curve.loc[curve["value"].idxmax(), "lambda"]
    assert np.isclose(t4.loc["lambda* (non-active users)", "C"], best)


def test_markdown_table():
    df = pd.DataFrame({"a": [1.23456, float("nan")], "b": ["x", "y"]}, index=["r1", "r2"])
    md = markdown_table(df, "{:.2f}")
    assert md.splitlines()[2] == "| r1 | 1.23 | x |" and "| r2 | - | y |" in md


def test_script_grid_parses_the_shared_command_line_and_creates_out(tmp_path, monkeypatch) -> None:
    import sys

    import mmgrid.sweep.results as R

    seen = {}
    monkeypatch.setattr(R, "open_grid", lambda c, o: seen.update(config=c, overrides=o) or ("cfg", "reg", "prep"))
    out = tmp_path / "figs" / "deep"
    monkeypatch.setattr(sys, "argv", ["x.py", "demo", "train.seed=3", "--out", str(out), "--metric", "recall@10"])
    args, cfg, reg, prep = R.script_grid("doc", lambda p: p.add_argument("--metric", default="ndcg@10"))
    assert (cfg, reg, prep) == ("cfg", "reg", "prep")
    assert seen == {"config": "demo", "overrides": ["train.seed=3"]}
    assert args.metric == "recall@10" and out.is_dir()
