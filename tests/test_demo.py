"""The quick demo end to end, as CI runs it: world -> prepare -> build -> baselines ->
sweeps -> report, through the real command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_quick_demo_writes_a_report_traceable_to_the_registry(tmp_path: Path) -> None:
    out = tmp_path / "quick"
    proc = subprocess.run(
        [sys.executable, "-m", "mmgrid", "demo", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    for heading in ("Table 2", "Figure 2", "Figures 3 and 4", "Figure 5", "Tables 3 and 4"):
        assert heading in report
    for png in ("figure2_norms.png", "figure5_lambda.png"):
        assert (out / png).stat().st_size > 1000
    page = (out / "report.html").read_text()  # the interactive report beside report.md, one file
    assert "Plotly" in page and 'id="grid-data"' in page and "Figure 5" in page

    from mmgrid import Registry

    reg = Registry.open(out / "registry")
    # every id the report cites as provenance of Table 2 is a checkpoint of the registry
    appendix = report[report.index("**Table 2**"):]
    appendix = appendix[: appendix.index("\n**", 3)]
    cited = re.findall(r"`([0-9a-f]{16})`", appendix)
    assert len(cited) >= 8
    assert all(reg.has(c) for c in cited)
    # two training seeds for every cell Table 2 and the temporal study use; intervals beside every value
    trained = reg.query(kind="trained", variant="default")
    trained = trained[trained["paradigm"] != "popular"]  # most-popular: deterministic, stored once
    seeds = trained.groupby(["paradigm", "domain", "period"])["seed"].apply(lambda s: sorted(set(s)))
    assert len(seeds) == 4 * 2 * 3  # the shared pretrain stage (train.shared_stages): trained on the first seed only
    assert all(v == ([0] if period == "pretrain" else [0, 1]) for (_, _, period), v in seeds.items())
    assert set(reg.query(kind="trained", variant="orbit-sd-0.007")["seed"]) == {0}  # regularizer rows: first seed
    res = reg.results(split="test", group="all", metric="ndcg@10")
    assert {"ci_low", "ci_high", "seed", "per_user"} <= set(res.columns)
    assert (res["ci_low"] <= res["value"]).all() and (res["value"] <= res["ci_high"]).all()
    assert set(reg.results(study="temporal")["seed"]) == {0, 1}
    row = res[res["kind"] == "trained"].iloc[0]
    assert reg.per_user(row)["ndcg@10"].mean() == row["value"]
    # the README example right after the demo: one checkpoint on another domain
    other = next(d for d in ("Books", "Phones") if d != row["domain"])
    ev = subprocess.run([sys.executable, "-m", "mmgrid", "eval", "--registry", str(out / "registry"), row["id"],
                         "--domain", other], capture_output=True, text=True, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    # the baseline table printed by the demo shows every paradigm and the reference rows
    for row in ("Text-grounded (BIGRec)", "SemID (LC-Rec)", "SemEmb (HLLM)", "SASRec", "Most popular"):
        assert row in proc.stdout  # the names of report.md's Table 2
    # a rerun is a cache hit: nothing is trained again
    again = subprocess.run(
        [sys.executable, "-m", "mmgrid", "build", "demo", "--no-progress", *_paths(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert re.search(r"\(0 trained, \d+ cached\)", again.stdout), again.stdout


def _paths(out: Path) -> list[str]:
    from mmgrid.cli.demo import QUICK_OVERRIDES

    return [*QUICK_OVERRIDES, f"data.root={out / 'world'}", f"prepared={out / 'prepared'}", f"registry={out / 'registry'}"]


@pytest.mark.slow
def test_rolling_demo_deploys_every_period_and_writes_its_report_section(tmp_path: Path) -> None:
    """`mmgrid demo --rolling` (made smaller here): four quarters on two domains, every strategy deployed after
    each, the report's 'Deployment over time' section with its verdicts and figures."""
    out = tmp_path / "rolling"
    small = ["world.scale=0.4", "train.max_examples=120", "eval.max_users=50", "data.lm_text_docs=600"]
    proc = subprocess.run([sys.executable, "-m", "mmgrid", "demo", "--rolling", "--out", str(out), *small],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    section = report[report.index("## Deployment over time"):]
    assert "lambda chosen from the past beats lambda = 1 over the windows" in section
    assert "| latest |" in section and "| magmax |" in section and "BWT" in section
    for png in ("rolling_curves.png", "rolling_matrix.png"):
        assert (out / png).stat().st_size > 1000

    from mmgrid import Registry

    res = Registry.open(out / "registry").results(study="rolling", group="all", metric="ndcg@10")
    dep = res[res["deploy"].astype(bool) & (res["strategy"] == "latest")]
    # deployed after q1..q4 on the next window, per domain
    assert sorted(set(zip(dep["deployed_at"], dep["window"]))) == [("q1", "q2"), ("q2", "q3"), ("q3", "q4"),
                                                                   ("q4", "q5")]
    # lambda_hat_past on the prepared data's period statistics: lambda = 1 at q1 (no pair), then the mean of the
    # past lambda* or Eq. 11's fit, each record saying which, within the lambda grid
    hat = res[res["deploy"].astype(bool) & (res["strategy"] == "lambda_hat_past")].sort_values("t")
    assert len(hat) == len(dep) and set(hat["lambda_rule"]) <= {"fallback_one", "fallback_mean_past", "eq11_fit"}
    assert (hat[hat["t"] == 1]["lambda"] == 1.0).all() and (hat[hat["t"] == 1]["lambda_rule"] == "fallback_one").all()
    assert "eq11_fit" in set(hat["lambda_rule"])  # two domains x pairs before q4: enough for the line
