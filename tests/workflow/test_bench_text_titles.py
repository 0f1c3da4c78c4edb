"""bench/text_titles.py: the per-example title statistics and their per-user means, on hand-made beams."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from tests.workflow.conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("text_titles")


def test_title_stats_count_valid_beams_and_where_the_target_is(bench) -> None:
    catalog = {"Toy Story (1995)", "Heat (1995)", "Fargo (1996)"}
    texts = [["Heat (1995)", "Toy Story (1995)"],        # target second: in beams, not best; both valid
             ["Fargo (1996)", "Fargo (199"],             # target best; one of two beams valid
             ["Toy Story (1995)", "Heat (1995)"]]        # target absent
    stats = bench.title_stats(texts, ["Toy Story (1995)", "Fargo (1996)", "Fargo (1996)"], catalog)
    np.testing.assert_allclose(stats["valid"], [1.0, 0.5, 1.0])
    np.testing.assert_array_equal(stats["best_is_target"], [0, 1, 0])
    np.testing.assert_array_equal(stats["target_in_beams"], [1, 1, 0])


def test_user_means_average_within_users_and_leave_a_user_without_examples_undefined(bench) -> None:
    users = np.array([7, 7, 3, 3, 3])
    values = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(bench.user_means(users, values), [2 / 3, 0.5])  # users in sorted order: 3, 7
    where = np.array([True, True, False, False, False])
    got = bench.user_means(users, values, where)
    assert np.isnan(got[0]) and got[1] == 0.5


def test_the_table_splits_recall_by_whether_generation_found_the_target(bench) -> None:
    # one seed, one domain, two users with two examples each: user 0's target is generated once (a hit),
    # user 1's never; user 1 has one grounding hit. R@10 where generated: user 0 only, 1.0; where not:
    # user 0 0/1, user 1 1/2 -> 0.25.
    d = {"users": np.array([0, 0, 1, 1]), "valid": np.array([1.0, 1.0, 0.5, 0.5]),
         "best_is_target": np.array([1.0, 0, 0, 0]), "target_in_beams": np.array([1.0, 0, 0, 0]),
         "recall": np.array([1.0, 0, 1.0, 0]), "popular": np.array([0, 0, 0, 1.0]), "distinct_best": 2, "n_items": 5}
    args = argparse.Namespace(preset="p", budget=10, seeds=[0])
    row = next(line for line in bench.table(args, {4: {0: {"D": d}}}).splitlines() if line.startswith("| 4 |"))
    cols = [c.strip() for c in row.split("|")[1:-1]]
    means = [float(c.split(" ")[0]) for c in cols[1:8]]
    np.testing.assert_allclose(means, [0.75, 0.25, 0.25, 0.5, 1.0, 0.25, 0.25])
    assert cols[8] == "2 / 5"
