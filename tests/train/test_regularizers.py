"""Each regularizer's rule on hand-made tensors (Orbit paper, section 4, Algorithm 1, Eq. 1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mmgrid.errors import ConfigError, UnknownNameError
from mmgrid.train.origin import average_with_origin, l2_distance, make_origin, sign_dissimilarity
from mmgrid.train.regularizers import check_params, make_regularizer, regularizer_names


class Two(nn.Module):
    def __init__(self, a: list[float], b: list[list[float]]) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(a))
        self.b = nn.Parameter(torch.tensor(b))


def _origin_of(model: nn.Module, values: dict[str, torch.Tensor], added=None):
    return make_origin(model, values, added)


def test_sign_dissimilarity_and_l2_by_hand() -> None:
    m = Two([-1.0, -2.0, 5.0, 3.0], [[1.0, 1.0]])
    o = {"a": torch.tensor([1.0, -2.0, 0.0, 3.0]), "b": torch.tensor([[1.0, -1.0]])}
    org = _origin_of(m, o)
    # counted: a[0], a[1], a[3], b[0,0], b[0,1] (a[2] has origin 0); flipped: a[0], b[0,1]
    assert sign_dissimilarity(org) == pytest.approx(2 / 5)
    assert l2_distance(org) == pytest.approx(math.sqrt(4 + 25 + 4))


def test_added_rows_are_excluded_from_distance_and_merging() -> None:
    m = Two([1.0], [[1.0, 1.0], [9.0, -9.0]])  # b row 1 is an added token row
    o = {"a": torch.tensor([1.0]), "b": torch.tensor([[1.0, 1.0], [-5.0, 5.0]])}
    org = _origin_of(m, o, {"b": (1, ["<sid_0>"])})
    assert sign_dissimilarity(org) == 0.0 and l2_distance(org) == 0.0
    m.a.data.fill_(-3.0)
    average_with_origin(org)
    assert m.a.item() == pytest.approx(-1.0)
    assert m.b.data[1].tolist() == [9.0, -9.0]


def test_orbit_one_back_merge_is_the_midpoint() -> None:
    m = Two([-1.0, 4.0], [[2.0]])
    o = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([[2.0]])}
    reg = make_regularizer("orbit", {"distance": "l2", "epsilon": 1.5}, _origin_of(m, o))
    out = reg.on_step_end(m, 0)
    # d = sqrt(4 + 4) = 2.83 > 1.5 -> midpoint: a = [0, 3], d = 1.41 <= 1.5: one merge
    assert m.a.tolist() == [0.0, 3.0]
    assert out["merges"] == 1.0 and out["distance"] == pytest.approx(math.sqrt(2))
    assert out["distance_before"] == pytest.approx(math.sqrt(8))


def test_orbit_does_nothing_inside_epsilon() -> None:
    m = Two([1.1], [[2.0]])
    reg = make_regularizer("orbit", {"distance": "l2", "epsilon": 0.5},
                           _origin_of(m, {"a": torch.tensor([1.0]), "b": torch.tensor([[2.0]])}))
    assert reg.on_step_end(m, 0)["merges"] == 0.0 and m.a.item() == pytest.approx(1.1)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-3, 3, allow_nan=False).filter(lambda x: abs(x) > 1e-3), min_size=4, max_size=30),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["sign", "l2"]),
    st.floats(0.0, 0.5),
)
def test_orbit_distance_is_at_most_epsilon_after_every_step(init, seed, kind, eps) -> None:
    g = torch.Generator().manual_seed(seed)
    m = Two(init, [[1.0]])
    org = _origin_of(m, {"a": torch.tensor(init), "b": torch.tensor([[1.0]])})
    reg = make_regularizer("orbit", {"distance": kind, "epsilon": eps}, org)
    for step in range(5):
        with torch.no_grad():  # a wild "optimizer step"
            m.a.add_(torch.randn(len(init), generator=g) * 3)
        out = reg.on_step_end(m, step)
        d = sign_dissimilarity(org) if kind == "sign" else l2_distance(org)
        assert d <= eps + 1e-12 and out["distance"] == pytest.approx(d)


def test_soup_to_go_averages_every_k_steps() -> None:
    m = Two([4.0], [[0.0]])
    org = _origin_of(m, {"a": torch.tensor([0.0]), "b": torch.tensor([[0.0]])})
    reg = make_regularizer("soup_to_go", {"every": 3}, org)
    seen = []
    for step in range(6):
        out = reg.on_step_end(m, step)
        seen.append((step, m.a.item(), out.get("merges", 0.0)))
    assert [s[2] for s in seen] == [0, 0, 1, 0, 0, 1]
    assert m.a.item() == pytest.approx(1.0)  # 4 -> 2 (step 2) -> 1 (step 5)


def test_l2_init_penalty_and_its_gradient() -> None:
    m = Two([3.0, -1.0], [[0.5]])
    org = _origin_of(m, {"a": torch.tensor([1.0, 1.0]), "b": torch.tensor([[0.5]])})
    reg = make_regularizer("l2_init", {"lam": 0.1}, org)
    pen = reg.penalty(m)
    assert pen.item() == pytest.approx(0.1 * (4 + 4))
    pen.backward()
    assert m.a.grad.tolist() == pytest.approx([0.4, -0.4])  # 2 * lam * (theta - theta0)


def test_regularizer_names_and_bad_params() -> None:
    assert set(regularizer_names()) == {"none", "orbit", "soup_to_go", "l2_init"}
    with pytest.raises(UnknownNameError, match="orbit"):
        check_params("orbitt", {})
    with pytest.raises(ConfigError, match="epsilon"):
        check_params("orbit", {"distance": "sign"})
    with pytest.raises(ConfigError, match="distance"):
        check_params("orbit", {"epsilon": 0.1, "distance": "cosine"})
    with pytest.raises(ConfigError):
        check_params("soup_to_go", {"every": 0})
