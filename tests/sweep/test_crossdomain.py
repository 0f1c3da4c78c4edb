"""The cross-domain study on the fake grid: pairs x methods x bases x alpha, relative change."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmgrid.errors import ConfigError
from mmgrid.sweep.crossdomain import cross_domain_results, domain_pairs, relative_change, run_cross_domain
from sweep_fakes import PARADIGM, STARS, fake_merge, theta


def _score(w, domain, group="all"):
    w1 = theta(domain, "p1")["w"]
    return 1.0 / (1.0 + float(((w - (w1 + STARS[domain][group])) ** 2).sum()))


def test_pairs():
    assert domain_pairs(["A", "B", "C"], None) == [("A", "B"), ("A", "C"), ("B", "C")]
    with pytest.raises(ConfigError, match="pairs"):
        domain_pairs(["A", "B"], [["A", "Z"]])


def test_study_values_bases_and_records(grid, counter):
    cfg, reg, prep = grid
    PARADIGM.loads.clear()
    df = run_cross_domain(cfg, reg, prep, evaluator_factory=counter, merge_fn=fake_merge)
    assert sorted(PARADIGM.loads) == ["A", "B", "C"]  # one model a domain; merged states are copied in place
    merged = df[df["method"] != "single"]
    # average ignores the base (1 base kind), task_arithmetic runs on 3; 2 alphas, 2 pairs, 2 eval domains, 3 groups, 4 metrics
    assert set(merged.loc[merged["method"] == "average", "base_kind"]) == {"none"}
    assert set(merged.loc[merged["method"] == "task_arithmetic", "base_kind"]) == {"original", "historical", "neutral"}
    assert len(merged) == (1 + 3) * 2 * 2 * 2 * 3 * 4
    # evaluators built once per domain
    assert sorted(counter.factories) == ["A", "B", "C"]
    # with weights summing to 1 every base gives alpha*theta_i + (1-alpha)*theta_j
    row = merged[(merged["pair"] == "A+B") & (merged["alpha"] == 0.25) & (merged["eval_domain"] == "B")
                 & (merged["group"] == "all") & (merged["metric"] == "ndcg@10")]
    w = 0.25 * theta("A", "p2")["w"] + 0.75 * theta("B", "p2")["w"]
    np.testing.assert_allclose(row["value"], _score(w, "B"), rtol=1e-6)
    rel = relative_change(df)
    r = rel[(rel["pair"] == "A+B") & (rel["alpha"] == 0.25) & (rel["eval_domain"] == "B")].iloc[0]
    assert math.isclose(r["baseline"], _score(theta("B", "p2")["w"], "B"), rel_tol=1e-6)
    assert math.isclose(r["rel_change"], _score(w, "B") / r["baseline"] - 1, rel_tol=1e-6)
    # the neutral base is a stored merged checkpoint whose lineage names both t1 inputs
    nb = merged.loc[merged["base_kind"] == "neutral", "base_id"].iloc[0]
    m = reg.get(nb)
    assert m.kind == "merged" and {p.id for p in m.parents} == {
        reg.resolve({"paradigm": "fakelin", "domain": d, "period": "p1"}) for d in ("A", "B")}
    # the registry holds the same numbers
    back = cross_domain_results(reg, paradigm="fakelin")
    assert len(back) == len(df)
    key = ["pair", "method", "base_kind", "alpha", "eval_domain", "group", "metric"]
    j = back.merge(df, on=key, suffixes=("", "_run"))
    assert len(j) == len(df)
    np.testing.assert_allclose(j["value"].astype(float), j["value_run"])


def test_unknown_base_kind(grid, counter):
    cfg, reg, prep = grid
    cfg.sweeps.cross_domain.bases = ["original", "weird"]
    with pytest.raises(ConfigError, match="weird"):
        run_cross_domain(cfg, reg, prep, evaluator_factory=counter, merge_fn=fake_merge)


def test_rerun_merges_nothing(grid, counter):
    cfg, reg, prep = grid
    calls = []

    def counting_merge(*a, **k):
        calls.append(a[0])
        return fake_merge(*a, **k)

    first = run_cross_domain(cfg, reg, prep, evaluator_factory=counter, merge_fn=counting_merge)
    n = len(calls)
    again = run_cross_domain(cfg, reg, prep, evaluator_factory=counter, merge_fn=counting_merge)
    assert len(calls) == n and len(again) == len(first)
    key = ["pair", "method", "base_kind", "alpha", "eval_domain", "group", "metric"]
    j = first.merge(again, on=key, suffixes=("", "_2"))
    assert len(j) == len(first)
    np.testing.assert_allclose(j["value"].astype(float), j["value_2"].astype(float))


def test_relative_change_is_undefined_for_a_zero_baseline() -> None:
    import math

    import pandas as pd

    from mmgrid.sweep.crossdomain import relative_change

    rows = [
        {"paradigm": "emb", "eval_domain": "A", "method": "single", "metric": "ndcg@10", "group": "all", "value": 0.2},
        {"paradigm": "emb", "eval_domain": "B", "method": "single", "metric": "ndcg@10", "group": "all", "value": 0.0},
        {"paradigm": "emb", "eval_domain": "A", "method": "average", "metric": "ndcg@10", "group": "all", "value": 0.1},
        {"paradigm": "emb", "eval_domain": "B", "method": "average", "metric": "ndcg@10", "group": "all", "value": 0.3},
    ]
    rel = relative_change(pd.DataFrame(rows)).set_index("eval_domain")["rel_change"]
    assert rel["A"] == -0.5  # 0.1 / 0.2 - 1
    assert math.isnan(rel["B"])  # own t2 scored 0: no relative change, not +inf
    assert rel.mean() == -0.5  # summaries skip the undefined domain
