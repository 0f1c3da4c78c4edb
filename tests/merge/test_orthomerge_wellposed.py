"""OrthoMerge on every shape: the minimal Procrustes rotation where the cross-covariance is
rank-deficient, the reach of the merged rotation, and the paper's result where the problem
is well-posed (OrthoMerge, Eq. 3-5, 7-8, 12-14, Algorithm 1)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import orthogonal_procrustes

from mmgrid.merge import geometry as geo
from mmgrid.merge import merge
from mmgrid.merge.api import merge_with_info
from mmgrid.merge.methods import get_method, identity, validate_params


def _old_orthomerge(w0: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
    """Algorithm 1 as first written (global targets, task-arithmetic residuals, weights 1,
    paper orientation): R_i = U V^T of SVD(W_i W_0^T), no cap. The oracle where it is
    well-posed."""
    eye = torch.eye(w0.shape[0], dtype=torch.float64)
    rs = []
    for w in ws:
        u, _, vh = torch.linalg.svd(w.double() @ w0.double().T)
        rs.append(u @ vh)
    qs = []
    for r in rs:
        q = torch.linalg.solve(r + eye, r - eye)
        qs.append(0.5 * (q - q.T))
    total = sum(qs)
    c = sum(float(torch.linalg.matrix_norm(q)) for q in qs) / float(torch.linalg.matrix_norm(total))
    q = total * c / len(qs)
    r = torch.linalg.solve(eye - q, eye + q)
    rho = sum(w.double() - ri @ w0.double() for w, ri in zip(ws, rs))
    return (r @ w0.double() + rho).float()


def _issue_case(seed: int, shape: tuple[int, int], n: int = 3):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=g)
    ins = [base + 0.1 * torch.randn(shape, generator=g) for _ in range(n)]
    return base, ins


def test_wide_weight_update_within_the_stated_bound():
    """A (4, 6) weight, three inputs 0.1 N(0, 1) away from a N(0, 1) base: version 1 moved the
    base 4.8 (the old formula, recomputed here), the inputs at most 0.56."""
    base, ins = _issue_case(1, (4, 6))
    tops = [float((w - base).norm()) for w in ins]
    old = _old_orthomerge(base.T, [w.T for w in ins]).T
    assert float((old - base).norm()) > 8 * max(tops)  # the defect, as it was
    out = merge("orthomerge", [{"w": w} for w in ins], base={"w": base})["w"]
    c = get_method("orthomerge").update_bound(validate_params("orthomerge", {}), 3, base.numel())
    assert c == 5.0
    got = float((out - base).norm())
    assert got <= c * max(tops)
    assert got <= 1.5 * max(tops)  # it is now of the inputs' size: 0.60 vs 0.56


@pytest.mark.parametrize("side", ["in", "out"])
@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (4, 4), (3, 8)])
def test_every_shape_and_side_within_the_bound(shape, side):
    for seed in range(4):
        base, ins = _issue_case(seed, shape)
        out = merge("orthomerge", [{"w": w} for w in ins], base={"w": base}, side=side)["w"]
        tops = max(float((w - base).norm()) for w in ins)
        assert float((out - base).norm()) <= 5.0 * tops * (1 + 1e-6), (shape, side, seed)


def test_well_posed_square_case_is_unchanged():
    """Square, well-conditioned, full-rank cross-covariances: the old formula's result, and
    the reach cap does not act."""
    g = torch.Generator().manual_seed(7)
    a = torch.randn(5, 5, generator=g)
    base = a + 3 * torch.eye(5)
    ins = [base + 0.05 * torch.randn(5, 5, generator=g) for _ in range(3)]
    out, info = merge_with_info("orthomerge", [{"w": w} for w in ins], base={"w": base})
    want = _old_orthomerge(base.T, [w.T for w in ins]).T
    assert torch.allclose(out["w"], want, rtol=1e-5, atol=1e-6)
    assert "rotation_capped" not in info.report


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.integers(2, 6))
def test_full_rank_procrustes_matches_scipy(seed, d):
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(d, d + 2, generator=g, dtype=torch.float64)
    w = w0 + 0.3 * torch.randn(d, d + 2, generator=g, dtype=torch.float64)
    # scipy: argmin_Omega ||A Omega - B|| ; ours: argmin_R ||W - R W0|| = (argmin ||W0^T R^T - W^T||)^T
    omega, _ = orthogonal_procrustes(w0.T.numpy(), w.T.numpy())
    assert torch.allclose(geo.procrustes(w, w0).double(), torch.from_numpy(omega).T, atol=1e-5)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.integers(3, 7), st.integers(1, 3))
def test_rank_deficient_procrustes_is_the_minimal_rotation(seed, d, gap):
    """m = d - gap columns: R is orthogonal, fits as well as any orthogonal matrix (the
    optimum is ||W||^2 + ||W0||^2 - 2 ||W W0^T||_*), is the identity on the complement of
    span(U_k) + span(V_k), and no other optimal R is closer to I (tr R is the largest)."""
    m = max(1, d - gap)
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(d, m, generator=g, dtype=torch.float64)
    w = w0 + 0.3 * torch.randn(d, m, generator=g, dtype=torch.float64)
    r = geo.procrustes(w, w0).double()
    eye = torch.eye(d, dtype=torch.float64)
    assert torch.allclose(r.T @ r, eye, atol=1e-6)
    cross = w @ w0.T
    optimum = float(w.norm() ** 2 + w0.norm() ** 2 - 2 * torch.linalg.matrix_norm(cross, "nuc"))
    assert float((w - r @ w0).norm() ** 2) == pytest.approx(optimum, rel=1e-5, abs=1e-8)
    u, s, vh = torch.linalg.svd(cross)
    k = int((s > 1e-10 * s[0]).sum())
    span = torch.cat([u[:, :k], vh[:k].T], 1)
    full, _ = torch.linalg.qr(span, mode="complete")
    rank = int(torch.linalg.matrix_rank(span))
    rest = full[:, rank:]
    assert torch.allclose(r @ rest, rest, atol=1e-6)
    # any other completion U_c Z V_c^T (Z orthogonal, drawn) has a trace no larger
    gz = torch.Generator().manual_seed(seed + 1)
    for _ in range(50):
        z, _ = torch.linalg.qr(torch.randn(d - k, d - k, generator=gz, dtype=torch.float64))
        other = u[:, :k] @ vh[:k] + u[:, k:] @ z @ vh[k:]
        assert float(torch.trace(other)) <= float(torch.trace(r)) + 1e-6


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.integers(2, 6), st.floats(0.05, 0.95))
def test_cayley_reach(seed, d, frac):
    """Within reach: Q is returned as given. Beyond: the scaled generator moves W_0 by exactly
    the limit (Cayley computed independently), and the scale is in (0, 1)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g)
    q = 0.7 * (a - a.T)
    w0 = torch.randn(d, d + 1, generator=g)
    full = float((geo.cayley(q) @ w0 - w0).norm())
    same, capped = geo.cayley_reach(q, w0, full * 1.01)
    assert not capped and same is q
    short, capped = geo.cayley_reach(q, w0, frac * full)
    assert capped
    s = float(short.norm() / q.norm())
    assert 0 < s < 1 and torch.allclose(short, s * q, atol=1e-6)
    eye = torch.eye(d, dtype=torch.float64)
    r = (eye + short.double()) @ torch.linalg.inv(eye - short.double())
    assert float((r @ w0.double() - w0.double()).norm()) == pytest.approx(frac * full, rel=1e-5)


def test_cancelling_generators_are_capped_and_reported():
    """Two nearly opposite rotations: Eq. 8's c = sum ||Q_i|| / ||sum Q_i|| is huge and the
    mean is blown up to the inputs' angle along the small difference; the cap keeps the
    merged rotation's move of W_0 within 2 max_i ||tau_i||, and the report names the tensor."""
    d = 4
    w0 = torch.diag(torch.tensor([0.05, 0.05, 2.0, 2.0]))  # weak in the plane the inputs turn
    a = torch.zeros(d, d)
    a[0, 1], a[1, 0] = 1.5, -1.5
    b = torch.zeros(d, d)
    b[2, 3], b[3, 2] = 1e-3, -1e-3
    qs = [a + b, -a + b]
    ws = [geo.cayley(q) @ w0 for q in qs]  # paper orientation: rows rotated
    ins = [{"w": w.T.contiguous()} for w in ws]  # side=in transposes back
    out, info = merge_with_info("orthomerge", ins, base={"w": w0.T.contiguous()})
    tops = max(float((w - w0).norm()) for w in ws)
    got = float((out["w"].T - w0).norm())
    assert float((_old_orthomerge(w0, ws) - w0).norm()) > 10 * tops  # Eq. 7-8 uncapped
    assert "w" in info.report["rotation_capped"]
    assert got <= 2 * tops * (1 + 1e-4)  # the rotation moves W_0 by at most a; residuals ~0
    assert got == pytest.approx(2 * tops, rel=1e-3)


def test_version_two_in_the_identity():
    assert identity("orthomerge") == {"method": "orthomerge", "method_version": 2}


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.integers(2, 4), st.integers(1, 3))
def test_oft_merged_block_rotation_within_the_farthest_input(seed, n, blocks):
    """OFT adapters (no Procrustes): per block ||Q||_F = mean_i ||Q_i||_F (Eq. 8) and
    ||Cayley(Q) - I||_2 <= 2 t / sqrt(1 + t^2), t = max_i ||Q_i||_F (oft.py's docstring)."""
    from mmgrid.merge.oft import merge_oft_adapters

    g = torch.Generator().manual_seed(seed)
    b = 4
    ads = [{"l.oft_r": torch.randn(blocks, b, b, generator=g) * (0.3 + i)} for i in range(n)]
    out = merge_oft_adapters(ads)["l.oft_r"].double()
    for r in range(blocks):
        qs = [0.5 * (a["l.oft_r"][r].double() - a["l.oft_r"][r].double().T) for a in ads]
        norms = [float(q.norm()) for q in qs]
        assert float(out[r].norm()) == pytest.approx(sum(norms) / n, rel=1e-5)
        t = max(norms)
        move = float(torch.linalg.matrix_norm(geo.cayley(out[r].float()).double() - torch.eye(b, dtype=torch.float64), 2))
        assert move <= 2 * t / (1 + t * t) ** 0.5 * (1 + 1e-5)
