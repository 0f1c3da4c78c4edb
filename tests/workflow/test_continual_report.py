"""The quick demo runs the continual-merging study, and its report shows Table 3's continual rows and the
verdict "lambda scaling beats the best continual-merging baseline"; one row's numbers are recomputed here
from the registry's per-user values (the records the study wrote), not through mmgrid's study code."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.workflow.conftest import mmgrid

pytestmark = pytest.mark.slow

CLAIM = "lambda scaling beats the best continual-merging baseline"


def _table_after(text: str, caption: str) -> pd.DataFrame:
    lines = text[text.index(caption) + len(caption):].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    block = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        block.append([c.strip() for c in ln.strip("|").split("|")])
    return pd.DataFrame([r[1:] for r in block[2:]], index=[r[0] for r in block[2:]], columns=block[0][1:])


def test_the_quick_demo_report_has_the_continual_rows_and_the_verdict(quick_demo: Path) -> None:
    from mmgrid import Registry

    text = (quick_demo / "report.md").read_text()
    sec = text[text.index("**Table 3, continual merging**"):text.index("## Orbit")]
    means = _table_after(sec, "*All users*, mean [95% interval]:")
    diffs = _table_after(sec, "*All users*, minus lambda = 1 (% points) [95% interval] (p Holm):")
    assert {"lambda = 1 (theta_t2)", "MagMax", "OPCM", "DOP", "task arithmetic (1/2 each)", "TIES (density 0.2)"} <= set(means.index)
    assert list(means.columns) == ["Books", "Phones", "all domains"]
    for g in ("Active", "Non-active"):
        assert f"*{g} users*, mean [95% interval]:" in sec
    # OPCM on Phones, all users: the mean over both seeds' users of the records' per-user NDCG@10, in %
    reg = Registry.open(quick_demo / "registry")
    res = reg.results(study="temporal_continual", metric="ndcg@10", group="all")
    rows = res[(res["strategy"] == "opcm") & (res["domain"] == "Phones")]
    assert sorted(rows["seed"].astype(int)) == [0, 1]  # one record per training seed of the quick demo
    vals = np.concatenate([reg.per_user(r)["ndcg@10"].to_numpy(float) for _, r in rows.iterrows()])
    cell = re.fullmatch(r"(\d+\.\d\d) \[(\d+\.\d\d), (\d+\.\d\d)\]", means.loc["OPCM", "Phones"])
    assert cell and float(cell.group(1)) == pytest.approx(vals.mean() * 100, abs=0.0051)
    assert float(cell.group(2)) < float(cell.group(1)) < float(cell.group(3))
    ref = res[(res["strategy"] == "lambda=1") & (res["domain"] == "Phones")]
    base = np.concatenate([reg.per_user(r)["ndcg@10"].to_numpy(float) for _, r in ref.iterrows()])
    diff = float(diffs.loc["OPCM", "Phones"].split()[0])
    assert diff == pytest.approx((vals.mean() - base.mean()) * 100, abs=0.0101)
    # the verdict line in the Findings, with its numbers, and the page shows the same rows
    findings = text[text.index("## Findings"):text.index("## Table 2")]
    line = next(ln for ln in findings.splitlines() if CLAIM in ln)
    assert re.match(rf"- \*\*(holds|does not hold|inconclusive)\*\* at 95%: Table 3: {CLAIM} \(N@10, all users of 2 "
                    r"domain\(s\) pooled, 2 seed\(s\): lambda", line), line
    assert re.search(r"difference [+-]\d+\.\d\d \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\] pts", line)
    page = (quick_demo / "report.html").read_text()
    assert 'id="continual"' in page and CLAIM in page


def test_a_rerun_of_the_continual_study_is_cached(quick_demo: Path) -> None:
    before = mmgrid("results", "--registry", str(quick_demo), "--study", "temporal_continual", "--format", "csv")
    assert before.returncode == 0, before.stderr
    proc = mmgrid("sweep", "continual", str(quick_demo))
    assert proc.returncode == 0, proc.stderr
    assert CLAIM in proc.stdout
    after = mmgrid("results", "--registry", str(quick_demo), "--study", "temporal_continual", "--format", "csv")
    assert len(after.stdout.splitlines()) == len(before.stdout.splitlines()) > 1  # the demo recorded every strategy
