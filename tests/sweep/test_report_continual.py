"""Table 3's continual-merging rows and the verdict "lambda scaling beats the best continual-merging
baseline" in report.md, report.html and the console, from the typed study results.

The registry is the in-memory one of test_report_intervals.py (per-user values drawn from known hit
rates), with the continual study's records added: each strategy has a known hit rate per domain, so
the best baseline and the verdict are known, and every number the report shows is recomputed here
straight from the per-user values the records point to (not through mmgrid's study code).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from mmgrid.config import GridConfig
from mmgrid.configtools import build
from mmgrid.errors import ConfigError
from mmgrid.sweep.continual import CLAIM, STUDY, run_seeds
from mmgrid.render.report import FINDINGS, console_continual, console_findings, findings_lines, render_markdown, write_report
from mmgrid.render.report_html import render_html
from mmgrid.sweep.study_records import Section, StudyResults
from mmgrid.sweep.study_results import compute_study_results, continual_findings, continual_results
from sweep_fakes import DOMAINS, FakePrepared
from test_report_intervals import LAMS, SEEDS, PerUserRegistry

# hit rates: lambda_hat* best, then lambda = 1, then the continual merges (OPCM the best of them)
RATES = {"lambda=1": 0.40, "lambda_hat*": 0.50, "magmax": 0.15, "opcm": 0.30, "dop": 0.25,
         "task_arithmetic": 0.20, "ties": 0.22}
LABEL = {"lambda=1": "lambda = 1 (theta_t2)", "lambda_hat*": "lambda_hat* (Eq. 11)", "magmax": "MagMax", "opcm": "OPCM"}


class ContinualRegistry(PerUserRegistry):
    def add_continual(self, domain: str, seed: int, strategy: str, frame: pd.DataFrame | None = None) -> None:
        f = frame if frame is not None else self._frame(domain, RATES[strategy])
        self._record(f, id=None, paradigm="fakelin", variant="default", domain=domain, seed=seed, study=STUDY,
                     strategy=strategy, recipe_hash=f"cont-{strategy}-{domain}-{seed}", recipe="{}", eval_domain=domain,
                     **{"lambda": 0.8 if strategy == "lambda_hat*" else (1.0 if strategy == "lambda=1" else None)})

    def frames(self, strategy: str, domain: str, group: str = "all", metric: str = "ndcg@10") -> list[pd.DataFrame]:
        """The per-user frames of one strategy's records, one per seed (read without mmgrid's study code)."""
        rows = [r for r in self.rows if r.get("study") == STUDY and r.get("strategy") == strategy
                and r["domain"] == domain and r["group"] == group and r["metric"] == metric]
        return [self.files[r["key"]] for r in sorted(rows, key=lambda r: r["seed"])]


def _cfg(tmp_path) -> GridConfig:
    return build(GridConfig, {"name": "t", "registry": str(tmp_path / "reg"), "prepared": str(tmp_path / "prep"),
                              "paradigms": ["text", "semid", "emb", "sasrec"],
                              "train": {"stages": ["pretrain", "p1", "p2"], "seeds": SEEDS},
                              "sweeps": {"temporal": {"paradigm": "fakelin", "start": 0.0, "stop": 1.5, "step": 0.25}}})


def _registry(tmp_path, continual: bool = True, tie: bool = False, others: bool = True) -> ContinualRegistry:
    """Checkpoints and the temporal sweep (the report's Tables 2-4; ``others``), then the continual study's
    records. ``tie``: lambda_hat* gets OPCM's per-user values with 20 users' hits moved (10 up, 10 down): the
    same mean, no difference."""
    reg = ContinualRegistry(tmp_path / "reg")
    for p in ("text", "semid", "emb", "sasrec") if others else ():
        for d in DOMAINS:
            for s in SEEDS:
                reg.add_checkpoint(p, d, s)
    for d in DOMAINS if others else ():
        reg.add_checkpoint("popular", d, None)
        for s in SEEDS:
            for lam in LAMS:
                reg.add_temporal(d, s, lam)
    if continual:
        for d in DOMAINS:
            for s in SEEDS:
                frames = {}
                for strat in sorted(RATES, key=lambda x: x == "lambda_hat*"):  # OPCM before its tie
                    if tie and strat == "lambda_hat*":
                        f = frames["opcm"].copy()
                        hit, miss = np.flatnonzero(f["recall@10"] > 0)[:10], np.flatnonzero(f["recall@10"] == 0)[:10]
                        for c, scale in (("recall@10", 1.0), ("ndcg@10", 0.5), ("recall@20", 1.0), ("ndcg@20", 0.55)):
                            f.loc[hit, c], f.loc[miss, c] = 0.0, scale
                        frames[strat] = f
                    else:
                        frames[strat] = reg._frame(d, RATES[strat])
                    reg.add_continual(d, s, strat, frames[strat])
    return reg


def _section(text: str) -> str:
    return text[text.index("**Table 3, continual merging**"):text.index("## Orbit")]


def _table(text: str, caption: str) -> pd.DataFrame:
    """The Markdown table right after ``caption`` as strings (index: the row labels)."""
    rest = text[text.index(caption) + len(caption):]
    lines = [ln for ln in rest.splitlines() if ln.startswith("|")]
    block = []
    for ln in rest.splitlines()[rest.splitlines().index(lines[0]):]:
        if not ln.startswith("|"):
            break
        block.append([c.strip() for c in ln.strip("|").split("|")])
    head, body = block[0], block[2:]
    return pd.DataFrame([r[1:] for r in body], index=[r[0] for r in body], columns=head[1:])


def _mean(frames: list[pd.DataFrame], metric: str = "ndcg@10") -> float:
    return float(np.concatenate([f[metric].to_numpy(float) for f in frames]).mean())


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """report.md, report.html and the console lines of one report, computed once (the typed results)."""
    tmp = tmp_path_factory.mktemp("continual-report")
    reg = _registry(tmp)
    results = compute_study_results(_cfg(tmp), reg, FakePrepared(), diagnostics=False)
    text = render_markdown(results, tmp)
    out = "\n".join(console_findings(results) + console_continual(results))
    return reg, text, render_html(results, None), out


def test_table3_holds_the_continual_rows_with_the_numbers_of_the_per_user_values(report):
    reg, text, _, _ = report
    sec = _section(text)
    means = _table(sec, "*All users*, mean [95% interval]:")
    diffs = _table(sec, "*All users*, minus lambda = 1 (% points) [95% interval] (p Holm):")
    assert list(means.columns) == [*DOMAINS, "all domains"]
    assert {"lambda = 1 (theta_t2)", "lambda_hat* (Eq. 11)", "MagMax", "OPCM", "DOP", "task arithmetic (1/2 each)",
            "TIES (density 0.2)"} == set(means.index)
    # one row's mean, recomputed from the registry's per-user values: MagMax on domain C, both seeds' users
    cell = means.loc["MagMax", "C"]
    m = re.fullmatch(r"(\d+\.\d\d) \[(\d+\.\d\d), (\d+\.\d\d)\]", cell)
    assert m, cell
    want = _mean(reg.frames("magmax", "C")) * 100
    assert float(m.group(1)) == pytest.approx(want, abs=0.0051)
    assert float(m.group(2)) < float(m.group(1)) < float(m.group(3))
    # the pooled column: every domain's users
    pooled = float(means.loc["OPCM", "all domains"].split()[0])
    assert pooled == pytest.approx(_mean([f for d in DOMAINS for f in reg.frames("opcm", d)]) * 100, abs=0.0051)
    # the paired difference to lambda = 1 on the same users: MagMax - lambda = 1 on C, with its Holm p
    d = re.fullmatch(r"([+-]\d+\.\d\d) \[([+-]\d+\.\d\d), ([+-]\d+\.\d\d)\] \(p (<0\.001|\d\.\d{3})\)",
                     diffs.loc["MagMax", "C"])
    assert d, diffs.loc["MagMax", "C"]
    want_diff = (_mean(reg.frames("magmax", "C")) - _mean(reg.frames("lambda=1", "C"))) * 100
    assert float(d.group(1)) == pytest.approx(want_diff, abs=0.0101)
    assert float(d.group(3)) < 0  # 0.15 against 0.40 hit rate on 600 users: clearly worse
    assert (diffs.loc["lambda = 1 (theta_t2)"] == "reference").all()
    # the active and non-active users have their own tables
    for g in ("Active", "Non-active"):
        t = _table(sec, f"*{g} users*, mean [95% interval]:")
        assert "OPCM" in t.index and "all domains" in t.columns
    want_na = _mean(reg.frames("dop", "B", "non_active")) * 100
    assert float(_table(sec, "*Non-active users*, mean [95% interval]:").loc["DOP", "B"].split()[0]) == pytest.approx(
        want_na, abs=0.0051)
    # provenance: the recipe hashes behind the all-users rows are in the appendix
    assert "cont-magmax-C-0" in text[text.index("## Appendix"):]


def test_the_verdict_line_is_in_the_findings_with_its_numbers(report):
    reg, text, page, out = report
    findings = text[text.index("## Findings"):text.index("## Table 2")]
    assert len([ln for ln in findings.splitlines() if ln.startswith("- ") and "at 95%" in ln]) == len(FINDINGS)
    line = next(ln for ln in findings.splitlines() if CLAIM in ln)
    assert line.startswith(f"- **holds** at 95%: Table 3: {CLAIM} (")
    # lambda_hat* (0.50) against the best continual merge, OPCM (0.30): the pooled numbers, in %
    m = re.search(r"lambda_hat\* \(Eq\. 11\) (\d+\.\d\d) vs the best continual merge, OPCM, (\d+\.\d\d); "
                  r"difference ([+-]\d+\.\d\d) \[([+-]\d+\.\d\d), ([+-]\d+\.\d\d)\] pts", line)
    assert m, line
    hat = _mean([f for d in DOMAINS for f in reg.frames("lambda_hat*", d)]) * 100
    opcm = _mean([f for d in DOMAINS for f in reg.frames("opcm", d)]) * 100
    assert float(m.group(1)) == pytest.approx(hat, abs=0.0051) and float(m.group(2)) == pytest.approx(opcm, abs=0.0051)
    assert float(m.group(3)) == pytest.approx(hat - opcm, abs=0.0101) and float(m.group(4)) > 0
    assert "oracle" not in line.split("(", 1)[1]  # lambda_hat* was recorded: no stand-in
    # report.html: the tables and the verdict badge; the console: the pooled rows and the verdict
    assert 'id="continual"' in page and "OPCM" in page and f"{CLAIM}" in page
    assert re.search(r'<span class="verdict holds">holds</span> Table 3: ' + re.escape(CLAIM), page)
    assert f"holds  Table 3: {CLAIM}" in out
    assert re.search(r"OPCM\s+\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]\s+-\d+\.\d\d \[", out), out


def test_an_inconclusive_verdict_carries_its_mde_note(tmp_path):
    cfg = _cfg(tmp_path)
    c = continual_results(cfg, _registry(tmp_path, tie=True, others=False))
    found = continual_findings(c)
    assert [f.key for f in found] == ["t3_continual"] and found[0].verdict == "inconclusive"
    results = StudyResults(cfg, list(DOMAINS), {"prediction": Section("prediction", "Tables 3 and 4",
                                                                       SimpleNamespace(findings=found))})
    findings = findings_lines(results)
    i = next(k for k, ln in enumerate(findings) if CLAIM in ln)
    assert findings[i].startswith(f"- **inconclusive** at 95%: Table 3: {CLAIM}")
    assert "difference +0.00 [" in findings[i]  # lambda_hat* and OPCM: the same hits, moved between users
    assert re.match(r"  - inconclusive: this run detects \|difference\| >= \d+\.\d\d pts at 80% power", findings[i + 1])


def test_without_continual_records_the_table_says_how_to_get_them(tmp_path, capsys, monkeypatch):
    import mmgrid.sweep.grid_view as G

    reg = _registry(tmp_path, continual=False)
    monkeypatch.setattr(G, "grid_view", lambda cfg, reg: None)  # the page's grid reads lineage the fake lacks
    text = write_report(_cfg(tmp_path), reg, FakePrepared(), tmp_path / "rep", diagnostics=False, html=True).read_text()
    sec = text[text.index("**Table 3**"):text.index("## Orbit")]
    assert "**Table 3, continual merging**: _no continual-merging evaluations recorded: run `mmgrid sweep continual RUN`" in sec
    line = next(ln for ln in text.splitlines() if CLAIM in ln and ln.startswith("- "))
    assert line.startswith("- *not evaluated*")
    assert "mmgrid sweep continual RUN" in (tmp_path / "rep" / "report.html").read_text()
    assert "Table 3, continual merging: no continual-merging evaluations recorded" in capsys.readouterr().out


def test_run_seeds_names_a_seed_the_grid_does_not_have(tmp_path):
    cfg = _cfg(tmp_path)
    assert run_seeds(cfg, None) == SEEDS and run_seeds(cfg, [SEEDS[0]]) == [SEEDS[0]]
    with pytest.raises(ConfigError, match=r"seeds \[7\] must be a non-empty subset of the grid's training seeds \[0, 1\]"):
        run_seeds(cfg, [7])
    with pytest.raises(ConfigError, match="non-empty"):
        run_seeds(cfg, [])
