"""Per-user metric files: round-trip, group rows, intervals, refused paths, verify and gc."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pandas as pd
import pytest

from mmgrid.errors import RegistryError
from mmgrid.registry.errors import CorruptBlobError, MissingBlobError, UnsafePathError
from mmgrid.stats import mean_ci

from .conftest import COORDS


def _values(n: int = 40, seed: int = 1) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    users = np.arange(100, 100 + n, dtype=np.int64)
    active = rng.random(n) < 0.4
    metrics = {"recall@10": (rng.random(n) < 0.3).astype(float), "ndcg@10": rng.random(n) * 0.5}
    return users, active, metrics


def test_per_user_file_round_trips_and_is_content_addressed(reg, state) -> None:
    users, active, metrics = _values()
    rel = reg.put_per_user(users, active, metrics)
    assert rel.startswith("peruser/") and rel.endswith(".parquet") and (reg.root / rel).is_file()
    assert reg.put_per_user(users, active, metrics) == rel  # same values, same file
    assert len(list((reg.root / "peruser").glob("*/*.parquet"))) == 1
    cid = reg.put(state(), COORDS, "trained")
    mean = float(metrics["ndcg@10"][~active].mean())
    key = reg.record_eval(cid, "test", "non_active", {"ndcg@10": mean, "n": float((~active).sum())},
                          extra={"per_user": rel})
    df = reg.per_user(key)
    assert list(df.columns) == ["user_idx", "active", "recall@10", "ndcg@10"]
    assert df["user_idx"].dtype == np.int64 and df["active"].dtype == bool
    assert df["user_idx"].tolist() == users[~active].tolist() and not df["active"].any()
    np.testing.assert_array_equal(df["ndcg@10"].to_numpy(), metrics["ndcg@10"][~active])  # bit-exact floats
    row = reg.results(metric="ndcg@10").iloc[0]
    assert row["per_user"] == rel
    assert df["ndcg@10"].mean() == row["value"]
    pd.testing.assert_frame_equal(reg.per_user(row), df)


def test_results_have_ci_columns_and_nan_without_an_interval(reg, state) -> None:
    users, active, metrics = _values(60)
    cid = reg.put(state(), COORDS, "trained")
    mean, lo, hi = mean_ci(metrics["recall@10"])
    reg.record_eval(cid, "test", "all", {"recall@10": mean, "ndcg@10": 0.1}, ci={"recall@10": [lo, hi]})
    assert list(reg.results().columns[:8]) == ["id", "recipe_hash", "split", "group", "metric", "value",
                                                    "ci_low", "ci_high"]
    res = reg.results().set_index("metric")
    assert res.loc["recall@10", "ci_low"] == lo and res.loc["recall@10", "ci_high"] == hi
    assert lo <= res.loc["recall@10", "value"] <= hi and lo < hi
    assert np.isnan(res.loc["ndcg@10", "ci_low"]) and np.isnan(res.loc["ndcg@10", "ci_high"])
    assert res.loc["recall@10", "seed"] is None or np.isnan(res.loc["recall@10", "seed"])  # put without a seed
    with pytest.raises(RegistryError, match="not among the recorded metrics"):
        reg.record_eval(cid, "test", "all", {"recall@10": 0.1}, ci={"ndcg@10": [0.0, 1.0]})
    with pytest.raises(RegistryError, match="above high"):
        reg.record_eval(cid, "test", "all", {"recall@10": 0.1}, ci={"recall@10": [0.2, 0.1]})


def test_seed_is_a_checkpoint_coordinate(reg, state) -> None:
    a = reg.put(state(), COORDS, "trained", seed=0)
    b = reg.put(state(1), COORDS, "trained", seed=1)
    assert a != b
    q = reg.query()
    assert dict(zip(q["id"], q["seed"])) == {a: 0, b: 1}
    assert reg.query(seed=1)["id"].tolist() == [b]
    assert reg.resolve({**COORDS, "seed": 0}) == a
    assert reg.grid("text", seed=0).loc["Books", "p0"] == a and reg.grid("text", seed=1).loc["Books", "p0"] == b
    reg.record_eval(b, "test", "all", {"recall@10": 0.5})
    reg.record_eval(None, "test", "all", {"recall@10": 0.25}, recipe={"method": "x"}, extra={"seed": 2})
    res = reg.results()
    assert sorted(res["seed"].tolist()) == [1, 2]
    assert reg.results(seed=2)["value"].tolist() == [0.25]


@pytest.mark.parametrize("bad", ["../x/" + "a" * 64 + ".parquet", "/etc/passwd", "peruser/ab/../../../x.parquet",
                                 "peruser/cd/" + "ab" + "0" * 62 + ".parquet", 7])
def test_a_path_leaving_the_root_is_refused(reg, state, bad) -> None:
    cid = reg.put(state(), COORDS, "trained")
    with pytest.raises(UnsafePathError, match="peruser/<2 hex>/<sha256>.parquet"):
        reg.record_eval(cid, "test", "all", {"recall@10": 0.1}, extra={"per_user": bad})
    # a results file edited by hand: reading refuses it too
    rec = {"key": "k" * 32, "id": cid, "recipe_hash": None, "recipe": None, "split": "test", "group": "all",
           "metrics": {"recall@10": 0.1}, "extra": {"per_user": bad}, "created": "2026-01-01T00:00:00Z"}
    (reg.root / "results" / "edited.jsonl").write_text(json.dumps(rec) + "\n")
    reg.sync()
    with pytest.raises(UnsafePathError):
        reg.per_user("k" * 32)
    assert any(k == "k" * 32 for k, _ in reg.verify().bad_per_user_refs) and not reg.verify().ok


def test_missing_and_corrupt_files_are_named_and_verified(reg, state) -> None:
    users, active, metrics = _values()
    rel = reg.put_per_user(users, active, metrics)
    cid = reg.put(state(), COORDS, "trained")
    key = reg.record_eval(cid, "test", "all", {"recall@10": float(metrics["recall@10"].mean())}, extra={"per_user": rel})
    assert reg.verify().ok and reg.verify().per_user_checked == 1
    path = reg.root / rel
    data = path.read_bytes()
    path.write_bytes(data[:-3] + b"xyz")
    with pytest.raises(CorruptBlobError):
        reg.per_user(key)
    assert str(path) in reg.verify().corrupt
    path.unlink()
    with pytest.raises(MissingBlobError):
        reg.per_user(key)
    report = reg.verify()
    assert report.per_user_missing == [(key, rel)] and not report.ok and "missing per-user file" in report.summary()


def test_a_record_without_per_user_values_says_so(reg, state) -> None:
    cid = reg.put(state(), COORDS, "trained")
    key = reg.record_eval(cid, "test", "all", {"recall@10": 0.1})
    with pytest.raises(RegistryError, match="no per-user values"):
        reg.per_user(key)
    with pytest.raises(RegistryError, match="no result record"):
        reg.per_user("0" * 32)


def test_gc_removes_only_unreferenced_per_user_files(reg, state) -> None:
    users, active, metrics = _values()
    kept = reg.put_per_user(users, active, metrics)
    orphan = reg.put_per_user(users[:5], active[:5], {k: v[:5] for k, v in metrics.items()})
    cid = reg.put(state(), COORDS, "trained")
    reg.record_eval(cid, "test", "all", {"recall@10": 0.1}, extra={"per_user": kept})
    assert reg.gc().removed_per_user == 0  # the orphan is younger than the grace period
    old = time.time() - 7200
    os.utime(reg.root / orphan, (old, old))
    report = reg.gc(dry_run=True)
    assert report.removed_per_user == 1 and (reg.root / orphan).is_file()
    assert reg.gc().removed_per_user == 1
    assert not (reg.root / orphan).exists() and (reg.root / kept).is_file()


def test_bad_per_user_values_are_refused_before_writing(reg) -> None:
    users, active, metrics = _values()
    with pytest.raises(RegistryError, match="NaN or Inf"):
        reg.put_per_user(users, active, {"recall@10": np.full(len(users), np.nan)})
    with pytest.raises(RegistryError, match="values for"):
        reg.put_per_user(users, active, {"recall@10": metrics["recall@10"][:3]})
    with pytest.raises(RegistryError, match="clashes"):
        reg.put_per_user(users, active, {"active": metrics["recall@10"]})
    assert not (reg.root / "peruser").exists()


@pytest.mark.parametrize("n", [1, 2, 3, 57, 400])
def test_intervals_are_exactly_mean_ci_of_each_metric(n) -> None:
    from mmgrid.registry.peruser import intervals

    rng = np.random.default_rng(n)
    active = rng.random(n) < 0.5
    metrics = {"recall@10": (rng.random(n) < 0.3).astype(float), "ndcg@10": rng.random(n) * 0.4,
               "ndcg@20": rng.random(n)}
    for group, mask in (("all", np.ones(n, bool)), ("active", active), ("non_active", ~active)):
        got = intervals(active, metrics, group)
        if not mask.any():
            assert got == {}
            continue
        for k, v in metrics.items():
            assert got[k] == list(mean_ci(v[mask], level=0.95, n_resamples=2000, seed=0)[1:])


def test_query_and_results_commands_filter_on_seed(reg, state, capsys) -> None:
    from mmgrid.cli import main

    a = reg.put(state(), COORDS, "trained", seed=0)
    b = reg.put(state(1), COORDS, "trained", seed=1)
    reg.record_eval(a, "test", "all", {"recall@10": 0.5})
    reg.record_eval(b, "test", "all", {"recall@10": 0.25})
    capsys.readouterr()
    assert main(["query", str(reg.root), "--seed", "1", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert b in out and a not in out and "seed" in out.splitlines()[0]
    assert main(["results", str(reg.root), "--seed", "0", "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and a in lines[1] and "ci_low" in lines[0]


def test_intervals_draw_whole_users_as_the_report_does() -> None:
    from mmgrid.registry.peruser import intervals

    rng = np.random.default_rng(3)
    users = np.repeat(np.arange(40), 3)  # every user has three test examples
    active = np.repeat(rng.random(40) < 0.5, 3)
    metrics = {"recall@10": (rng.random(120) < 0.3).astype(float)}
    got = intervals(active, metrics, "all", users)["recall@10"]
    want = list(mean_ci(metrics["recall@10"], level=0.95, n_resamples=2000, seed=0, clusters=users)[1:])
    assert got == want
    # resampling examples as if independent gives a different (narrower on average) interval
    assert got != intervals(active, metrics, "all")["recall@10"]
