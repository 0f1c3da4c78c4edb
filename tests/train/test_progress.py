"""Progress output: plain lines with rate and ETA when stderr is a log, nothing when quiet or in tests."""

from __future__ import annotations

import io
import os
import re

import pytest

import train_fakes as F
from mmgrid.cli import main as cli_main
from mmgrid.runtime import progress as P
from mmgrid.train.build import build_grid
from mmgrid.train.loop import train_stage


@pytest.fixture
def loud():
    P.set_quiet(False)
    yield
    P.set_quiet(None)


def _stage(progress: bool = True):
    dom = F.make_domain("A")
    par = F.ToyParadigm()
    model = par.build(None, dom, {}, 0)
    ex = par.examples(model, dom, "pretrain")  # 120 examples
    return train_stage(par, model, ex, epochs=2, lr=0.02, batch_size=8, seed=0, progress=progress,
                       where="toy/A/pretrain")


def test_tests_are_quiet_by_default() -> None:
    assert "PYTEST_CURRENT_TEST" in os.environ and P.is_quiet()


def test_logged_stage_prints_plain_lines_with_rate_and_eta(loud, capsys) -> None:
    _stage()
    err = capsys.readouterr().err  # capsys' stderr is not a terminal: plain lines, no bar
    lines = [x for x in err.splitlines() if x.startswith("toy/A/pretrain:")]
    assert lines, err
    assert "\r" not in err  # no tqdm redraws in a log
    # 120 examples / 8 = 15 steps per epoch, 2 epochs; the last line is always printed
    last = lines[-1]
    assert re.match(r"toy/A/pretrain: 100% 30/30 step, [0-9.]+ step/s, elapsed [0-9.]+s, ETA 0\.0s", last), last
    assert "loss=" in last and "epoch=2/2" in last
    assert len(lines) <= 4  # a few lines per step, never one per step


def test_quiet_prints_nothing(monkeypatch, capsys) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.setenv("MMGRID_QUIET", "1")
    assert P.is_quiet()
    _stage()
    out = capsys.readouterr()
    assert out.err == ""


def test_progress_false_prints_nothing(loud, capsys) -> None:
    _stage(progress=False)
    assert capsys.readouterr().err == ""


def test_plain_lines_at_milestones_with_hand_computed_eta(monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(P.time, "perf_counter", lambda: clock[0])
    buf = io.StringIO()
    bar = P.PlainProgress(total=8, desc="job", unit="step", min_interval=0.0, file=buf)
    clock[0] = 110.0
    bar.update(2)  # 25 %: 2 steps in 10 s -> 0.2 step/s, 6 left -> ETA 30 s
    clock[0] = 111.0
    bar.update(1)  # 37.5 %: no milestone, no line
    clock[0] = 120.0
    bar.update(1)  # 50 %: 4 in 20 s, ETA 20 s
    clock[0] = 190.0
    bar.update(4)  # 100 %: the end line (75 % is passed in the same update)
    bar.close()  # idempotent
    assert buf.getvalue().splitlines() == [
        "job:  25% 2/8 step, 0.20 step/s, elapsed 10.0s, ETA 30.0s",
        "job:  50% 4/8 step, 0.20 step/s, elapsed 20.0s, ETA 20.0s",
        "job: 100% 8/8 step, 0.09 step/s, elapsed 1m30s, ETA 0.0s",
    ]


def test_min_interval_thins_milestone_lines(monkeypatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(P.time, "perf_counter", lambda: clock[0])
    buf = io.StringIO()
    bar = P.PlainProgress(total=4, desc="x", min_interval=5.0, file=buf)
    for t in (1.0, 2.0, 3.0, 4.0):  # every milestone within 5 s of the previous line: only the end
        clock[0] = t
        bar.update(1)
    assert len(buf.getvalue().splitlines()) == 1 and "100% 4/4" in buf.getvalue()


def test_logged_build_shows_overall_progress(loud, tmp_path, capsys) -> None:
    cfg = F.make_cfg(tmp_path)
    res = build_grid(cfg, progress=True)
    err = capsys.readouterr().err
    n = len(res.trained)
    assert n > 0 and re.search(rf"^build: 100% {n}/{n} stage, .* ETA 0\.0s", err, re.M), err


def test_cli_quiet_sets_the_environment_for_workers(monkeypatch, capsys) -> None:
    monkeypatch.delenv("MMGRID_QUIET", raising=False)
    assert cli_main(["--quiet"]) == 0  # no command: help, but the flag is taken
    assert os.environ["MMGRID_QUIET"] == "1"
    monkeypatch.delenv("MMGRID_QUIET")
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    assert cli_main(["validate", "demo", "-q"]) == 0  # also after the command
    assert P.is_quiet()
