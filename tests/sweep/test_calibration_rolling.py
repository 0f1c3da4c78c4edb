"""The calibration of the rolling verdicts (``mmgrid calibrate --rolling``) on its smoke plan: the checkpoint
world's planted drift is seen, the null world's is not a planted effect, every inconclusive verdict prints its
minimum detectable effect, and a bad plan is a named error before anything is written."""

from __future__ import annotations

import dataclasses
import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from mmgrid.errors import ConfigError


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from mmgrid.render.calibration import write_rolling_calibration
    from mmgrid.sweep.calibration.rolling import SMOKE, run_rolling_calibration

    out = tmp_path_factory.mktemp("rollcal")
    res = run_rolling_calibration(SMOKE, out, progress=False)
    write_rolling_calibration(SMOKE, res, out)
    return out, res


def test_the_smoke_plan_sees_a_persistent_drift_and_no_effect_without_one(smoke):
    from mmgrid.sweep.calibration.rolling import SMOKE
    from mmgrid.sweep.rolling import CLAIM_BEST, CLAIM_PAST

    out, res = smoke
    rows = {(r["key"], r["size"]): r for r in res["rows"]}
    assert set(rows) == {(k, s) for k in ("past", "best") for s in SMOKE.sizes}
    assert all(r["n"] == SMOKE.replicates for r in rows.values())
    assert rows[("past", 0.0)]["claim"] == CLAIM_PAST and rows[("best", 0.0)]["claim"] == CLAIM_BEST
    # drift 0.5: lambda* = 1.5 + e_j on the past windows, and lambda = 1.5 beats lambda = 1 by over twice the MDE
    # (an interval over the 4 cells where lambda*_past differs from latest: t with 3 degrees of freedom)
    drift = rows[("past", 0.5)]
    assert drift["holds"]["rate"] == 1.0 and drift["diff_mean"] > 2 * drift["mde_mean"] > 0
    # no drift: a lambda fitted to a window's own displacement only adds error, on average it loses to lambda = 1
    assert rows[("past", 0.0)]["diff_mean"] < drift["diff_mean"] / 10
    # the best strategy is judged at the family level: where lambda*_past holds at 95%, the best's interval is
    # wider (the same difference, a higher level) and the named strategy is one whose interval lies above 0
    for run in res["runs"]:
        past, best = run["claims"]["past"], run["claims"]["best"]
        assert best["level"] > past["level"]
        if best["strategy"] == "lambda*_past" and math.isfinite(past["ci"][0]):
            assert best["ci"][0] <= past["ci"][0] and best["ci"][1] >= past["ci"][1]
        if best["verdict"] == "holds":
            assert best["ci"][0] > 0


def test_each_run_holds_what_its_verdict_was_judged_on(smoke):
    from mmgrid.stats.verdict import verdict
    from mmgrid.sweep.rolling import CLAIM_PAST, available

    n_strategies = len(available()) - 1  # every strategy but latest

    out, res = smoke
    for run in res["runs"]:
        for c in run["claims"].values():
            lo, hi = c["ci"]
            assert c["verdict"] == verdict(lo, hi, "greater")
            assert lo <= c["diff"] <= hi
            # MDE = (z_{1-alpha/2} + z_0.8) x SE, SE = width / (2 z_{1-alpha/2}), alpha = 1 - the level judged at:
            # 95% for lambda*_past, 1 - 0.05 / K for the best of the K strategies compared with latest
            z = NormalDist().inv_cdf(1 - (1 - c["level"]) / 2)
            assert c["level"] == pytest.approx(0.95 if c["claim"] == CLAIM_PAST else 1 - 0.05 / n_strategies)
            assert c["mde"] == pytest.approx((z + 0.8416) * (hi - lo) / (2 * z), rel=1e-3) or (hi == lo and
                                                                                            math.isnan(c["mde"]))
            assert c["noted"] == (c["inconclusive"] and math.isfinite(c["mde"]))  # the MDE beside inconclusive
    for r in res["rows"]:
        assert r["inconclusive_noted"] == r["inconclusive"]
        holds = [run["claims"][r["key"]]["verdict"] == "holds" for run in res["runs"] if run["size"] == r["size"]]
        assert r["holds"]["hits"] == sum(holds) and r["holds"]["mcse"] == pytest.approx(
            math.sqrt(np.mean(holds) * (1 - np.mean(holds)) / len(holds)))
    on_disk = json.loads((out / "rolling_calibration.json").read_text())
    assert on_disk["plan"]["replicates"] == res["plan"]["replicates"]
    text = (out / "rolling_calibration.md").read_text()
    assert "type-I error at drift 0" in text and text.count("| lambda chosen from the past") == 2


def test_a_bad_plan_is_a_named_error_before_anything_is_written(tmp_path):
    from mmgrid.sweep.calibration.rolling import SMOKE, run_rolling_calibration

    for bad, what in ((dict(replicates=0), "replicates 0"), (dict(sizes=(0.0, -1.0)), "sizes"),
                      (dict(noise=float("nan")), "noise"), (dict(periods=1), "periods 1")):
        with pytest.raises(ConfigError, match=what):
            run_rolling_calibration(dataclasses.replace(SMOKE, **bad), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_the_command_refuses_bad_sizes_without_a_traceback(tmp_path, capsys):
    from mmgrid.cli import main

    assert main(["calibrate", "--rolling", "--out", str(tmp_path / "o"), "--sizes", "0,x"]) != 0
    assert "give drifts separated by commas" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
