"""The time-axis fusers (linear_velocity, moving_average_velocity, acceleration, exp_decay,
ema): each against its formula on hand-computed integer cases, against a step-by-step
oracle written the way MMGRid's TemporalModelFuser and TIME's EMA define them, their
parameter checks, both merge routes, and a recipe through the registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mmgrid.merge import merge, merge_to_file
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.executor import REFERENCE, Route
from mmgrid.merge.methods import get_method, validate_params
from mmgrid.merge.tensors import from_state

FUSERS = ["linear_velocity", "moving_average_velocity", "acceleration", "exp_decay", "ema"]

# Three checkpoints in time order, small integers: M_1, M_2, M_3.
M1, M2, M3 = torch.tensor([0.0, 4.0, -2.0]), torch.tensor([2.0, 4.0, 2.0]), torch.tensor([6.0, 2.0, 4.0])
SEQ = [{"w": M1}, {"w": M2}, {"w": M3}]


@pytest.mark.parametrize(("method", "params", "want"), [
    # M_3 + 1 (M_3 - M_2) = [6,2,4] + [4,-2,2]
    ("linear_velocity", {}, [10.0, 0.0, 6.0]),
    # M_3 + 0.5 (M_3 - M_2)
    ("linear_velocity", {"alpha": 0.5}, [8.0, 1.0, 5.0]),
    # V_avg = ((M_2 - M_1) + (M_3 - M_2)) / 2 = [3, -1, 3]; M_3 + V_avg
    ("moving_average_velocity", {}, [9.0, 1.0, 7.0]),
    # the last velocity only: the linear case
    ("moving_average_velocity", {"window": 1}, [10.0, 0.0, 6.0]),
    # M_3 + 2 [3, -1, 3]
    ("moving_average_velocity", {"alpha": 2.0}, [12.0, 0.0, 10.0]),
    # V = [4,-2,2], V_prev = [2,0,4], A = [2,-2,-2]; M_3 + V + 0.5 A
    ("acceleration", {}, [11.0, -1.0, 5.0]),
    # M_3 + 0 V + 1 A
    ("acceleration", {"alpha": 0.0, "beta": 1.0}, [8.0, 0.0, 2.0]),
    # w = [1, 1, 2] / 4 (decay 1/2... reversed: decay^(2,1,0) = [0.25, 0.5, 1] / 1.75)
    ("exp_decay", {"decay": 1.0}, [8.0 / 3, 10.0 / 3, 4.0 / 3]),
    ("exp_decay", {"decay": 0.5}, [(0.25 * 0 + 0.5 * 2 + 6) / 1.75, (0.25 * 4 + 0.5 * 4 + 2) / 1.75,
                                   (0.25 * -2 + 0.5 * 2 + 4) / 1.75]),
    ("exp_decay", {"decay": 0.0}, [6.0, 2.0, 4.0]),  # 0^0 = 1: the newest alone
    # E_1 = M_1; E_2 = (M_1 + M_2) / 2 = [1, 4, 0]; E_3 = (E_2 + M_3) / 2
    ("ema", {}, [3.5, 3.0, 2.0]),
    # beta 0.25: E_2 = [0.5, 4, -1]; E_3 = 0.75 E_2 + 0.25 M_3 = [1.875, 3.5, 0.25]
    ("ema", {"beta": 0.25}, [1.875, 3.5, 0.25]),
    ("ema", {"beta": 1.0}, [6.0, 2.0, 4.0]),
    ("ema", {"beta": 0.0}, [0.0, 4.0, -2.0]),
])
def test_hand_computed(method, params, want):
    out = merge(method, SEQ, **params)["w"]
    assert torch.allclose(out, torch.tensor(want), rtol=1e-6, atol=0), (method, params, out)


def test_exp_decay_task_vector_form_with_a_base():
    """MMGRid's form base + sum_i w_i (M_i - base): the base cancels (weights sum to 1), so a
    given base changes nothing."""
    base = {"w": torch.tensor([100.0, -50.0, 3.0])}
    w = torch.tensor([0.64, 0.8, 1.0]) / 2.44  # decay 0.8 over three
    want = base["w"] + sum(wi * (m["w"] - base["w"]) for wi, m in zip(w, SEQ))
    got = merge("exp_decay", SEQ, base=base)["w"]
    assert torch.allclose(got, want, rtol=1e-5)
    assert torch.equal(got, merge("exp_decay", SEQ)["w"])


def _mmgrid_oracle(method: str, ms: list[torch.Tensor], p) -> torch.Tensor:
    """The fuser's formula written step by step as MMGRid's code states it (velocities as
    differences, then added to the latest model), and TIME's EMA as its recursion."""
    if method == "linear_velocity":
        return ms[-1] + p.alpha * (ms[-1] - ms[-2])
    if method == "moving_average_velocity":
        vs = [ms[i + 1] - ms[i] for i in range(len(ms) - 1)]
        vs = vs if p.window is None else vs[-p.window:]
        return ms[-1] + p.alpha * (sum(vs) / len(vs))
    if method == "acceleration":
        v, v_prev = ms[-1] - ms[-2], ms[-2] - ms[-3]
        return (ms[-1] + p.alpha * v) + p.beta * (v - v_prev)
    if method == "exp_decay":
        base = torch.zeros_like(ms[0]) + 0.25
        w = [p.decay ** (len(ms) - 1 - i) for i in range(len(ms))]
        return base + sum((wi / sum(w)) * (m - base) for wi, m in zip(w, ms))
    e = ms[0]
    for m in ms[1:]:
        e = (1 - p.beta) * e + p.beta * m
    return e


@pytest.mark.parametrize("n", [3, 4, 6])
@pytest.mark.parametrize(("method", "params"), [
    ("linear_velocity", {"alpha": 1.7}), ("linear_velocity", {"alpha": -0.3}),
    ("moving_average_velocity", {}), ("moving_average_velocity", {"alpha": 0.6, "window": 2}),
    ("acceleration", {}), ("acceleration", {"alpha": 0.4, "beta": -1.2}),
    ("exp_decay", {}), ("exp_decay", {"decay": 1.3}), ("ema", {}), ("ema", {"beta": 0.9}),
])
def test_against_the_step_by_step_formula(method, params, n):
    g = torch.Generator().manual_seed(n)
    ms = [torch.randn(7, 5, generator=g) for _ in range(n)]
    out = merge(method, [{"w": m} for m in ms], **params)["w"]
    want = _mmgrid_oracle(method, ms, validate_params(method, params))
    assert torch.allclose(out, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


@pytest.mark.parametrize("method", FUSERS)
def test_both_routes_and_chunks_give_the_same_bits(method, tmp_path: Path):
    """The kernel streams: the fast pass in tiny chunks, the reference path and a file merge
    agree bit for bit, in bf16 too."""
    g = torch.Generator().manual_seed(3)
    ins = [{"a.weight": torch.randn(33, 17, generator=g).to(torch.bfloat16), "b": torch.randn(9, generator=g)}
           for _ in range(4)]
    fast = merge(method, ins, route=Route(chunk=64))
    ref = merge(method, ins, route=REFERENCE)
    merge_to_file(method, ins, tmp_path / "m.safetensors")
    from safetensors.torch import load_file

    disk = load_file(str(tmp_path / "m.safetensors"))
    for k in fast:
        assert fast[k].dtype == ins[0][k].dtype
        assert torch.equal(fast[k], ref[k]) and torch.equal(fast[k], disk[k]), (method, k)


def test_order_matters():
    assert not any(get_method(m).symmetric for m in FUSERS)
    a, b = merge("ema", SEQ)["w"], merge("ema", SEQ[::-1])["w"]
    assert not torch.equal(a, b)


@pytest.mark.parametrize(("method", "params", "needle"), [
    ("linear_velocity", {"alpha": float("nan")}, "finite"),
    ("linear_velocity", {"alpha": float("inf")}, "alpha"),
    ("moving_average_velocity", {"window": 0}, "window"),
    ("acceleration", {"beta": float("nan")}, "beta"),
    ("exp_decay", {"decay": -0.1}, "decay"),
    ("ema", {"beta": 1.5}, "beta"),
    ("ema", {"beta": -0.01}, "beta"),
])
def test_bad_parameters_are_named(method, params, needle):
    with pytest.raises(MergeParamError, match=needle):
        validate_params(method, params)


def test_too_few_inputs_are_named():
    with pytest.raises(MergeParamError, match="at least 3"):
        merge("acceleration", SEQ[:2])
    with pytest.raises(MergeParamError, match="at least 2"):
        merge("linear_velocity", SEQ[:1])
    with pytest.raises(MergeParamError, match="window=3"):
        merge("moving_average_velocity", SEQ, window=3)


def test_stated_bounds():
    c = lambda m, n, **kw: get_method(m).update_bound(validate_params(m, kw), n, 16)  # noqa: E731
    assert c("linear_velocity", 3) == pytest.approx(3.0)  # |1 + 1| + |1|
    assert c("linear_velocity", 2, alpha=-0.5) == pytest.approx(1.0)  # an interpolation
    assert c("moving_average_velocity", 5, alpha=2.0) == pytest.approx(2.0)  # k = 4: |1.5| + |0.5|
    assert c("moving_average_velocity", 5, alpha=2.0, window=1) == pytest.approx(5.0)
    assert c("acceleration", 3) == pytest.approx(5.0)  # 2.5 + 2 + 0.5
    assert c("exp_decay", 4) == c("ema", 4) == 1.0
    for m in FUSERS:
        assert get_method(m).bound_origin == "base"


def test_a_fuser_as_a_recipe_in_the_registry(tmp_path: Path):
    """Three periods of one domain fused by a recipe: stored with lineage (three inputs in
    time order, no base), the same tensors as merge(), and the id predicted by a dry run."""
    from mmgrid.merge.recipe import Recipe, run_recipe
    from mmgrid.registry import Registry

    r = Registry.open(tmp_path / "reg")
    ids = [r.put({"w": m}, {"paradigm": "text", "domain": "A", "period": f"p{i + 1}"}, "trained")
           for i, m in enumerate([M1, M2, M3])]
    rec = Recipe("acceleration", ids, None, {"alpha": 1.0, "beta": 0.5})
    cid = run_recipe(rec, r)
    assert run_recipe(rec, r, dry_run=True) == cid
    man = r.get(cid)
    assert man.kind == "merged" and man.params["method"] == "acceleration"
    inputs = [p for p in man.parents if (p.role if hasattr(p, "role") else p[1]) == "merge_input"]
    assert len(inputs) == 3 and len(man.parents) == 3
    assert torch.equal(r.load(cid)["w"], torch.tensor([11.0, -1.0, 5.0]))
    again = Recipe.from_yaml(rec.to_yaml())
    assert again == rec and run_recipe(again, r, dry_run=True) == cid


def test_from_state_sources_stream():
    """Inputs given as lazy sources are read tensor by tensor like any other method's."""
    srcs = [from_state(s, f"m{i}") for i, s in enumerate(SEQ)]
    assert torch.equal(merge("linear_velocity", srcs)["w"], torch.tensor([10.0, 0.0, 6.0]))
