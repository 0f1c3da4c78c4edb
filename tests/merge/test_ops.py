"""Hand-computed cases of the pure tensor functions and each method's equation."""

from __future__ import annotations

import pytest
import torch

from mmgrid.merge import merge, ops
from mmgrid.merge import pipeline as pl


def t(*v):
    return torch.tensor(v, dtype=torch.float32)


def test_ties_hand_computed():
    # tau_1 = [3, -1, 2, 0.5], tau_2 = [-4, 2, 1, 0.1]; density 0.5 per tensor keeps
    # tau_1: {3, 2} and tau_2: {-4, 2}. Mass: [-1, 2, 2, 0] -> signs [-, +, +, +].
    # Disjoint mean: [-4, 2, 2, 0].
    base = {"w": t(0, 0, 0, 0)}
    a, b = {"w": t(3, -1, 2, 0.5)}, {"w": t(-4, 2, 1, 0.1)}
    out = merge("ties", [a, b], base=base, density=0.5, scope="tensor")["w"]
    assert torch.allclose(out, t(-4, 2, 2, 0))
    whole = merge("ties", [a, b], base=base, density=0.5)["w"]  # one tensor: same as per tensor
    assert torch.allclose(whole, out)
    # Eq. 4/7 weighted sum with alpha: 0.25*[0,0,2,0] + 0.75*[-4,2,0,0]
    out = merge("ties", [a, b], base=base, density=0.5, scope="tensor", alpha=0.25)["w"]
    assert torch.allclose(out, t(-3, 1.5, 0.5, 0))


def test_ties_whole_model_threshold_spans_tensors():
    # The top 50% over the whole model: all of tensor x (large) and none of y (small).
    base = {"x": torch.zeros(4), "y": torch.zeros(4)}
    a = {"x": t(5, 6, 7, 8), "y": t(1, 2, 3, 4)}
    out = merge("ties", [a], base=base, density=0.5)
    assert torch.equal(out["x"], a["x"]) and torch.equal(out["y"], torch.zeros(4))
    per = merge("ties", [a], base=base, density=0.5, scope="tensor")
    assert torch.equal(per["y"], t(0, 0, 3, 4))


@pytest.mark.parametrize("sample_target", [1 << 24, 1000])
def test_global_threshold_brackets_exact_kth(monkeypatch, sample_target):
    monkeypatch.setattr(pl, "SAMPLE_TARGET", sample_target)
    g = torch.Generator().manual_seed(0)
    deltas = [torch.randn(3000 + 37 * i, generator=g) for i in range(5)]
    cfg = pl.Pipeline(sparsify="magnitude", density=0.13)
    allv = torch.cat(deltas)
    finder = pl.ThresholdFinder(cfg, 1, allv.numel())
    for i, d in enumerate(deltas):
        finder.add(f"t{i}", [d], torch.zeros_like(d))
    thr = finder.thresholds()[0]
    k = ops.keep_count(0.13, allv.numel())
    exact = ops.kth_largest_magnitude(allv, k)
    kept = int((allv.abs() >= thr).sum())
    if sample_target > allv.numel():  # exact histogram: the lower edge of the k-th value's bin
        assert exact * (1 - 2**-11) <= thr <= exact
        assert k <= kept <= k + 3
    else:  # a strided sample of ~1000 entries: the kept fraction is close to the density
        assert pl.sample_stride(allv.numel()) == 17
        assert abs(kept / allv.numel() - 0.13) < 0.03


def test_global_pass_detects_nan():
    from mmgrid.merge.errors import NonFiniteError

    base = {"x": torch.zeros(4)}
    a = {"x": t(1, float("nan"), 2, 3)}
    with pytest.raises(NonFiniteError, match="x"):
        merge("ties", [a], base=base, density=0.5)


def test_task_arithmetic_and_average_and_temporal():
    base, a, b = {"w": t(1, 1)}, {"w": t(2, 3)}, {"w": t(0, 5)}
    assert torch.allclose(merge("task_arithmetic", [a, b], base=base, weights=[0.5, 2.0])["w"], t(1 + 0.5 - 2, 1 + 1 + 8))
    assert torch.allclose(merge("average", [a, b])["w"], t(1, 4))
    assert torch.allclose(merge("average", [a, b], weights=[3, 1])["w"], t(1.5, 3.5))
    # Eq. 10 with lambda = 1.5 extrapolates: 2 + 1.5*(0-2), 3 + 1.5*(5-3)
    assert torch.allclose(merge("temporal", [a, b], **{"lambda": 1.5})["w"], t(-1, 6))


def test_dare_hand_and_unbiased():
    g = torch.Generator().manual_seed(0)
    d = ops.dare(torch.ones(200_000), 0.3, g)
    assert torch.all((d == 0) | torch.isclose(d, torch.tensor(1 / 0.7)))
    assert abs(float(d.mean()) - 1.0) < 0.01  # E[dare(x)] = x
    assert abs(float((d == 0).float().mean()) - 0.3) < 0.01


def test_orthomerge_recovers_rotation():
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(8, 5, generator=g)  # torch (out=8, in=5): R acts on the 5-dim input side
    a = torch.randn(5, 5, generator=g)
    q = 0.1 * (a - a.T)
    from mmgrid.merge.geometry import cayley, inverse_cayley

    r = cayley(q)
    assert torch.allclose(inverse_cayley(r), q, atol=1e-5)
    w = w0 @ r.T  # paper orientation: W^T = R W0^T
    out = merge("orthomerge", [{"w": w}, {"w": w}], base={"w": w0})["w"]
    assert torch.allclose(out, w, atol=1e-4)
    # two rotations: result is Cayley(c * mean Q) applied to W0 (residuals are 0)
    b = torch.randn(5, 5, generator=g)
    q2 = 0.1 * (b - b.T)
    w2 = w0 @ cayley(q2).T
    out = merge("orthomerge", [{"w": w}, {"w": w2}], base={"w": w0})["w"]
    c = (q.norm() + q2.norm()) / (q + q2).norm()
    expect = w0 @ cayley(c * (q + q2) / 2).T
    assert torch.allclose(out, expect, atol=1e-4)


def test_orthomerge_conflict_aware_one_model_is_that_model():
    g = torch.Generator().manual_seed(1)
    w0, w1 = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    out = merge("orthomerge", [{"w": w1}], base={"w": w0}, strategy="conflict_aware")["w"]
    assert torch.allclose(out, w1, atol=1e-4)


def test_gcwm_reports_conflicts_and_gates(models):
    from mmgrid.merge.api import merge_with_info

    out, info = merge_with_info("gcwm", [models["a"], models["b"]], base=models["base"], threshold=0.0)
    scores = info.report["conflict"]
    assert "layers.0.up.weight" in scores and "embed_tokens.weight" not in scores
    assert all(0.0 <= s["score"] <= 1.0 for s in scores.values())
    assert all(s["branch"] == "geometry" for s in scores.values() if s["score"] > 0)
    # threshold 1: never above it -> plain task arithmetic everywhere
    ta = merge("task_arithmetic", [models["a"], models["b"]], base=models["base"])
    hi = merge("gcwm", [models["a"], models["b"]], base=models["base"], threshold=1.0)
    for k in ta:
        assert torch.allclose(hi[k].float(), ta[k].float(), atol=1e-6)


def test_gcwm_identical_updates_have_zero_conflict(models):
    from mmgrid.merge.api import merge_with_info

    out, info = merge_with_info("gcwm", [models["a"], models["a"]], base=models["base"], threshold=0.0, gate="soft")
    for s in info.report["conflict"].values():
        assert s["score"] < 1e-6
    ta = merge("task_arithmetic", [models["a"], models["a"]], base=models["base"])
    for k in ta:
        assert torch.allclose(out[k].float(), ta[k].float(), atol=1e-4)


def test_oft_adapters_merge_in_lie_algebra():
    from mmgrid.merge.oft import merge_oft_adapters

    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 6, generator=g)  # packed upper triangles of 4x4 blocks
    b = torch.randn(2, 6, generator=g)
    out = merge_oft_adapters([{"l.oft_R.weight": a, "l.bias": t(1, 2)}, {"l.oft_R.weight": b, "l.bias": t(3, 4)}])
    assert torch.allclose(out["l.bias"], t(2, 3))
    for r in range(2):
        c = (a[r].norm() + b[r].norm()) / (a[r] + b[r]).norm()  # skew norms are sqrt(2) x packed norms
        assert torch.allclose(out["l.oft_R.weight"][r], c * (a[r] + b[r]) / 2, atol=1e-5)
    same = merge_oft_adapters([{"x.oft_r": a.new_zeros(1, 3, 3) + torch.eye(3)}, {"x.oft_r": torch.zeros(1, 3, 3)}])
    assert torch.allclose(same["x.oft_r"], torch.zeros(1, 3, 3))


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_dare_merge_is_seeded(models, p):
    a = merge("dare", [models["a"], models["b"]], base=models["base"], p=p, seed=3)
    b = merge("dare", [models["a"], models["b"]], base=models["base"], p=p, seed=3)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_elect_sign_is_the_one_rule_by_hand():
    """TIES sign election (Yadav et al. 2023, Sec. 3 step 2) on hand-computed masses: the
    dense pipeline, the fast pass (into a buffer) and LoRA merging call this function."""
    d1 = torch.tensor([1.0, -2.0, 0.0, 3.0, -1.0])
    d2 = torch.tensor([-3.0, 1.0, 0.0, -1.0, 1.0])
    # unweighted mass: -2, -1, 0, 2, 0 -> -1, -1, +1, +1, +1 (0 elects +1)
    assert ops.elect_sign([d1, d2]).tolist() == [-1.0, -1.0, 1.0, 1.0, 1.0]
    # weights are read under the weighted rule only: 3 d1 + d2 = 0, -5, 0, 8, -2
    assert ops.elect_sign([d1, d2], [3.0, 1.0]).tolist() == [-1.0, -1.0, 1.0, 1.0, 1.0]
    assert ops.elect_sign([d1, d2], [3.0, 1.0], "weighted").tolist() == [1.0, -1.0, 1.0, 1.0, -1.0]
    buf = torch.full((5,), 7.0)
    out = ops.elect_sign([d1, d2], out=buf)
    assert out.data_ptr() == buf.data_ptr() and buf.tolist() == [-1.0, -1.0, 1.0, 1.0, 1.0]
    assert [d1.tolist(), d2.tolist()] == [[1.0, -2.0, 0.0, 3.0, -1.0], [-3.0, 1.0, 0.0, -1.0, 1.0]]  # inputs kept
    assert ops.elect_sign([torch.tensor([-0.0])]).tolist() == [1.0]
    with pytest.raises(ValueError, match="sign rule 'majority'"):
        ops.elect_sign([d1], rule="majority")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("seed", range(4))
def test_two_histograms_give_the_exact_kth_largest_magnitude(dtype, seed):
    """ops.threshold_bin + ops.sub_bin_histogram + ops.bin_value over chunks give the k-th
    largest |x| exactly (torch.kthvalue's value), with heavy ties (bf16 values) and zeros."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(5000, generator=g) * 0.01).to(dtype).float()
    x[torch.rand(5000, generator=g) < 0.2] = 0.0
    chunks = list(x.split(333))
    hist = torch.zeros(ops.N_MAG_BINS, dtype=torch.int64)
    for c in chunks:
        part = ops.magnitude_histogram(c)
        hist[: part.numel()] += part
    for k in (1, 2, 17, 1000, 2500, 3999, 4000, 4001, 4999, 5000):
        b, above = ops.threshold_bin(hist, k)
        sub = sum(ops.sub_bin_histogram(c, b) for c in chunks)
        assert ops.bin_value(b, sub, k - above) == ops.kth_largest_magnitude(x, k), k
