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


@pytest.mark.parametrize(("override", "match"), [
    ("train.batch_size=0", r"train\.batch_size: 0 is out of range; accepted: in \[1, 1e\+06\]"),
    ("train.lr=.nan", r"train\.lr: nan is not a finite number"),
    ("train.lr=0", r"train\.lr: 0\.0 is out of range; accepted: > 0"),
    ("train.epochs.p1=-2", r"train\.epochs\.p1: -2 is out of range; accepted: in \[0, 10000\]"),
    ("train.epochs.p1=2.5", r"train\.epochs\.p1: expected an integer"),
    ("train.max_examples=-5", r"train\.max_examples: -5 is out of range; accepted: in \[1, 1e\+10\]"),
    ("train.weight_decay=-0.1", r"train\.weight_decay: -0\.1 is out of range"),
    ("base.vocab_size=10", r"base\.vocab_size: 10 is out of range; accepted: in \[260, 1e\+06\]"),
    ("base.lm_lr=.inf", r"base\.lm_lr: inf is not a finite number"),
    ("eval.ks=[10, 0]", r"eval\.ks\[1\]: 0 is out of range"),
    ("eval.max_users=0", r"eval\.max_users: 0 is out of range"),
    ("data.kcore=0", r"data\.kcore: 0 is out of range"),
    ("data.lm_heldout_share=1", r"data\.lm_heldout_share: 1\.0 is out of range; accepted: in \[0, 1\)"),
    ("sweeps.temporal.step=0", r"sweeps\.temporal\.step: 0\.0 is out of range; accepted: in \[1e-06, 200\]"),
    ("sweeps.temporal.step=1e-9", r"sweeps\.temporal\.step: 1e-09 is out of range; accepted: in \[1e-06, 200\]"),
    ("sweeps.temporal.step=1e-5", r"sweeps\.temporal: the grid from 0 to 1\.5 in steps of 1e-05 has 150,001 lambda points"),
    ("sweeps.temporal.start=-1e300", r"sweeps\.temporal\.start: -1e\+300 is out of range; accepted: in \[-100, 100\]"),
    ("sweeps.temporal.stop=1e300", r"sweeps\.temporal\.stop: 1e\+300 is out of range"),
    ("sweeps.cross_domain.alphas=[0.5, 1e300]", r"alphas\[1\]: 1e\+300 is out of range"),
    ("sweeps.calibrate.replicates=100000000", r"replicates: 100000000 is out of range; accepted: in \[1, 10000\]"),
    ("train.seeds=" + str(list(range(1001))), r"train\.seeds: 1,001 seeds; at most 1000"),
    ("sweeps.predict_lambda.features=[]", r"sweeps\.predict_lambda\.features: empty"),
    ("sweeps.temporal.start=2", r"sweeps\.temporal: start 2\.0 is after stop 1\.5"),
    ("sweeps.cross_domain.alphas=[0.5, .nan]", r"alphas\[1\]: nan is not a finite number"),
    ("sweeps.predict_lambda.level=1", r"level: 1\.0 is out of range; accepted: in \(0, 1\)"),
    ("world.end=2020-01-01", r"world: start 2021-01-01 is not before end 2020-01-01"),
    ("train.lr=[", r"override 'train\.lr=\[': the value '\[' is not valid YAML"),
])
def test_out_of_range_numbers_are_named_before_anything_runs(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_grid("demo", [override])


def test_numbers_written_as_strings_are_numbers() -> None:
    """YAML 1.1 reads 1e-4 as a string; a float field takes it, an int field takes integral values only."""
    cfg = load_grid("demo", ["train.lr=1e-4", "train.epochs.p1=2.0", "train.batch_size='1e1'"])
    assert cfg.train.lr == 1e-4 and isinstance(cfg.train.lr, float)
    assert cfg.train.epochs["p1"] == 2 and isinstance(cfg.train.epochs["p1"], int)
    assert cfg.train.batch_size == 10 and isinstance(cfg.train.batch_size, int)
    with pytest.raises(ConfigError, match="expected a number"):
        load_grid("demo", ["train.lr=fast"])


def test_regularizer_parameters_have_ranges() -> None:
    from mmgrid.train.regularizers import check_params

    for name, params, match in [("orbit", {"epsilon": -0.1}, "epsilon: -0.1 is out of range"),
                                ("orbit", {"epsilon": float("nan")}, "epsilon: nan is not a finite number"),
                                ("soup_to_go", {"every": 0}, "every: 0 is out of range"),
                                ("l2_init", {"lam": -1}, "lam: -1.0 is out of range")]:
        with pytest.raises(ConfigError, match=match):
            check_params(name, params, where="variants[0]")


def test_a_grid_built_in_code_is_range_checked_by_the_validation_pass() -> None:
    from mmgrid.validate import validate_grid

    with pytest.raises(ConfigError, match=r"^train\.batch_size: 0 is out of range"):
        validate_grid(GridConfig(name="x", train=TrainConfig(batch_size=0)))
