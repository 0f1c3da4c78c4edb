"""lambda grid, lambda* (tie rule) and Eq. 11 on hand-made results."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrid.errors import ConfigError
from mmgrid.sweep.selection import blend_eq11, lambda_grid, lambda_stars, select_lambda_star


def test_default_grid_has_31_points_and_includes_ends():
    g = lambda_grid(0.0, 1.5, 0.05)
    assert len(g) == 31 and g[0] == 0.0 and g[-1] == 1.5 and 1.0 in g


def test_21_point_grid():
    assert len(lambda_grid(0.0, 1.0, 0.05)) == 21


def test_grid_rejects_bad_step():
    with pytest.raises(ConfigError, match="step"):
        lambda_grid(0, 1, 0)


def test_lambda_star_is_argmax():
    assert select_lambda_star([0.0, 0.5, 1.0, 1.5], [0.1, 0.4, 0.3, 0.2]) == 0.5


def test_ties_go_closest_to_one():
    # 0.5 and 1.25 tie at the max; 1.25 is 0.25 from 1, 0.5 is 0.5 from 1
    assert select_lambda_star([0.0, 0.5, 1.0, 1.25], [0.1, 0.4, 0.3, 0.4]) == 1.25


def test_equidistant_ties_go_to_smaller():
    assert select_lambda_star([0.5, 0.8, 1.2], [0.4, 0.4 + 1e-12, 0.4]) == 0.8
    assert select_lambda_star([0.8, 1.2], [0.4, 0.4]) == 0.8


def test_rounding_makes_near_equal_a_tie():
    assert select_lambda_star([0.3, 1.0], [0.25 + 1e-11, 0.25]) == 1.0


def test_nan_ignored_and_all_nan_rejected():
    assert select_lambda_star([0.0, 1.0], [0.2, float("nan")]) == 0.0
    with pytest.raises(ConfigError):
        select_lambda_star([0.0, 1.0], [float("nan")] * 2)


def test_lambda_stars_per_domain_and_group():
    rows = []
    curves = {("A", "all"): [0.1, 0.3, 0.2], ("A", "non_active"): [0.5, 0.2, 0.1], ("B", "all"): [0.2, 0.2, 0.2]}
    for (d, g), vals in curves.items():
        for lam, v in zip([0.0, 0.5, 1.0], vals):
            rows.append({"domain": d, "group": g, "lambda": lam, "metric": "ndcg@10", "value": v})
            rows.append({"domain": d, "group": g, "lambda": lam, "metric": "recall@10", "value": -v})
    out = lambda_stars(pd.DataFrame(rows)).set_index(["domain", "group"])
    assert out.loc[("A", "all"), "lambda_star"] == 0.5
    assert out.loc[("A", "non_active"), "lambda_star"] == 0.0
    assert out.loc[("B", "all"), "lambda_star"] == 1.0  # flat curve: closest to 1
    assert out.loc[("A", "all"), "best"] == 0.3


def test_eq11_hand_values():
    # paper Table 4, Health: p_active 0.394, lambda* 0.715 -> 0.6*... by hand
    assert math.isclose(blend_eq11(0.715, 0.394), 0.606 * 0.715 + 0.394)
    assert blend_eq11(0.2, 0.0) == 0.2 and blend_eq11(0.2, 1.0) == 1.0
    np.testing.assert_allclose(blend_eq11(np.array([0.5, 1.5]), np.array([0.5, 0.5])), [0.75, 1.25])
    with pytest.raises(ConfigError, match="p_active"):
        blend_eq11(0.5, 1.2)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=12))
def test_lambda_star_value_is_a_max(values):
    lams = [round(0.1 * i, 9) for i in range(len(values))]
    star = select_lambda_star(lams, values)
    best = max(round(v, 9) for v in values)
    assert round(values[lams.index(star)], 9) == best
    # no tied lambda is strictly closer to 1
    tied = [l for l, v in zip(lams, values) if round(v, 9) == best]
    assert all(abs(star - 1) <= abs(l - 1) for l in tied)


@settings(max_examples=50, deadline=None)
@given(st.floats(-2, 3), st.floats(0, 1))
def test_eq11_lies_between_prediction_and_one(lam, p):
    hat = blend_eq11(lam, p)
    assert min(lam, 1.0) - 1e-12 <= hat <= max(lam, 1.0) + 1e-12
