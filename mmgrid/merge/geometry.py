"""Pure tensor math of the geometric merges: the orthogonal group (OrthoMerge) and
Gaussian covariance geometry (GCWM). No I/O.

Conventions: OrthoMerge writes W in R^{d_in x d_out} and rotates with R in
R^{d_in x d_in} from the left (Eq. 1). The functions here take matrices in that
orientation; the method module transposes PyTorch ``(out, in)`` weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch


def procrustes(target: torch.Tensor, base: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """argmin_R ||target - R base||_F over orthogonal R (OrthoMerge Eq. 3-4, 12), the minimal one.

    With U S V^T = SVD(target base^T) of rank k (singular values above ``rtol`` s_max),
    every minimiser maps V_k onto U_k: R = U_k V_k^T + U_c Z V_c^T for any orthogonal Z
    between the complements (Gower and Dijksterhuis 2004, Procrustes Problems, Sec. 5).
    Full rank (k = d: a base with at least as many columns as rows and a cross-covariance
    of full rank) leaves no choice, R = U V^T. Rank-deficient (a base with fewer columns
    than rows -- the input space of a wide PyTorch weight, the output space of a tall one)
    leaves Z free, and any Z there is as good a fit; the one taken is the minimal rotation,
    max tr R = min ||R - I||_F: Z = Y X^T with X S Y^T = SVD(V_c^T U_c). It is the identity
    on every direction orthogonal to span(U_k) + span(V_k), the subspaces the data
    determine (the principal vectors of angle 0 between the complements).
    """
    u, s, vh = torch.linalg.svd(target.double() @ base.double().T)
    k = int((s > rtol * float(s[0])).sum()) if float(s[0]) > 0 else 0
    if k == s.numel():
        return (u @ vh).float()
    uc, vc = u[:, k:], vh[k:].T
    x, _, yh = torch.linalg.svd(vc.T @ uc)
    return (u[:, :k] @ vh[:k] + uc @ (yh.T @ x.T) @ vc.T).float()


def cayley(q: torch.Tensor) -> torch.Tensor:
    """R = (I + Q)(I - Q)^{-1} for skew-symmetric Q (OrthoMerge Eq. 2)."""
    eye = torch.eye(q.shape[-1], dtype=torch.float64)
    qd = q.double()
    # (I+Q)(I-Q)^{-1} = ((I-Q)^{-T}(I+Q)^T)^T; the factors commute, so solve from the right.
    return torch.linalg.solve(eye - qd, eye + qd).float()


def inverse_cayley(r: torch.Tensor) -> torch.Tensor:
    """Q = (R - I)(R + I)^{-1} (OrthoMerge Eq. 5), made exactly skew-symmetric.

    R + I is singular when R has the eigenvalue -1 (a reflection or a half turn);
    the least-squares solve then returns the minimum-norm generator.
    """
    eye = torch.eye(r.shape[-1], dtype=torch.float64)
    rd = r.double()
    # The factors commute, so (R-I)(R+I)^{-1} = (R+I)^{-1}(R-I).
    try:
        q = torch.linalg.solve(rd + eye, rd - eye)
    except RuntimeError:  # singular
        q = torch.linalg.lstsq(rd + eye, rd - eye).solution
    return (0.5 * (q - q.T)).float()


def magnitude_corrected_mean(qs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Q_merged = c mean_i Q_i, c = sum_i ||Q_i||_F / ||sum_i Q_i||_F (OrthoMerge Eq. 7-8)."""
    total = qs[0].double().clone()
    for q in qs[1:]:
        total += q.double()
    norm_sum = float(sum(float(torch.linalg.matrix_norm(q.double())) for q in qs))
    norm_total = float(torch.linalg.matrix_norm(total))
    if norm_total <= 1e-30:  # all generators cancel (or are zero): no rotation
        return torch.zeros_like(qs[0])
    return (total * (norm_sum / norm_total) / len(qs)).float()


def cayley_reach(q: torch.Tensor, w0: torch.Tensor, limit: float) -> tuple[torch.Tensor, bool]:
    """Q scaled by the s in (0, 1] at which ||(Cayley(s Q) - I) W_0||_F = ``limit``, or Q
    itself when it already stays within ``limit`` (then returned as given, bit for bit).

    For skew Q with eigenvalues i mu_k (eigenvectors v_k), Cayley(sQ) has eigenvalues
    e^{i phi_k}, |e^{i phi_k} - 1|^2 = 4 s^2 mu_k^2 / (1 + s^2 mu_k^2), so
    ||(Cayley(sQ) - I) W_0||_F^2 = sum_k 4 s^2 mu_k^2 / (1 + s^2 mu_k^2) ||v_k^H W_0||^2
    grows monotonically in s: bisection finds s.

    Returns:
        (the generator, whether it was scaled).
    """
    qd, wd = q.double(), w0.double()
    eye = torch.eye(q.shape[-1], dtype=torch.float64)
    reach = float(torch.linalg.matrix_norm(torch.linalg.solve(eye - qd, eye + qd) @ wd - wd))
    if reach <= limit * (1 + 1e-9):
        return q, False
    mu, v = torch.linalg.eigh(1j * qd.to(torch.complex128))  # i Q is Hermitian
    mass = (v.conj().T @ wd.to(torch.complex128)).abs().pow(2).sum(1)
    mu2 = mu.real.pow(2)

    def f(s: float) -> float:
        return float((4 * s * s * mu2 / (1 + s * s * mu2) * mass).sum()) ** 0.5

    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) <= limit else (lo, mid)
    return (q.double() * lo).to(q.dtype), True


def conflict_columns(taus: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Conflict-aware targets' updates tau_i^conf (OrthoMerge Eq. 10-11).

    Keeps column j of tau_i where cos(tau_i[:, j], tau_mean[:, j]) < 0; others are 0.
    """
    mean = torch.stack([t.float() for t in taus]).mean(0)
    out = []
    for t in taus:
        cos = torch.nn.functional.cosine_similarity(t.float(), mean, dim=0, eps=1e-12)
        out.append(t.float() * (cos < 0).to(torch.float32)[None, :])
    return out


def sym(a: torch.Tensor) -> torch.Tensor:
    """The symmetric part (A + A^T)/2."""
    return 0.5 * (a + a.T)


def sqrtm_psd(a: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Principal square root of a symmetric PSD matrix (eigenvalues clamped at eps)."""
    w, v = torch.linalg.eigh(sym(a.double()))
    return (v * w.clamp_min(eps).sqrt()) @ v.T


def inv_sqrtm_psd(a: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """A^{-1/2} of a symmetric positive definite matrix (eigenvalues clamped at eps)."""
    w, v = torch.linalg.eigh(sym(a.double()))
    return (v * w.clamp_min(eps).rsqrt()) @ v.T


def bures_distance_sq(a: torch.Tensor, b: torch.Tensor) -> float:
    """Squared Bures-Wasserstein distance of zero-mean Gaussians N(0, A), N(0, B).

    d^2 = tr A + tr B - 2 tr (A^{1/2} B A^{1/2})^{1/2}.
    """
    ra = sqrtm_psd(a)
    inner = sqrtm_psd(ra @ b.double() @ ra)
    return max(0.0, float(torch.trace(a.double()) + torch.trace(b.double()) - 2 * torch.trace(inner)))


def bw_barycenter(
    covs: Sequence[torch.Tensor], weights: Sequence[float], max_iter: int = 50, tol: float = 1e-7
) -> torch.Tensor:
    """Bures-Wasserstein barycenter of SPD matrices by the fixed-point iteration.

    S <- S^{-1/2} (sum_i w_i (S^{1/2} C_i S^{1/2})^{1/2})^2 S^{-1/2}, started at the
    weighted arithmetic mean (Alvarez-Esteban et al., 2016).
    """
    w = [float(x) / float(sum(weights)) for x in weights]
    cs = [sym(c.double()) for c in covs]
    s = cast(torch.Tensor, sum(wi * c for wi, c in zip(w, cs)))
    for _ in range(max_iter):
        rs, irs = sqrtm_psd(s), inv_sqrtm_psd(s)
        t = sum(wi * sqrtm_psd(rs @ c @ rs) for wi, c in zip(w, cs))
        nxt = sym(irs @ t @ t @ irs)
        done = float(torch.linalg.matrix_norm(nxt - s)) <= tol * float(torch.linalg.matrix_norm(s))
        s = nxt
        if done:
            break
    return s


def bw_transport(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The optimal transport map from N(0, A) to N(0, B) for SPD A, B (Bures-Wasserstein).

    T = A^{-1/2} (A^{1/2} B A^{1/2})^{1/2} A^{-1/2}: symmetric positive definite, with
    T A T = B, so a row x with second moment A is mapped to x T with second moment B.
    """
    ra, ira = sqrtm_psd(a), inv_sqrtm_psd(a)
    return sym(ira @ sqrtm_psd(ra @ b.double() @ ra) @ ira)


def right_basis(delta: torch.Tensor, rank: int, energy: float) -> torch.Tensor:
    """Top right singular vectors of delta: the smallest r <= rank capturing ``energy``.

    Returns:
        An orthonormal (cols x r) basis of the dominant row space.
    """
    _, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
    if float(s.sum()) == 0.0:
        return vh[:1].T
    cum = torch.cumsum(s**2, 0) / torch.sum(s**2)
    r = int(torch.searchsorted(cum, torch.tensor(energy, dtype=cum.dtype))) + 1
    return vh[: max(1, min(r, rank, s.numel()))].T


def union_basis(bases: Sequence[torch.Tensor], eps: float = 1e-8) -> torch.Tensor:
    """An orthonormal basis of the span of several bases (QR, dropping dependent columns)."""
    q, r = torch.linalg.qr(torch.cat(list(bases), dim=1))
    keep = r.diagonal().abs() > eps
    return q[:, keep] if bool(keep.any()) else q[:, :1]
