"""mmgrid.query on a quick demo, against values computed here from the registry's own records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mmgrid.query import Grid

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def g(quick_demo: Path) -> Grid:
    return Grid.open(quick_demo)


def _emb(g: Grid, period: str, seed: int = 0) -> str:
    return g.registry.query(paradigm="emb", domain="Books", period=period, kind="trained", variant="default",
                            seed=seed)["id"].iloc[0]


def test_summary_pools_seeds_and_users(g: Grid) -> None:
    s = g.summary("recall@10", by=["paradigm", "domain", "period"])
    row = s[(s["paradigm"] == "emb") & (s["domain"] == "Books") & (s["period"] == "p2")].iloc[0]
    assert row["seeds"] == [0, 1]
    # by hand: the mean over both seeds' per-user values (the same users on both)
    res = g.registry.results(id=[_emb(g, "p2", 0), _emb(g, "p2", 1)], metric="recall@10", split="test", group="all")
    res = res.sort_values("created").groupby("id").tail(1)
    per_user = [g.registry.per_user(r)["recall@10"].to_numpy() for _, r in res.iterrows()]
    assert row["value"] == pytest.approx(np.mean(np.stack(per_user)), rel=1e-9)
    assert row["ci_low"] <= row["value"] <= row["ci_high"] and row["ci_low"] < row["ci_high"]
    assert row["n_users"] > 10


def test_best_per_domain_is_the_highest_mean_with_its_interval(g: Grid) -> None:
    s = g.summary("recall@10", by=["domain", "paradigm", "period"])
    best = g.best("recall@10", by=["domain"])
    assert sorted(best["domain"]) == ["Books", "Phones"]
    for r in best.itertuples():
        assert r.value == pytest.approx(s[s["domain"] == r.domain]["value"].max())
        assert r.ci_low <= r.value <= r.ci_high and r.runner_up <= r.value


def test_lambda_star_per_domain_and_group(g: Grid) -> None:
    ls = g.lambda_star()
    assert set(ls["group"]) == {"all", "active", "non_active"} and set(ls["domain"]) == {"Books", "Phones"}
    assert (ls["ci_low"] <= ls["lambda_star"]).all() and (ls["lambda_star"] <= ls["ci_high"]).all()
    edge = (ls["lambda_star"] == ls["grid_low"]) | (ls["lambda_star"] == ls["grid_high"])
    assert (ls.loc[edge, "on_edge"]).all()


def test_children_descendants_and_ancestors_cover_stored_and_in_memory_merges(g: Grid) -> None:
    p1, p2 = _emb(g, "p1"), _emb(g, "p2")
    kids = g.children(p2)
    in_memory = kids[~kids["stored"]]
    assert set(in_memory["study"]) >= {"temporal", "cross_domain"}  # found without reading recipe JSON by hand
    temporal = g.registry.results(study="temporal", domain="Books", seed=0, paradigm="emb")
    assert set(in_memory[in_memory["study"] == "temporal"]["child"]) == set(temporal["recipe_hash"])
    assert p2 in set(g.children(p1)["child"])  # the next stage, stored
    assert set(g.children(p1)["child"]) <= set(g.descendants(p1)["child"])
    anc = g.ancestors(p2)
    assert p1 in set(anc["parent"]) and (anc["depth"] >= 1).all()
    assert "base" in set(g.registry.query(id=list(anc["parent"]))["paradigm"]) if "id" in anc else True
    one = in_memory.iloc[0]["child"]
    assert p2 in set(g.ancestors(one)["parent"])  # an in-memory merge's inputs, by its recipe hash


def test_grid_says_which_seeds_it_shows(g: Grid) -> None:
    pooled = g.grid("emb", "recall@10", split="test", group="all", kind="trained")
    assert "mean over the seeds" in pooled.attrs["shows"]
    one = g.grid("emb", "recall@10", split="test", group="all", kind="trained", seed=1)
    assert one.attrs["shows"] == "recall@10 of seed 1"
    zero = g.grid("emb", "recall@10", split="test", group="all", kind="trained", seed=0)
    assert pooled.loc["Books", "p2"] == pytest.approx((zero.loc["Books", "p2"] + one.loc["Books", "p2"]) / 2)


def test_tidy_export(g: Grid, tmp_path: Path) -> None:
    out = g.export(tmp_path / "results.csv", study="temporal")
    df = pd.read_csv(out)
    assert len(df) == len(g.registry.results(study="temporal"))
    assert {"domain", "lambda", "metric", "value", "ci_low", "ci_high", "seed"} <= set(df.columns)
