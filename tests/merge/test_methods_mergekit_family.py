"""Breadcrumbs, breadcrumbs_ties, della, della_linear, sce, ram: a
hand-computed case and an invariant each (the shared checks, bounds, identical inputs
and symmetry are in test_methods_table.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch

from mmgrid.merge import masks, merge
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import validate_params
from mmgrid.merge.methods.breadcrumbs import breadcrumbs_keep
from mmgrid.merge.methods.della import della_keep_probs


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def zeros(n):
    return {"w": torch.zeros(n)}


# --- breadcrumbs ------------------------------------------------------------------------

TAU = t(0.1, -5, 2, -0.3, 1, 4, -3, 0.2, 0.5, -1.5)


def test_breadcrumbs_hand_case():
    """N = 10, density 0.5, gamma 0.1: keep 5, drop the 1 largest (-5) and the 4 smallest
    (0.1, 0.2, -0.3, 0.5)."""
    out = merge("breadcrumbs", [{"w": TAU}], base=zeros(10), density=0.5, gamma=0.1, weights=[2.0])["w"]
    assert torch.equal(out, 2 * t(0, 0, 2, 0, 1, 4, -3, 0, 0, -1.5))
    # l1 rescale: kept L1 = 11.5, tau's L1 = 17.6
    l1 = merge("breadcrumbs", [{"w": TAU}], base=zeros(10), density=0.5, gamma=0.1, rescale="l1")["w"]
    assert torch.allclose(l1, t(0, 0, 2, 0, 1, 4, -3, 0, 0, -1.5) * (17.6 / 11.5))


def test_breadcrumbs_keeps_exactly_floor_density_n_and_no_outlier():
    g = torch.Generator().manual_seed(0)
    for n, density, gamma in ((1000, 0.2, 0.01), (37, 0.5, 0.1), (4, 0.5, 0.01), (10, 0.95, 0.2)):
        d = torch.randn(n, generator=g)
        keep = breadcrumbs_keep(d, density, gamma)
        assert int(keep.sum()) == int(density * n)
        n_top = min(int(gamma * n), n - int(density * n))
        top = torch.topk(d.abs(), n_top).indices if n_top else torch.tensor([], dtype=torch.long)
        assert not keep[top].any()  # the gamma largest are gone
        if keep.any():  # every kept entry is larger than every dropped non-outlier
            dropped = ~keep
            dropped[top] = False
            assert not dropped.any() or float(d.abs()[keep].min()) >= float(d.abs()[dropped].max())
    # gamma * N < 1 (4 entries, gamma 0.01): the 2 largest are kept (mergekit drops all here)
    assert breadcrumbs_keep(t(1, -4, 2, 3), 0.5, 0.01).tolist() == [False, True, False, True]
    # density 1 keeps everything (no outlier removed), as mergekit does
    assert breadcrumbs_keep(TAU, 1.0, 0.1).all()


def test_breadcrumbs_ties_hand_case_and_sign_rules():
    """density 0.75, gamma 0.25 on 4 entries: drop each vector's largest entry.
    S1 = (0, -1, 2, 0.5), S2 = (-1, 2, 1, 0); sum = (-1, 1, 3, 0.5): signs (-, +, +, +)."""
    a, b = {"w": t(3, -1, 2, 0.5)}, {"w": t(-1, 2, 1, -4)}
    kw = dict(base=zeros(4), density=0.75, gamma=0.25)
    assert torch.equal(merge("breadcrumbs_ties", [a, b], **kw)["w"], t(-1, 2, 3, 0.5))
    assert torch.equal(merge("breadcrumbs_ties", [a, b], combine="disjoint_mean", **kw)["w"], t(-1, 2, 1.5, 0.5))
    # weights (3, 1): unweighted keeps '+' at entry 1 (S2 = 2, weight 1); weighted mass
    # 3 S1 + S2 = (-1, -1, 7, 1.5) elects '-' there (S1 = -1, weight 3)
    assert torch.equal(merge("breadcrumbs_ties", [a, b], weights=[3.0, 1.0], **kw)["w"], t(-1, 2, 7, 1.5))
    assert torch.equal(merge("breadcrumbs_ties", [a, b], weights=[3.0, 1.0], sign_rule="weighted", **kw)["w"],
                       t(-1, -3, 7, 1.5))


# --- della ------------------------------------------------------------------------------

def test_della_keep_probabilities_by_rank_within_rows():
    # 1-D: one row; ranks of |(1, -4, 2, 3)| are (0, 3, 1, 2); k = 0.3 + 0.4 r / 3
    k = della_keep_probs(t(1, -4, 2, 3), 0.5, 0.2)
    assert torch.allclose(k, t(0.3, 0.7, 0.3 + 0.4 / 3, 0.3 + 0.8 / 3))
    # 2-D: each row ranked on its own (mergekit ranks along dim 1)
    k2 = della_keep_probs(torch.tensor([[1.0, 2.0], [4.0, -3.0]]), 0.5, 0.2)
    assert torch.allclose(k2, torch.tensor([[0.3, 0.7], [0.7, 0.3]]))
    assert torch.allclose(della_keep_probs(t(5.0), 0.5, 0.2), t(0.3))  # one entry: the window's low end


def test_della_hand_case_with_injected_masks():
    seen = {}

    def fn(key, index, drop, shape):
        seen[index] = drop.clone()
        return torch.tensor([True, True, False, True])

    m = {"w": t(1, -4, 2, 3)}
    kw = dict(base=zeros(4), density=0.5, epsilon=0.2)
    k = t(0.3, 0.7, 0.3 + 0.4 / 3, 0.3 + 0.8 / 3)
    with masks.injected_masks(fn):
        inv = merge("della_linear", [m], **kw)["w"]
        l1 = merge("della_linear", [m], rescale="l1", **kw)["w"]
        none = merge("della", [m], rescale="none", **kw)["w"]
    assert torch.allclose(seen[0], 1 - k)  # the mask is asked for with drop probabilities 1 - k_e
    assert torch.allclose(inv, t(1 / 0.3, -4 / 0.7, 0, 3 / (0.3 + 0.8 / 3)), rtol=1e-6)
    assert torch.allclose(l1, t(1.25, -5, 0, 3.75))  # L1 10 over kept L1 8
    assert torch.equal(none, t(1, -4, 0, 3))


def test_della_sign_rules_and_linear_at_density_one():
    """density 1 drops nothing: della is TIES at density 1, della_linear task arithmetic."""
    a, b, z = {"w": t(1.0, 2.0)}, {"w": t(-3.0, 1.0)}, zeros(2)
    kw = dict(base=z, density=1.0, weights=[3.0, 0.5])
    assert torch.allclose(merge("della", [a, b], **kw)["w"], t(-3.0, 6.5 / 3.5))
    assert torch.allclose(merge("della", [a, b], sign_rule="weighted", **kw)["w"], t(1.0, 6.5 / 3.5))
    assert torch.allclose(merge("della_linear", [a, b], scale=0.5, **kw)["w"], 0.5 * t(1.5, 6.5))


def test_della_inverse_keep_is_unbiased_statistically():
    """E[S(tau)] = tau entrywise: 60k entries of 2.0 (ranks by position), keep 0.3..0.7."""
    out = merge("della_linear", [{"w": torch.full((60_000,), 2.0)}], base=zeros(60_000), density=0.5,
                epsilon=0.2, seed=5)["w"]
    # per entry 2/k w.p. k: variance 4 (1 - k) / k <= 4 * 0.7 / 0.3; sd of the mean <= 0.013
    assert abs(float(out.mean()) - 2.0) < 0.06
    assert abs(float((out != 0).float().mean()) - 0.5) < 0.01  # the mean keep probability is density
    again = merge("della_linear", [{"w": torch.full((60_000,), 2.0)}], base=zeros(60_000), density=0.5,
                  epsilon=0.2, seed=5)["w"]
    assert torch.equal(out, again)  # a seed reproduces the draw


def test_della_window_must_fit():
    with pytest.raises(MergeParamError, match="density \\+/- epsilon"):
        validate_params("della", {"density": 0.1, "epsilon": 0.15})
    validate_params("della", {"density": 1.0, "epsilon": 0.15})  # density 1: nothing dropped


# --- sce --------------------------------------------------------------------------------

def test_sce_hand_case():
    """tau1 = (1, 2, -1), tau2 = (3, -2, -1): w = (2, 14/3) / (20/3) = (0.3, 0.7);
    signs of the sum (4, 0, -2): (+, +, -); entry 1 keeps tau1 alone."""
    a, b, z = {"w": t(1, 2, -1)}, {"w": t(3, -2, -1)}, zeros(3)
    assert torch.allclose(merge("sce", [a, b], base=z)["w"], t(2.4, 2, -1))
    # select_topk 0.5: variances (1, 4, 0), 2 nonzero, keep 1 entry (entry 1); then
    # w = (0.5, 0.5), the sum at entry 1 is 0 (elects +): tau1's 2 alone
    assert torch.allclose(merge("sce", [a, b], base=z, select_topk=0.5)["w"], t(0, 2, 0))


def test_sce_of_one_model_is_that_model():
    g = torch.Generator().manual_seed(1)
    base, m = {"w": torch.randn(5, 3, generator=g)}, {"w": torch.randn(5, 3, generator=g)}
    assert torch.allclose(merge("sce", [m], base=base)["w"], m["w"], rtol=1e-6, atol=1e-6)


# --- ram --------------------------------------------------------------------------------

def test_ram_hand_case():
    """Entry 0: mean of 3 contributors; 1 and 2: one contributor, kept whole; 3: below eps."""
    ins = [{"w": t(0.5, 0, 2, 1e-6)}, {"w": t(0.1, 3, 0, 0)}, {"w": t(0.3, 0, 0, 0)}]
    assert torch.allclose(merge("ram", ins, base=zeros(4))["w"], t(0.3, 3, 2, 0))
    # epsilon 0.2 leaves out 0.1 at entry 0: mean of 0.5 and 0.3
    assert torch.allclose(merge("ram", ins, base=zeros(4), epsilon=0.2)["w"], t(0.4, 3, 2, 0))


def test_ram_disjoint_updates_are_kept_whole(models):
    """Invariant: inputs that change disjoint entries merge into the sum of their changes."""
    base = models["base"]["layers.0.q.weight"]
    g = torch.Generator().manual_seed(3)
    upd = torch.randn(base.shape, generator=g)
    mask = torch.rand(base.shape, generator=g) < 0.5
    a, b = {"w": base + torch.where(mask, upd, 0.0)}, {"w": base + torch.where(mask, 0.0, upd)}
    out = merge("ram", [a, b], base={"w": base})["w"]
    assert torch.allclose(out, base + upd, rtol=1e-6, atol=1e-6)


def test_ram_epsilon_must_be_non_negative():
    with pytest.raises(MergeParamError, match="epsilon"):
        validate_params("ram", {"epsilon": -1.0})


# --- ramplus_tl -------------------------------------------------------------------------

def test_ramplus_hand_case():
    """Entry 0: three contributors (mean 0.3); 1: input 2 alone; 2 and 4: input 1 alone; 3: below eps.
    Input 1 changes 1 shared and 2 unique entries: rho 0.5; input 2 1 and 1: rho 1.
    r = 0.5, rho_max = 2: lambda = 1.25, 1.5; the defaults (r 0.1, rho_max 0.2) give 1.02 for both."""
    ins = [{"w": t(0.5, 0, 2, 1e-6, 1)}, {"w": t(0.1, 3, 0, 0, 0)}, {"w": t(0.3, 0, 0, 0, 0)}]
    out = merge("ramplus_tl", ins, base=zeros(5), r=0.5, rho_max=2.0)["w"]
    assert torch.allclose(out, t(0.3, 4.5, 2.5, 0, 1.25))
    out = merge("ramplus_tl", ins, base=zeros(5))["w"]
    assert torch.allclose(out, t(0.3, 3.06, 2.04, 0, 1.02))
    # r = 0 is RAM
    assert torch.equal(merge("ramplus_tl", ins, base=zeros(5), r=0.0)["w"], merge("ram", ins, base=zeros(5))["w"])


def test_ramplus_params_are_checked():
    with pytest.raises(MergeParamError, match="rho_max"):
        validate_params("ramplus_tl", {"rho_max": -0.1})


# --- arcee_fusion -----------------------------------------------------------------------

def test_arcee_fusion_hand_case():
    """1-D: one softmax row, so KL is one positive number and the mask is |tau| >= the fence of
    |tau|: sorted, the quantiles at floor(q * 8) are 0.3, 0.5, 0.7, fence 0.5 + 1.5 * 0.4 = 1.1."""
    other = {"w": t(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 5.0)}
    out = merge("arcee_fusion", [other], base=zeros(9))["w"]
    assert torch.equal(out, t(0, 0, 0, 0, 0, 0, 0, 0, 5.0))


def test_arcee_fusion_ignores_rows_shifted_by_a_constant():
    """softmax is shift-invariant: a row moved by a constant has KL 0, importance 0, and stays
    at the base, however large the shift; a row with the outlying change is taken."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g)
    other = base + 0.01 * torch.randn(6, 5, generator=g)
    other[0] = base[0] + 50.0  # a large constant shift
    other[3, 2] = base[3, 2] + 4.0  # an outlying change
    out = merge("arcee_fusion", [{"w": other}], base={"w": base})["w"]
    assert torch.equal(out[0], base[0])
    assert out[3, 2] == other[3, 2]


# --- selection instead of sorting: the same masks, ranks and fences as a stable sort ----------

def _sorted_breadcrumbs_keep(delta: torch.Tensor, density: float, gamma: float) -> torch.Tensor:
    """The mask by a stable sort of |tau| (the definition, as mergekit slices its argsort)."""
    n = delta.numel()
    target, n_top = int(density * n), int(gamma * n)
    n_bot = n - target - n_top
    if n_bot < 0:
        n_top, n_bot = n_top + n_bot, 0
    order = torch.sort(delta.reshape(-1).abs().float(), stable=True).indices
    keep = torch.zeros(n, dtype=torch.bool)
    keep[order[n_bot:n - n_top]] = True
    return keep.reshape(delta.shape)


def _sorted_della_probs(delta: torch.Tensor, density: float, epsilon: float) -> torch.Tensor:
    x = delta.float()
    x = x.reshape(1, -1) if x.ndim < 2 else x
    m = x.shape[1]
    ranks = torch.sort(x.abs(), dim=1, stable=True).indices.argsort(dim=1).to(torch.float32)
    rank_norm = ranks / (m - 1) if m > 1 else torch.zeros_like(ranks)
    return ((density - epsilon) + rank_norm * (2 * epsilon)).reshape(delta.shape)


def _sorted_fence(scores: torch.Tensor) -> float:
    flat, _ = torch.sort(scores.reshape(-1))
    q1, med, q3 = (flat[i] for i in (torch.tensor([0.25, 0.5, 0.75]) * (flat.numel() - 1)).long())
    return float(med + 1.5 * (q3 - q1))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([(7,), (5, 6), (1, 9), (3, 1), (2, 3, 4), (1,), (40,)]),
       st.booleans(), st.sampled_from([(0.5, 0.01), (0.1, 0.3), (0.9, 0.2), (0.3, 0.0), (0.01, 0.01), (1.0, 0.0), (0.6, 0.6)]))
def test_selection_equals_the_stable_sort(seed, shape, ties, dens_gamma):
    """Many equal magnitudes (small integers, +-0) are where a selection could rank differently
    from a stable sort; the masks, keep probabilities and fences must be identical."""
    from mmgrid.merge.methods.arcee_fusion import fence

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).float() * 0.5 if ties else torch.randn(shape, generator=g)
    x[x == 0] = -0.0 if seed % 2 else 0.0
    density, gamma = dens_gamma
    assert torch.equal(breadcrumbs_keep(x, density, gamma), _sorted_breadcrumbs_keep(x, density, gamma))
    for d, e in ((0.5, 0.1), (0.3, 0.2), (0.9, 0.1)):
        assert torch.equal(della_keep_probs(x, d, e), _sorted_della_probs(x, d, e))
    assert fence(x.abs()) == _sorted_fence(x.abs())


@pytest.mark.parametrize("method,params", [("ramplus_tl", {}), ("ramplus_tl", {"epsilon": 0.0, "r": 0.5, "rho_max": 2.0}),
                                           ("sce", {}), ("ram", {})])
def test_first_pass_methods_merge_in_row_chunks_with_whole_tensor_bits(models, monkeypatch, method, params):
    """ramplus_tl's counts and sce's means come from a first pass, so the merge pass is cut into
    row chunks; chunks of one row and whole tensors give the same bits."""
    from mmgrid.merge import plan

    ins = [models["a"], models["b"], models["c"]]
    monkeypatch.setattr(plan, "CHUNK_ELEMS", 1 << 30)
    whole = merge(method, ins, base=models["base"], **params)
    monkeypatch.setattr(plan, "CHUNK_ELEMS", 1)
    rows = merge(method, ins, base=models["base"], **params)
    assert whole.keys() == rows.keys() and all(torch.equal(whole[k], rows[k]) for k in whole)


def test_ramplus_counts_span_the_whole_tensor(monkeypatch):
    """rho_i counts over the whole tensor, not over a chunk: input a changes entry 0 alone in
    row 0 and shares entry 1 with b in row 1; cut into one-row chunks, row 0 still gets
    lambda_a = 1 + r min(1/1, rho_max)."""
    from mmgrid.merge import plan

    monkeypatch.setattr(plan, "CHUNK_ELEMS", 1)
    base = {"w": torch.zeros(2, 1)}
    a, b = {"w": torch.tensor([[1.0], [1.0]])}, {"w": torch.tensor([[0.0], [3.0]])}
    out = merge("ramplus_tl", [a, b], base=base, r=0.5, rho_max=2.0)["w"]
    assert torch.allclose(out, torch.tensor([[1.5], [2.0]]))


@pytest.mark.parametrize("method,params", [("breadcrumbs", {"density": 0.5, "gamma": 0.1, "weights": [0.7, 1.3, -0.2], "scale": 1.1}),
                                           ("della_linear", {"density": 0.5, "epsilon": 0.1, "rescale": "inverse_keep"})])
def test_weighted_sum_one_input_at_a_time_equals_fuse(models, method, params):
    """breadcrumbs / della_linear sum their sparsified task vectors one input at a time; the
    bits are those of sparsifying all of them and fusing (pipeline.fuse)."""
    from mmgrid.merge import pipeline as pl
    from mmgrid.merge.methods import get_method, validate_params

    ins = [models["a"], models["b"], models["c"]]
    got = merge(method, ins, base=models["base"], **params)
    m = get_method(method)(validate_params(method, params))
    for k, v in got.items():
        if not v.is_floating_point():
            continue
        ds = [m.sparsify(k, i, x[k].float() - models["base"][k].float()) for i, x in enumerate(ins)]
        want = pl.fuse(m.fuse_config(3), ds).add_(models["base"][k]).to(v.dtype)
        assert torch.equal(v, want), k


@pytest.mark.parametrize("row_chunk", [1, 7, 1 << 22])
def test_arcee_fusion_in_row_chunks_equals_the_whole_tensor_rule(models, monkeypatch, row_chunk):
    """The importances in row chunks, then the fence and the choice: the bits of the rule on
    whole float32 tensors (I, T, [I >= T] of the module docstring)."""
    from mmgrid.merge.methods import arcee_fusion as af

    monkeypatch.setattr(af, "ROW_CHUNK", row_chunk)
    got = merge("arcee_fusion", [models["a"]], base=models["base"])
    for k, v in got.items():
        if not v.is_floating_point():
            continue
        b, a = models["a"][k].float(), models["base"][k].float()
        scores = af.importance(b, a)
        want = torch.where(scores >= af.fence(scores), b, a).to(v.dtype)
        assert torch.equal(v, want), k


def _arcee_pair() -> tuple[dict, dict]:
    """Rows changed by a tiny amount have KLs that round below 0 (negative importances), rows
    of equal bf16 values tie, a row moved by a constant has KL 0; tensor shapes of 1, 2 and
    3 dimensions."""
    g = torch.Generator().manual_seed(5)
    base = {"w": torch.randn(40, 16, generator=g), "v": torch.randn(24, generator=g),
            "t": torch.randn(3, 5, 7, generator=g), "e": torch.randn(1, 3, generator=g)}
    other = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in base.items()}
    other["w"][:20] = base["w"][:20] + 1e-6 * torch.randn(20, 16, generator=g)
    other["w"][20] = base["w"][20] + 3.0
    other["t"][1] = torch.round(other["t"][1] * 4) / 4
    return base, other


@pytest.mark.parametrize("chunk,prepare_chunk", [(5, 3), (7, 64), (1 << 17, 1 << 22)])
@pytest.mark.parametrize("row_chunk", [16, 1 << 16])
def test_arcee_fusion_streamed_equals_the_sorted_rule(monkeypatch, chunk, prepare_chunk, row_chunk):
    """The streaming passes (row KLs on a fixed grid of rows, histogram quantiles with a
    negative side, the entrywise merge pass), pieces cut anywhere, give the bits of the rule on
    whole float32 tensors with the quantiles read off a full sort; the reference route too."""
    from mmgrid.merge.executor import REFERENCE, Route
    from mmgrid.merge.methods import arcee_fusion as af

    monkeypatch.setattr(af, "ROW_CHUNK", row_chunk)
    base, other = _arcee_pair()
    assert bool((af.importance(other["w"], base["w"]) < 0).any())  # the negative side is exercised
    for route in (Route(chunk=chunk, prepare_chunk=prepare_chunk), REFERENCE):
        got = merge("arcee_fusion", [other], base=base, route=route)
        for k, v in got.items():
            scores = af.importance(other[k], base[k])
            want = torch.where(scores >= _sorted_fence(scores), other[k], base[k])
            assert torch.equal(v, want), (k, route)


def test_arcee_fusion_hand_case_with_negative_quantiles(monkeypatch):
    """Quantiles among negative importances: with every row's KL replaced by -1, I = -|tau|.
    |tau| = 1 (nine entries) and 100: the sorted scores are -100, -1, ..., -1, so Q_0.25 =
    median = Q_0.75 = -1 and T = -1: the nine entries of I = -1 are taken, the outlier (I =
    -100) keeps the base. (Read as magnitudes, T would be 1 and every entry taken.)"""
    from mmgrid.merge.methods import arcee_fusion as af

    tau = torch.tensor([[1.0, -1.0, 1.0, 1.0, 1.0], [1.0, 1.0, -1.0, 100.0, 1.0]])
    monkeypatch.setattr(af, "row_kl", lambda rows, brows: -torch.ones(rows.shape[0], 1))
    want = tau.clone()
    want[1, 3] = 0.0
    for route_chunk in (1 << 17, 3):
        from mmgrid.merge.executor import Route

        got = merge("arcee_fusion", [{"w": tau}], base={"w": torch.zeros(2, 5)}, route=Route(chunk=route_chunk, prepare_chunk=route_chunk))
        assert torch.equal(got["w"], want)


@pytest.mark.parametrize("rank_chunk", [1, 6, 1 << 22])
def test_della_ranks_in_row_chunks(monkeypatch, rank_chunk):
    """MagPrune ranks rows independently, so row chunks give the stable sort's probabilities;
    the caller's task vector is left as it was."""
    from mmgrid.merge.methods import della

    monkeypatch.setattr(della, "RANK_CHUNK", rank_chunk)
    x = torch.randint(-3, 4, (7, 5), generator=torch.Generator().manual_seed(0)).float() * 0.25
    before = x.clone()
    assert torch.equal(della_keep_probs(x, 0.5, 0.1), _sorted_della_probs(x, 0.5, 0.1))
    assert torch.equal(x, before)


# --- the first pass of model_stock and sce (tensor_grams) --------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_tensor_grams_equal_blockedgram_fed_fresh_deltas(dtype):
    """tensor_grams (reused buffers, a worker thread) gives the bits of BlockedGram fed each
    piece's view.deltas() in order, for pieces cut anywhere (across the 2^16-entry blocks)."""
    from mmgrid.merge.methods import spherical as sp
    from mmgrid.merge.methods.base import TensorView, ViewStream
    from mmgrid.merge.methods.model_stock import tensor_grams

    g = torch.Generator().manual_seed(3)
    tensors = {"a": 200_003, "b": 5, "c": 70_000}
    base = {k: torch.randn(n, generator=g).to(dtype) for k, n in tensors.items()}
    ins = [{k: (v.float() + 0.01 * torch.randn(v.shape, generator=g)).to(dtype) for k, v in base.items()} for _ in range(3)]
    cuts = {"a": [0, 1, 65_536, 65_537, 150_000, 200_003], "b": [0, 5], "c": [0, 33_333, 70_000]}

    def views():
        for k, cs in cuts.items():
            for a, b in zip(cs, cs[1:]):
                yield TensorView(k, [m[k][a:b].clone() for m in ins], base[k][a:b].clone())

    want = {}
    for k in tensors:
        gr = sp.BlockedGram(3)
        for v in views():
            if v.name == k:
                gr.add(v.deltas())
        want[k] = gr.result()
    got = {}
    tensor_grams(ViewStream(views, sum(tensors.values())), lambda name, gram, n: got.__setitem__(name, (gram, n)))
    assert got == {k: (want[k], n) for k, n in tensors.items()}


def test_tensor_grams_refuse_a_tensor_seen_twice():
    from mmgrid.merge.methods.base import TensorView, ViewStream
    from mmgrid.merge.methods.model_stock import tensor_grams

    x = torch.ones(4)
    stream = ViewStream(lambda: iter([TensorView(n, [x, x], x) for n in ("a", "b", "a")]), 12)
    with pytest.raises(RuntimeError, match="twice"):
        tensor_grams(stream, lambda *a: None)
