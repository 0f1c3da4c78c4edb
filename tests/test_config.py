"""The typed grid spec (mmgrid/config/): loading, the round trip a job makes, phases and dates."""

from __future__ import annotations

import pytest

from mmgrid.config import (GRIDS_DIR, PAPER_PHASES, GridConfig, TrainConfig, grid_from_dict, load_grid, parse_date_ms,
                           resolve_grid_path)
from mmgrid.data.phases import phase_windows
from mmgrid.errors import ConfigError


def test_a_job_gets_the_same_typed_grid_back_from_its_dict() -> None:
    cfg = load_grid("demo", ["train.max_examples=256", "train.seed=3"])
    again = grid_from_dict(cfg.to_dict())
    assert again == cfg and again.hash() == cfg.hash()
    assert isinstance(again.train, TrainConfig) and again.train.max_examples == 256


def test_packaged_grids_are_found_by_name() -> None:
    assert resolve_grid_path("demo") == GRIDS_DIR / "demo.yaml"
    assert isinstance(load_grid("amazon2023"), GridConfig)
    with pytest.raises(ConfigError, match="not found"):
        resolve_grid_path("no-such-grid")


def test_paper_phases_as_windows_by_hand() -> None:
    w = phase_windows(PAPER_PHASES)
    day = 86_400_000
    assert w["pretrain"] == (None, parse_date_ms("2022-07-01", "x"))
    assert parse_date_ms("1970-01-02", "x") == day
    # 2022-07-01 is day 19174 since 1970-01-01; p1 ends 92 days later (Jul 31 + Aug 31 + Sep 30)
    assert w["p1"] == (19174 * day, (19174 + 92) * day)
    assert list(w) == ["pretrain", "p1", "p2", "test"]


@pytest.mark.parametrize("phases, match", [
    ("{a: [null, '2022-01-01'], b: ['2021-12-01', null]}", "'b' starts before 'a' ends"),
    ("{a: ['2022-02-01', '2022-01-01']}", "data.phases.a: start 2022-02-01 is not before end 2022-01-01"),
    ("{a: [null, '2022-13-01']}", r"data.phases.a\[1\]: '2022-13-01' is not a date of the form YYYY-MM-DD"),
    ("{a: ['2022-01-01']}", "expected \\[start, end\\] dates"),
])
def test_bad_phases_are_named_errors(phases: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_grid("demo", [f"data.phases={phases}", "train.stages=[a]", "train.epochs={a: 1}"])
