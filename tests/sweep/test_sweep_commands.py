"""The CLI sub-commands on the fake grid (the grid opener is swapped for the fixture)."""

from __future__ import annotations

import pytest

from mmgrid.cli import main
from mmgrid.cli import sweep as commands
from mmgrid.sweep import evaluation


@pytest.fixture()
def cli_grid(grid, counter, monkeypatch):
    cfg, reg, prep = grid
    cfg.paradigms = ["fakelin"]
    monkeypatch.setattr(commands, "open_study", lambda args: (cfg, reg, prep))
    monkeypatch.setattr(evaluation, "default_evaluator_factory", counter)
    import mmgrid.sweep.temporal as temporal

    monkeypatch.setattr(temporal, "default_evaluator_factory", counter)
    return cfg, reg, prep


def test_temporal_then_predict_new_domain(cli_grid, capsys, tmp_path):
    assert main(["sweep", "temporal", "grid.yaml"]) == 0
    out = capsys.readouterr().out
    assert "7 lambdas x 5 domains" in out and "non_active" in out
    assert main(["predict-lambda", "grid.yaml", "--stats", "avg_gap_days=250", "--stats", "p_active=0.5"]) == 0
    out = capsys.readouterr().out
    assert "falls" in out and "lambda*_pred = 1.125" in out  # 1.75 - 0.0025 * 250
    assert main(["report", "grid.yaml", "--out", str(tmp_path / "r"), "--no-diagnostics"]) == 0
    assert (tmp_path / "r" / "report.md").is_file()


def test_bad_stats_is_a_named_error(cli_grid, capsys):
    assert main(["predict-lambda", "grid.yaml", "--stats", "gap"]) == 2
    assert "NAME=NUMBER" in capsys.readouterr().err
