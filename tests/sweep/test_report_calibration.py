"""The report's side of the calibration study: every inconclusive finding says what the run could
have detected (its MDE, hand-computed from the interval it was judged on), the world's own lambda is the
population value where ``<data.root>/population.json`` holds one (the formula is a labelled fallback), and
report.md / report.html show a ``mmgrid calibrate`` output when there is one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from scipy import stats as sps

from mmgrid.config.data import WorldConfig
from mmgrid.configtools import build
from mmgrid.errors import MmgridError
from mmgrid.stats import FAILS, HOLDS, INCONCLUSIVE
from mmgrid.sweep.calibration.measures import calibrate_finding
from mmgrid.sweep.calibration.population import population_key
from mmgrid.render.report import write_report
from mmgrid.render.report_html import render_html
from mmgrid.sweep.study_results import compute_study_results
from mmgrid.render.report_calibration import CalibrationInputError, read_calibration
from mmgrid.sweep.study_records import FORMULA_LABEL, Finding, with_mde
from test_calibration import _runs
from test_report_intervals import world  # noqa: F401 - the fixture: per-user registry on a synthetic world

Z = sps.norm.ppf(0.975) + sps.norm.ppf(0.8)  # 2.8016: z_0.975 + z_0.8


def _mde(lo: float, hi: float) -> float:
    """MDE = (z_0.975 + z_0.8) SE, SE = width / (2 x 1.96): the normal approximation, by hand."""
    return Z * (hi - lo) / (2 * sps.norm.ppf(0.975))


def test_an_inconclusive_finding_states_its_mde_and_the_published_value():
    f = with_mde(Finding("t4_rho", INCONCLUSIVE, "rho = -0.20 [-0.90, 0.50]", "prediction"), [(-0.9, 0.5)], what="rho")
    x = _mde(-0.9, 0.5)
    assert x == pytest.approx(1.0006, rel=1e-3)
    assert f.note.startswith(f"inconclusive: this run detects |rho| >= {x:.2f} at 80% power")
    # MMGRid's rho -0.886 is below the MDE: the run could not have seen it
    assert "MMGRid reports -0.89, below it" in f.note and "Table 4" in f.note
    # a narrower interval detects it: "above it"
    g = with_mde(Finding("t4_rho", INCONCLUSIVE, "", "prediction"), [(-0.6, 0.1)], what="rho")
    assert f"|rho| >= {_mde(-0.6, 0.1):.2f}" in g.note and "MMGRid reports -0.89, above it" in g.note
    # a difference in % points: the scale multiplies, the unit follows; no published value for Table 2's
    h = with_mde(Finding("t2_emb", INCONCLUSIVE, "", "table2"), [(-0.002, 0.004)], 100.0, " pts", "difference")
    assert h.note == f"inconclusive: this run detects |difference| >= {100 * _mde(-0.002, 0.004):.2f} pts at 80% power"
    # several intervals (one per domain): the mean of their standard errors
    k = with_mde(Finding("f5_not1", INCONCLUSIVE, "", "temporal"), [(0.5, 1.5), (0.8, 1.0)], what="lambda* - 1")
    assert f"|lambda* - 1| >= {_mde(0, 0.6):.2f}" in k.note and "MMGRid reports 0.30" in k.note
    v = with_mde(Finding("f5_varies", INCONCLUSIVE, "", "temporal"), [(-0.4, 0.4)], what="difference")
    assert f"|difference| >= {_mde(-0.4, 0.4):.2f}" in v.note and "MMGRid reports 0.47" in v.note  # Table 4's range
    # only inconclusive findings get a note; no interval: says so
    for v in (HOLDS, FAILS):
        assert with_mde(Finding("t4_rho", v, "", "prediction"), [(-0.9, -0.1)]).note == ""
    assert "no interval" in with_mde(Finding("t4_loo", INCONCLUSIVE, "", "prediction"), [(float("nan"), 1.0)]).note


def _population(cfg, lambdas: dict[str, float]) -> None:
    """Cache population values for the grid's world and budget, as `mmgrid calibrate --population` does."""
    cfg.world = build(WorldConfig, {})  # a synthetic world (its own files are not needed: the report reads the cache)
    (Path(cfg.data.root) / "population.json").write_text(json.dumps(
        {population_key(cfg): {"n_runs": 2, "worlds": 2, "user_scale": 4,
                               "lambda_star": {d: {"all": v, "non_active": v} for d, v in lambdas.items()},
                               "t4_rho": -0.7, "f5_not1": 0.5, "t2_popular": 0.2, "t2_popular_se": 0.01,
                               "t2_each": {}}}))


def _findings(text: str) -> str:
    return text[text.index("## Findings"):text.index("## Table 2")]


def test_the_world_value_is_the_population_value_where_computed(world, tmp_path):  # noqa: F811
    cfg, reg, prep = world
    text = write_report(cfg, reg, prep, tmp_path / "formula", diagnostics=False).read_text()
    # no population.json: the formula, labelled as a fallback that names the command
    assert FORMULA_LABEL in text and "| formula lambda |" in text.replace("|  |", "|")
    assert "`mmgrid calibrate CONFIG --population`" in text
    fs = _findings(text)
    # the world finding (A beyond the grid, E inside) is inconclusive: its MDE note from the intervals
    assert re.search(r"- \*\*inconclusive\*\* at 95%: synthetic world.*\n  - inconclusive: this run detects "
                     r"\|lambda\* - world's value\| >= \d+\.\d\d at 80% power", fs)

    # population values of this world and budget (lambda* 1.25 for A, 0.25 for E)
    _population(cfg, {"A": 1.25, "B": 1.0, "C": 1.0, "D": 0.5, "E": 0.25})
    text = write_report(cfg, reg, prep, tmp_path / "pop", diagnostics=False).read_text()
    assert FORMULA_LABEL not in text and "population value: the argmax" in text
    world_table = text[text.index("Synthetic world"):]
    assert re.search(r"\| A \| 1\.25 \|", world_table) and re.search(r"\| E \| 0\.25 \|", world_table)
    assert "1.84" not in world_table  # the formula's 1 + cos(2 pi 91 / 1000) is gone
    fs = _findings(text)
    assert "population value of this world and budget: rho = -0.70 (2 world(s), 4x the users)" in fs
    assert "max |lambda* - 1| (all users) = 0.50" in fs
    assert "max |lambda*_a - lambda*_b| (all users) = 1.00" in fs  # 1.25 - 0.25: the range of the domains' lambda*
    assert "most-popular N@10 +20.00 pts (SE 1.00)" in fs
    page = render_html(compute_study_results(cfg, reg, prep, diagnostics=False), None)  # (no grid view: a fake registry)
    assert "population lambda*" in page and "rho = -0.70" in page and 'class="finding-note"' in page
    # another budget is another key: the fallback again
    cfg.train.max_examples = (cfg.train.max_examples or 0) + 1
    assert FORMULA_LABEL in write_report(cfg, reg, prep, tmp_path / "other", diagnostics=False).read_text()


def _calibration_json(path) -> None:
    rows = [calibrate_finding("t2_popular", s, _runs(t, 0.01, 40, i), {"t2_popular": t, "t2_popular_se": 0.001})
            for i, (s, t) in enumerate(((0.0, 0.0), (1.0, 0.03)))]
    path.mkdir(parents=True)
    (path / "calibration.json").write_text(json.dumps({"sizes": [0.0, 1.0], "knobs": ["trend"], "replicates": 40,
                                                       "population": {}, "findings": [r.to_dict() for r in rows],
                                                       "seconds_per_replicate": 90.0}))


def test_the_report_shows_a_calibration_output(world, tmp_path, capsys):  # noqa: F811
    cfg, reg, prep = world
    _calibration_json(tmp_path / "run" / "calibrate")  # the run folder's calibrate/ beside the report's folder
    md = write_report(cfg, reg, prep, tmp_path / "run" / "report", diagnostics=False).read_text()
    rec = read_calibration(tmp_path / "run" / "calibrate" / "calibration.json")
    null, planted = rec.rows
    assert null.is_null and not planted.is_null and 0.7 < planted.holds[2] <= 1  # 3 SE above 0: power ~ 85%
    assert "## Calibration" in md and f"| t2_popular | 0 | 0.000 | yes | type-I error {null.holds[2] * 100:.0f}% (MCSE" in md
    assert f"{planted.mde:.3f}" in md and f"{0.01 * Z:.3f}" in md  # MDE = 2.80 x the replicates' SE
    results = compute_study_results(cfg, reg, prep, diagnostics=False)
    assert 'id="calibration"' not in render_html(results, None)  # no calibration output: no section
    results.extras["calibration"] = rec
    page = render_html(results, None)  # (no grid view: a fake registry)
    assert '<section id="calibration">' in page and 'id="calibration-power"' in page and 'href="#calibration"' in page
    assert page.count("<td>t2_popular</td>") == 2
    # the console prints the findings with their notes
    assert "Findings (95% intervals" in capsys.readouterr().out
    # without a calibration output: no section
    md = write_report(cfg, reg, prep, tmp_path / "alone" / "report", diagnostics=False).read_text()
    assert "## Calibration" not in md


def test_a_named_calibration_output_must_exist_before_anything_is_written(world, tmp_path):  # noqa: F811
    cfg, reg, prep = world
    with pytest.raises(CalibrationInputError, match="no calibration.json"):
        write_report(cfg, reg, prep, tmp_path / "rep", diagnostics=False, calibration=tmp_path / "nowhere")
    assert not (tmp_path / "rep" / "report.md").exists()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "calibration.json").write_text("{\"findings\": 3}")
    with pytest.raises(MmgridError, match="not a `mmgrid calibrate` output"):
        write_report(cfg, reg, prep, tmp_path / "rep", diagnostics=False, calibration=tmp_path / "bad")
    assert not (tmp_path / "rep" / "report.md").exists()


def test_a_coverage_of_each_worlds_own_value_says_so(tmp_path):
    """A row measured against each replicate's own world names that target and keeps the configuration's
    coverage beside it; a row measured against the configuration's value reads as before."""
    from mmgrid.render.report_calibration import row_cells

    f = {"finding": "lambda_star", "size": 1.0, "population": None, "is_null": False, "holds": None,
         "coverage": {"hits": 42, "n": 50, "rate": 0.84, "mcse": 0.052}, "bias": None, "mde": None, "n": 20,
         "coverage_of": "own world", "coverage_config": {"hits": 88, "n": 100, "rate": 0.88, "mcse": 0.032}}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"findings": [f, {**f, "coverage_of": "configuration", "coverage_config": None}],
                                "sizes": [1.0], "knobs": ["turnover"], "replicates": 20}))
    own, config = (row_cells(r)[5] for r in read_calibration(path).rows)
    assert own == "84% (MCSE 5%, 42/50) of each world's own value; 88% (MCSE 3%, 88/100) of the configuration's"
    assert config == "84% (MCSE 5%, 42/50)"
