"""Task-vector diagnostics: magnitude, sign dissimilarity, cosine and geometry conflict.

Pure functions on flat state dicts (name -> tensor); no registry, no I/O.

* L1 norm of a task vector tau = theta - theta_0 (MMGRid Eq. 2; Figure 2 plots it per
  paradigm x domain x period).
* Sign dissimilarity (Orbit Eq. 1), the one definition of
  :func:`mmgrid.stats.signs.sign_dissimilarity` (entries counted where the reference is
  nonzero; sign(0) = 0 differs from a nonzero sign; 0.0 when nothing is counted), taken in
  both directions and averaged, since neither task vector is the other's origin.
* Cosine similarity of two flattened task vectors.
* Geometry conflict between two updates (GCWM; our documented reading of
  it): every 2-D update Delta (out x in) induces the trace-normalised covariance
  Sigma = Delta^T Delta / ||Delta||_F^2 over its input space. Two such Gaussians
  N(0, Sigma_a), N(0, Sigma_b) have Bures fidelity
  F = tr((Sigma_a^1/2 Sigma_b Sigma_a^1/2)^1/2) in [0, 1] and squared Bures-Wasserstein
  distance 2 - 2F; the conflict is 1 - F (0 = same geometry, 1 = orthogonal
  subspaces). With SVDs Delta = P S Q^T, F = ||diag(s_a) Q_a^T Q_b diag(s_b)||_* /
  (||s_a|| ||s_b||), which a rank-r truncation makes cheap, as GCWM's low-rank
  covariances do. A 1-D tensor is a 1 x n update, for which F = |cos|.

Rows that only one model has (added vocabulary, e.g. semantic-ID tokens) have no
counterpart: tensors whose first dimension differs are compared on their shared leading
rows, as Orbit excludes SID parameters from its distances.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from mmgrid.stats import signs

State = Mapping[str, torch.Tensor]


def _shared(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The parts of ``a`` and ``b`` that correspond (shared leading rows when row counts differ)."""
    if a.shape == b.shape:
        return a, b
    if a.dim() == b.dim() and a.dim() >= 1 and a.shape[1:] == b.shape[1:]:
        n = min(a.shape[0], b.shape[0])
        return a[:n], b[:n]
    raise ValueError(f"tensors of shapes {tuple(a.shape)} and {tuple(b.shape)} do not correspond")


def _names(a: State, b: State, exclude: Iterable[str] = ()) -> list[str]:
    skip = set(exclude)
    return [n for n in a if n in b and n not in skip and a[n].is_floating_point()]


def task_vector(model: State, base: State, exclude: Iterable[str] = ()) -> dict[str, torch.Tensor]:
    """tau = theta - theta_0 for every shared floating tensor (MMGRid Eq. 2), float32."""
    out = {}
    for name in _names(model, base, exclude):
        m, b = _shared(model[name], base[name])
        out[name] = m.float() - b.float()
    return out


def l1_norm(tv: State) -> float:
    """||tau||_1 summed over all tensors (MMGRid Figure 2)."""
    return float(sum(t.float().abs().sum() for t in tv.values()))


def norms(tv: State) -> dict[str, float]:
    """L1, L2, entry count and mean |entry| of a task vector."""
    n = sum(t.numel() for t in tv.values())
    l1 = l1_norm(tv)
    l2 = float(sum(t.float().pow(2).sum() for t in tv.values())) ** 0.5
    return {"l1": l1, "l2": l2, "numel": float(n), "mean_abs": l1 / n if n else float("nan")}


def sign_dissimilarity(a: State, b: State, exclude: Iterable[str] = ()) -> float:
    """Sign dissimilarity of two task vectors (Orbit Eq. 1, :func:`mmgrid.stats.signs.sign_dissimilarity`),
    symmetric: the mean of both directions, each counting the entries its reference moved."""
    pairs = [_shared(a[name], b[name]) for name in _names(a, b, exclude)]
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    return 0.5 * (signs.sign_dissimilarity(xs, ys) + signs.sign_dissimilarity(ys, xs))


def cosine(a: State, b: State, exclude: Iterable[str] = ()) -> float:
    """Cosine similarity of two flattened task vectors (NaN when one is all zero)."""
    dot, na, nb = 0.0, 0.0, 0.0
    for name in _names(a, b, exclude):
        x, y = _shared(a[name], b[name])
        x, y = x.double().reshape(-1), y.double().reshape(-1)
        dot += float(x @ y)
        na += float(x @ x)
        nb += float(y @ y)
    if na == 0 or nb == 0:
        return float("nan")
    return dot / (na**0.5 * nb**0.5)


def _spectrum(delta: torch.Tensor, rank: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised singular values and right singular vectors of a 2-D update, top ``rank``."""
    _, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
    if rank is not None:
        s, vh = s[:rank], vh[:rank]
    norm = s.norm()
    return (s / norm if norm > 0 else s), vh


def bures_fidelity(delta_a: torch.Tensor, delta_b: torch.Tensor, rank: int | None = None) -> float:
    """Fidelity of the trace-normalised input covariances of two updates, in [0, 1].

    Args:
        delta_a: an update (0-D/1-D count as one row; dimensions after the first are flattened).
        delta_b: the other update, same shape.
        rank: keep the top ``rank`` singular directions (None = all).

    Returns:
        F = tr((A^1/2 B A^1/2)^1/2); NaN when one update is zero.
    """
    a = delta_a.reshape(1, -1) if delta_a.dim() <= 1 else delta_a.reshape(delta_a.shape[0], -1)
    b = delta_b.reshape(1, -1) if delta_b.dim() <= 1 else delta_b.reshape(delta_b.shape[0], -1)
    sa, va = _spectrum(a, rank)
    sb, vb = _spectrum(b, rank)
    if sa.sum() == 0 or sb.sum() == 0:
        return float("nan")
    core = sa[:, None] * (va @ vb.T) * sb[None, :]
    return float(torch.linalg.svdvals(core).sum().clamp(max=1.0))


def geometry_conflict(a: State, b: State, rank: int | None = 16, exclude: Iterable[str] = ()) -> dict[str, float]:
    """GCWM-style geometry conflict 1 - F per tensor, and their norm-weighted mean.

    Args:
        a: one update (task vector), name -> tensor.
        b: the other update.
        rank: low-rank truncation of each update's covariance (None = full).
        exclude: tensor names to skip.

    Returns:
        ``{name: conflict, ..., "__mean__": weighted mean}``; the mean weighs each tensor
        by ||a|| * ||b|| so that tensors neither update touched do not count.
    """
    out: dict[str, float] = {}
    num, den = 0.0, 0.0
    for name in _names(a, b, exclude):
        x, y = _shared(a[name], b[name])
        fid = bures_fidelity(x, y, rank)
        if fid != fid:  # NaN: one side did not move
            continue
        out[name] = 1.0 - fid
        w = float(x.double().norm() * y.double().norm())
        num += w * out[name]
        den += w
    out["__mean__"] = num / den if den else float("nan")
    return out
