"""Task-vector diagnostics on hand-made tensors."""

from __future__ import annotations

import math

import torch

from mmgrid.eval.diagnostics import (
    bures_fidelity,
    cosine,
    geometry_conflict,
    l1_norm,
    norms,
    sign_dissimilarity,
    task_vector,
)


def test_task_vector_and_l1_by_hand():
    base = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": torch.tensor([0.0, 0.0])}
    model = {"w": torch.tensor([[2.0, 0.0], [3.0, 5.0]]), "b": torch.tensor([-1.0, 0.5]), "step": torch.tensor(3)}
    tv = task_vector(model, base)
    assert set(tv) == {"w", "b"}
    assert l1_norm(tv) == 1 + 2 + 0 + 1 + 1 + 0.5
    n = norms(tv)
    assert math.isclose(n["l2"], math.sqrt(1 + 4 + 1 + 1 + 0.25)) and n["numel"] == 6


def test_added_rows_are_left_out():
    base = {"emb": torch.zeros(3, 2)}
    model = {"emb": torch.cat([torch.ones(3, 2), 100 * torch.ones(2, 2)])}  # 2 added token rows
    assert l1_norm(task_vector(model, base)) == 6.0


def test_sign_dissimilarity_is_orbit_eq1_both_ways():
    a = {"x": torch.tensor([1.0, -1.0, 2.0, 0.0])}
    b = {"x": torch.tensor([-1.0, -3.0, 0.0, 5.0])}
    # against b (b != 0 at 0, 1, 3): entries 0 (opposite) and 3 (a left at 0) differ: 2/3;
    # against a (a != 0 at 0, 1, 2): entries 0 and 2 differ: 2/3; the mean of both
    assert sign_dissimilarity(a, b) == sign_dissimilarity(b, a) == 2 / 3
    assert sign_dissimilarity({"x": torch.zeros(3)}, {"x": torch.zeros(3)}) == 0.0  # nothing counted


def test_cosine():
    a = {"x": torch.tensor([1.0, 0.0]), "y": torch.tensor([0.0])}
    b = {"x": torch.tensor([1.0, 1.0]), "y": torch.tensor([0.0])}
    assert math.isclose(cosine(a, b), 1 / math.sqrt(2))
    assert math.isnan(cosine(a, {"x": torch.zeros(2), "y": torch.zeros(1)}))


def test_fidelity_same_scaled_and_orthogonal():
    d = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    assert math.isclose(bures_fidelity(d, 3 * d), 1.0, abs_tol=1e-9)
    a = torch.zeros(3, 4)
    a[:, 0] = 1.0
    b = torch.zeros(3, 4)
    b[:, 1] = 1.0
    assert math.isclose(bures_fidelity(a, b), 0.0, abs_tol=1e-12)


def test_fidelity_matches_matrix_formula():
    g = torch.Generator().manual_seed(1)
    da, db = torch.randn(5, 3, generator=g, dtype=torch.float64), torch.randn(7, 3, generator=g, dtype=torch.float64)
    A, B = da.T @ da, db.T @ db
    A, B = A / A.trace(), B / B.trace()

    def sqrtm(m):
        w, v = torch.linalg.eigh(m)
        return v @ torch.diag(w.clamp(min=0).sqrt()) @ v.T

    ra = sqrtm(A)
    expected = float(torch.linalg.eigvalsh(ra @ B @ ra).clamp(min=0).sqrt().sum())
    # different row counts -> compared on shared rows; use same rows for this check
    assert math.isclose(bures_fidelity(da, db[:5]), _fid(da, db[:5], sqrtm), rel_tol=1e-9)
    assert 0 < expected <= 1


def _fid(da, db, sqrtm):
    A, B = da.T @ da, db.T @ db
    A, B = A / A.trace(), B / B.trace()
    ra = sqrtm(A)
    return float(torch.linalg.eigvalsh(ra @ B @ ra).clamp(min=0).sqrt().sum())


def test_one_d_fidelity_is_abs_cosine():
    a, b = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([-2.0, 1.0, 2.0])
    cos = abs(float(a @ b)) / (a.norm() * b.norm())
    assert math.isclose(bures_fidelity(a, b), float(cos), abs_tol=1e-9)


def test_geometry_conflict_mean_and_untouched():
    a = {"w": torch.eye(3), "z": torch.zeros(2, 2)}
    b = {"w": torch.eye(3), "z": torch.ones(2, 2)}
    gc = geometry_conflict(a, b)
    assert math.isclose(gc["w"], 0.0, abs_tol=1e-9) and "z" not in gc
    assert math.isclose(gc["__mean__"], 0.0, abs_tol=1e-9)
