"""bench/paradigms.py: --arm rows (a paradigm with knobs changed) and cells keyed by their own
paradigm's knobs only, so an arm of one paradigm never re-evaluates another's cells."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from tests.workflow.conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("paradigms")


def test_arms_parse_into_paradigm_knob_overrides(bench) -> None:
    arms = bench.parse_arms(["emb-old=emb:bucket_window=0,fused_optimizer=false", "e2=emb:n_negatives=64"])
    assert arms == {"emb-old": ("emb", ["paradigm_params.emb.bucket_window=0",
                                        "paradigm_params.emb.fused_optimizer=false"]),
                    "e2": ("emb", ["paradigm_params.emb.n_negatives=64"])}
    for bad in (["emb"], ["=emb:x=1"], ["emb=emb:x=1"], ["a=emb:x=1", "a=emb:y=2"]):
        with pytest.raises(SystemExit):
            bench.parse_arms(bad)


def test_a_cell_key_depends_on_its_own_paradigms_knobs_only(bench, tmp_path) -> None:
    args = argparse.Namespace(valid=False, out=str(tmp_path), preset="default", domains=2, budget=1500,
                              overrides=[], eval_users=0)
    key = lambda p, extra=(): bench._cell_key(bench.grid_config(args, 0, p, list(extra)), p, args)  # noqa: E731
    assert key("sasrec") == key("sasrec", ["paradigm_params.emb.bucket_window=0"])
    assert key("emb") != key("emb", ["paradigm_params.emb.bucket_window=0"])
    assert key("emb") != key("sasrec")


def test_the_table_pairs_an_arm_with_its_default_row(bench) -> None:
    # two users, one seed: the arm gains 1 on user 0 and 0 on user 1 -> a paired mean difference of 0.5
    def cell(model):
        return {"build_s": 0.0, "eval_s": 0.0, "domains": {"D": {"users": [0, 1], "model": {"recall": model, "ndcg": model},
                                                                    "popular": {"recall": [0.0, 0.0], "ndcg": [0.0, 0.0]}}}}
    results = {"emb": [cell([0.0, 1.0])], "sasrec": [cell([1.0, 1.0])], "emb-x": [cell([1.0, 1.0])]}
    args = argparse.Namespace(preset="default", valid=False, budget=1500, seeds=[0], domains=1, eval_users=0)
    text = bench.table(results, args, {"emb-x": ("emb", ["paradigm_params.emb.bucket_window=0"])})
    row = next(line for line in text.splitlines() if line.startswith("| emb-x"))
    assert "(bucket_window=0)" in row
    cols = [c.strip() for c in row.split("|")]
    assert cols[5] == "1.00" and cols[8].startswith("0.5000")  # ratio to SASRec; R@10 - its default
    emb = next(line for line in text.splitlines() if line.startswith("| emb |"))
    assert [c.strip() for c in emb.split("|")][5] == f"{np.mean([0.0, 1.0]) / 1.0:.2f}"


def test_rank_arms_parse_into_typed_knobs_and_refuse_bad_specs(bench) -> None:
    arms = bench.parse_rank_arms(["mm=text:grounding_scale=minmax,popularity_gamma=0.5", "g0=text:popularity_gamma=0"],
                                 set())
    assert arms == {"mm": ("text", {"grounding_scale": "minmax", "popularity_gamma": 0.5}),
                    "g0": ("text", {"popularity_gamma": 0})}
    for bad, taken in ((["mm=text"], set()), (["text=text:x=1"], set()), (["a=text:x=1"], {"a"}),
                       (["a=text:x"], set()), (["a=text:x=1", "a=text:y=2"], set())):
        with pytest.raises(SystemExit):
            bench.parse_rank_arms(bad, taken)


def test_the_table_marks_a_rank_arm_and_reads_most_popular_from_a_full_cell(bench) -> None:
    def cell(model, popular=True):
        d = {"users": [0, 1], "model": {"recall": model, "ndcg": model}}
        if popular:
            d["popular"] = {"recall": [1.0, 0.0], "ndcg": [1.0, 0.0]}
        return {"build_s": 0.0, "eval_s": 0.0, "domains": {"D": d}}

    # the rank arm (no most-popular hits in its cell) listed first must not hide most-popular's row
    results = {"mm": [cell([1.0, 1.0], popular=False)], "text": [cell([0.0, 1.0])], "sasrec": [cell([1.0, 1.0])]}
    args = argparse.Namespace(preset="default", valid=True, budget=1500, seeds=[0], domains=1, eval_users=0)
    text = bench.table(results, args, {"mm": ("text", ["paradigm_params.text.grounding_scale=minmax"], "rank")})
    row = next(line for line in text.splitlines() if line.startswith("| mm"))
    assert "(grounding_scale=minmax; ranking only)" in row
    assert [c.strip() for c in row.split("|")][8].startswith("0.5000")
    pop = next(line for line in text.splitlines() if line.startswith("| most-popular"))
    assert [c.strip() for c in pop.split("|")][2].startswith("0.5000")


def test_targets_table_reads_each_target_per_seed_and_pooled(bench) -> None:
    # four users, two seeds; popular scores 0 everywhere, sasrec 1 on users 0-1
    def cell(model):
        return {"build_s": 0.0, "eval_s": 0.0, "domains": {"D": {"users": [0, 1, 2, 3], "model": {"recall": model, "ndcg": model},
                                                                    "popular": {"recall": [0.0] * 4, "ndcg": [0.0] * 4}}}}
    results = {"sasrec": [cell([1.0, 1.0, 0.0, 0.0])] * 2,
               "emb": [cell([1.0, 1.0, 1.0, 0.0])] * 2,      # 1.5x SASRec: met
               "semid": [cell([1.0, 0.0, 0.0, 0.0])] * 2,    # 0.5x: missed (target 0.9x)
               "text": [cell([0.0, 0.0, 0.0, 0.0])] * 2}     # ties popular: missed
    text = bench.targets_table(results, [0, 1])
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in text.splitlines()[2:]}
    assert rows["emb >= 1.0 x SASRec"][2].startswith("met: 1.50x")
    assert rows["semid >= 0.9 x SASRec"][0].startswith("MISSED: 0.50x")
    assert rows["text > most-popular"][2] == "MISSED: +0.0000 [+0.0000, +0.0000]"
    assert rows["emb > most-popular"][1].startswith("met: +0.7500")   # seed 1 alone
    assert rows["emb >= semid"][2].startswith("met: +0.5000")
    # a strict order needs its lower bound above 0: one user of four is +1, the bootstrap reaches 0
    assert rows["semid > text"][2].startswith("MISSED: +0.2500 [+0.0000")
    assert len(rows["emb >= semid"]) == 3   # seed 0, seed 1, pooled
    alias = bench.targets_table({**results, "emb-x": results.pop("emb")}, [0, 1], bench.parse_rows(["emb=emb-x"]))
    assert "emb-x >= 1.0 x SASRec" in alias
    with pytest.raises(SystemExit):
        bench.parse_rows(["sasrec=x"])


def test_a_real_data_grid_keeps_its_own_data_section(bench, tmp_path) -> None:
    from pathlib import Path

    grid = Path(__file__).resolve().parents[2] / "grids" / "ml100k.yaml"
    args = argparse.Namespace(valid=False, out=str(tmp_path), preset="ml100k", domains=1, budget=4000,
                              overrides=[], eval_users=0, grid=str(grid))
    cfg = bench.grid_config(args, 1, "emb")
    assert cfg.data.source == "recbole" and cfg.data.phases["test"] == ["1998-03-01", "1998-05-01"]
    assert cfg.world is None and cfg.train.seed_list == [1] and cfg.paradigms == ["emb"]
    assert bench.grid_config(args, 0, "emb").train.seed_list == [0]  # one replicate, not the grid's three
    assert Path(cfg.registry) == tmp_path / "ml100k" / "registry-test"
