"""Model Stock (Jang, Yun & Han, "Model Stock: All we need is just a few fine-tuned
models", ECCV 2024, arXiv 2403.19522, Sec. 3; mergekit's ``model_stock``).

N >= 2 fine-tuned models theta_i of one base theta_0, per tensor (or per row with
``filter_wise``: each row along the last dimension, a 1-D tensor as one row):

    cos(Omega) = mean over pairs i < j of <tau_i, tau_j> / max(||tau_i|| ||tau_j||, 1e-6)
    t = N cos(Omega) / (1 + (N - 1) cos(Omega))          (the paper's interpolation ratio)
    theta* = t theta_avg + (1 - t) theta_0,  theta_avg = mean_i theta_i,

i.e. theta* = theta_0 + t mean_i tau_i. The paper has one angle (its fine-tuned models
are equiangular); for N > 2 the mean pairwise cosine is mergekit's reading, kept here.
Our reading where the paper's geometry ends: the paper derives t for an acute angle
(cos > 0); mergekit applies the formula to any cosine, which extrapolates away from the
average for cos < 0 and divides by zero at cos = -1/(N - 1). By default cos is clamped
to [0, 1], so t lies in [0, 1] (orthogonal or opposed task vectors give the base);
``clamp_cos=False`` gives mergekit's arithmetic: the formula for any cosine, and t = 0
(the base) where |1 + (N - 1) cos| < 1e-6.

Identical inputs (tau_i all equal and nonzero): cos = 1, t = 1, theta* = that input.

Bound, per tensor, with the clamp: ||theta* - theta_0|| = t ||mean_i tau_i|| <=
max_i ||tau_i|| (t in [0, 1]); with ``filter_wise`` the same holds row by row and so for
the tensor: c = 1, mass 1. Without the clamp no constant exists (|t| -> inf as
cos -> -1/(N - 1)).

Streaming (computation version 2, per tensor, ``filter_wise=False``): a first pass reads the
inputs in chunks and sums the task vectors' Gram matrix over fixed blocks, exactly
(:class:`mmgrid.merge.methods.spherical.BlockedGram`); the merge pass is then the linear
(1 - t) theta_0 + (t / N) sum_i theta_i with each tensor's own t, on the fast file pass. Version 1
computed t from whole float32 task vectors and added t mean_i tau_i to the base; the bits differ,
so stored model_stock merges of version 1 are recomputed. ``filter_wise`` (one t per row) keeps
the whole-tensor path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from mmgrid.merge.methods import spherical as sp
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel

NORM_FLOOR = 1e-6  # mergekit's floor of ||tau_i|| ||tau_j||
SINGULAR = 1e-6  # |1 + (N - 1) cos| below this: t = 0 (mergekit's rule)


def tensor_grams(stream: ViewStream, done: Callable[[str, list[list[float]], int], None]) -> None:
    """Each tensor's task-vector Gram matrix, from one pass over ``stream`` (consecutive pieces
    of each tensor, in order): ``done(name, gram, entries)`` once per tensor.

    The Gram is :class:`mmgrid.merge.methods.spherical.BlockedGram`'s (fixed blocks, float64
    dots, exact sums), fed the task vectors theta_i - theta_0 in float32 (the values of
    :meth:`TensorView.deltas`). They are subtracted into two sets of reused buffers, and each
    piece's dots are summed on a worker thread while the next piece is read and subtracted:
    the blocks reach each Gram in the same order, so the result has the same bits as feeding it
    ``view.deltas()`` one piece after the other, without a fresh float32 tensor per piece and
    input (page faults) and with the reads, the subtractions and the dots on two cores.

    Raises:
        RuntimeError: a tensor seen twice, not in consecutive pieces.
    """
    slots: list[list[torch.Tensor]] = [[], []]
    pending: list = [None, None]
    closes: list = []
    seen: set[str] = set()
    cur: tuple[str, sp.BlockedGram, list[int]] | None = None

    def close(name: str, g: sp.BlockedGram, n: list[int]) -> None:
        done(name, g.result(), n[0])

    def add(g: sp.BlockedGram, ds: list[torch.Tensor], n: list[int], m: int) -> None:
        g.add(ds)
        n[0] += m

    # one worker: the adds and closes run in submission order (torch releases the GIL inside each op)
    with ThreadPoolExecutor(1, thread_name_prefix="mmgrid-gram", initializer=torch.set_num_threads,
                            initargs=(1,)) as ex:
        slot = 0
        for view in stream():
            m = view.raw[0].numel()
            if pending[slot] is not None:
                pending[slot].result()  # this slot's buffers are free again
            bs = slots[slot]
            if len(bs) != len(view.raw) or bs[0].numel() < m:
                slots[slot] = bs = [torch.empty(m, dtype=torch.float32) for _ in view.raw]
            b = view.required_raw_base.reshape(-1)
            ds = [buf[:m].copy_(t.reshape(-1)).sub_(b) for buf, t in zip(bs, view.raw)]
            if cur is None or cur[0] != view.name:
                if cur is not None:
                    closes.append(ex.submit(close, *cur))
                if view.name in seen:
                    raise RuntimeError(f"the first pass saw tensor {view.name!r} twice, not in consecutive pieces")
                seen.add(view.name)
                cur = (view.name, sp.BlockedGram(len(ds)), [0])
            pending[slot] = ex.submit(add, cur[1], ds, cur[2], m)
            slot ^= 1
        if cur is not None:
            closes.append(ex.submit(close, *cur))
        for f in pending + closes:
            if f is not None:
                f.result()  # re-raises a worker's error


@dataclass
class ModelStockParams:
    """Parameters of ``model_stock``.

    Attributes:
        filter_wise: one ratio t per row (mergekit's ``filter_wise``) instead of per tensor.
        clamp_cos: clamp the mean cosine to [0, 1] (t in [0, 1]; see the module docstring).
    """

    filter_wise: bool = False
    clamp_cos: bool = True


@register
class ModelStock(Method):
    name = "model_stock"
    pretty = "Model Stock"
    paper = "Jang, Yun & Han 2024 (Model Stock, ECCV) Sec. 3; mergekit model_stock"
    Params = ModelStockParams
    min_inputs = 2
    version = 2  # streaming statistics (module docstring)

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return 1.0 if p.clamp_cos else float("inf")

    def __init__(self, params) -> None:
        super().__init__(params)
        self._coefs: dict[str, tuple[float, list[float]]] = {}

    @property
    def elementwise(self) -> bool:
        return not self.params.filter_wise  # per tensor: linear after the first pass

    def ratio(self, gram: list[list[float]]) -> float:
        """t of one tensor from its task vectors' Gram matrix (the module docstring's rules)."""
        n = len(gram)
        cos = 0.0
        for i in range(n):
            for j in range(i + 1, n):
                c = gram[i][j] / max(math.sqrt(gram[i][i]) * math.sqrt(gram[j][j]), NORM_FLOOR)
                cos += min(1.0, max(-1.0, c))
        cos /= n * (n - 1) / 2
        if self.params.clamp_cos:
            cos = min(1.0, max(0.0, cos))
        denom = 1.0 + (n - 1) * cos
        return 0.0 if abs(denom) < SINGULAR else n * cos / denom

    def prepare(self, stream: ViewStream) -> None:
        if self.params.filter_wise:
            return
        self._coefs.clear()

        def done(name: str, gram: list[list[float]], _: int) -> None:
            t, n = self.ratio(gram), len(gram)
            self._coefs[name] = (1.0 - t, [t / n] * n)

        tensor_grams(stream, done)

    def kernel(self, n: int):
        return None if self.params.filter_wise else Kernel(coefs=self._coefs)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        if not self.params.filter_wise:  # added vocabulary rows (a view of their own): their own t
            g = sp.BlockedGram(len(view.raw))
            g.add(view.deltas())
            t = self.ratio(g.result())
            out = view.required_base.clone().mul_(1.0 - t)
            for x in view.models:
                out.add_(x, alpha=t / len(view.models))
            return out
        assert view.base is not None
        taus = view.deltas()
        shape = taus[0].shape
        rows = [t.reshape(-1, shape[-1]) if self.params.filter_wise and t.ndim >= 1 else t.reshape(1, -1) for t in taus]
        norms = [sp.row_dots(r, r).sqrt_() for r in rows]
        n = len(rows)
        cos = torch.zeros(rows[0].shape[0], dtype=torch.float64)
        for i in range(n):
            for j in range(i + 1, n):
                dot = sp.row_dots(rows[i], rows[j])
                cos += (dot / (norms[i] * norms[j]).clamp(min=NORM_FLOOR)).clamp(-1.0, 1.0)
        cos /= n * (n - 1) / 2
        if self.params.clamp_cos:
            cos = cos.clamp(0.0, 1.0)
        denom = 1.0 + (n - 1) * cos
        singular = denom.abs() < SINGULAR  # no finite ratio: keep the base there (mergekit's rule)
        t_rows = torch.where(singular, 0.0, n * cos / torch.where(singular, 1.0, denom)).float().unsqueeze(-1)
        mean = rows[0].clone()
        for r in rows[1:]:
            mean.add_(r)
        mean.div_(n)
        return mean.mul_(t_rows).reshape(shape).add_(view.required_base)
