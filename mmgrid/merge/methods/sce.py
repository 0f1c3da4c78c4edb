"""SCE: select, calculate, erase (Wan et al. 2024, FuseChat / "FuseChat-2.0", arXiv
2408.07990, Sec. 3.3; mergekit's ``sce``), per tensor:

1. select: where the task vectors vary most across inputs: var_e = (1/n) sum_i
   (tau_ie - mean_i tau_ie)^2; keep the floor(select_topk * #{e: var_e != 0}) entries of
   largest var_e (in every tau_i; equal variances by position), zero the rest
   (``select_topk = 1``: keep everything);
2. calculate: each input's weight from its selected squared magnitudes,
   w_i = mean_e tau_ie^2 / sum_j mean_e tau_je^2 (1/n each if that sum is below 1e-6,
   mergekit's absolute threshold);
3. erase: gamma = sign(sum_i tau_i) (+1 where 0); entries disagreeing with it (or zero)
   are erased, and theta* = theta_0 + sum_i w_i tau_i [agree] / max(sum_i w_i [agree], 1e-6)
   (mergekit's clamp: where no input agrees the entry is 0).

Takes no weights (they are computed); a base is required.

Bound, per tensor: the w_i are >= 0, so each entry is a weighted mean of agreeing entries
(or smaller, when the clamp acts), |out_e| <= max_i |tau_ie|, and ||theta* - theta_0|| <=
sqrt(n) max_i ||tau_i|| (c = sqrt(n) on a mass of 1; sum_e max_i tau_ie^2 <= sum_i ||tau_i||^2).

Streaming (version 2), with ``select_topk = 1`` (the default, mergekit's): step 2's means are
taken in a first pass over the inputs in chunks, in float64 (fixed blocks summed exactly:
:class:`mmgrid.merge.methods.spherical.BlockedGram`'s diagonal, the same for any chunking);
step 3's sign and weighted mean are then entrywise (a :class:`Kernel` of its own function),
merged in chunks of the files by the fast pass (row chunks on the reference path; never a float32
copy of a whole tensor per input). Version 1 took the means in float32 over whole tensors;
the weights differ in the last bits, so stored sce merges of version 1 are recomputed. With
``select_topk < 1`` the selection ranks a whole tensor's variances, and each tensor is merged
whole as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mmgrid.merge import ops
from mmgrid.merge.methods import spherical as sp
from mmgrid.merge.methods.base import Method, TensorView, ViewStream, check_range
from mmgrid.merge.methods.model_stock import tensor_grams
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel, Work


def sce_select(deltas: list[torch.Tensor], topk: float) -> torch.Tensor | None:
    """Step 1's bool mask over a tensor's entries, or None when ``topk >= 1`` (keep all)."""
    if topk >= 1.0:
        return None
    var = torch.var(torch.stack(deltas), dim=0, unbiased=False).reshape(-1)
    k = int(int(torch.count_nonzero(var)) * topk)
    keep = torch.zeros(var.numel(), dtype=torch.bool)
    if k > 0:
        keep[torch.sort(var.abs(), descending=True, stable=True).indices[:k]] = True
    return keep.reshape(deltas[0].shape)


def sce_weights(deltas: list[torch.Tensor]) -> list[float]:
    """Step 2: w_i proportional to mean_e tau_ie^2, summing to 1 (uniform below 1e-6)."""
    g = sp.BlockedGram(len(deltas))
    g.add(deltas)
    return weights_from([g.result()[i][i] / max(deltas[0].numel(), 1) for i in range(len(deltas))])


def weights_from(ms: list[float]) -> list[float]:
    """w_i = ms_i / sum_j ms_j from the mean squares (1/n each if that sum is below 1e-6)."""
    total = sum(ms)
    return [1.0 / len(ms)] * len(ms) if abs(total) < 1e-6 else [m / total for m in ms]


@dataclass
class SceParams:
    """Parameters of ``sce``.

    Attributes:
        select_topk: fraction of the entries of nonzero variance kept, in [0, 1]
            (default 1.0: no selection, as in mergekit).
    """

    select_topk: float = 1.0

    def __post_init__(self) -> None:
        check_range("select_topk", self.select_topk, 0.0, 1.0, False, False, "a fraction, e.g. select_topk=0.1")


@register
class Sce(Method):
    name = "sce"
    pretty = "SCE (select, calculate, erase)"
    paper = "Wan et al. 2024 (FuseChat, arXiv 2408.07990); mergekit sce"
    Params = SceParams


    version = 2  # streaming float64 means (module docstring)

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return n ** 0.5

    def __init__(self, params) -> None:
        super().__init__(params)
        self._w: dict[str, list[float]] = {}

    @property
    def elementwise(self) -> bool:
        return self.params.select_topk >= 1.0  # after prepare: the weights of each tensor are known

    def prepare(self, stream: ViewStream) -> None:
        if not self.elementwise:
            return
        self._w = {}
        tensor_grams(stream, self._close)

    def _close(self, name: str, gram: list[list[float]], n: int) -> None:
        self._w[name] = weights_from([gram[i][i] / max(n, 1) for i in range(len(gram))])

    def kernel(self, n: int) -> Kernel | None:
        return Kernel(fn=self.entries) if self.elementwise else None

    def entries(self, name: str, parts: Sequence[torch.Tensor], work: Work | None = None) -> torch.Tensor:
        """Step 3 of one tensor or chunk (``parts``: theta_0, then the inputs, as stored) with
        the first pass's weights of tensor ``name``, in ``work``'s buffers: both routes call it
        (``select_topk = 1``)."""
        w = self._w.get(name)
        if w is None:
            raise KeyError(f"no SCE weights for tensor {name!r}: the method's first pass did not see it")
        wk = work if work is not None else Work.fresh(parts[0].shape, len(parts))
        b = wk.base32(parts[0])
        return self._erase([torch.sub(t, b, out=wk.deltas[i]) for i, t in enumerate(parts[1:])], b, w, wk)

    @staticmethod
    def _erase(ds: list[torch.Tensor], base: torch.Tensor, w: list[float], work: Work | None = None) -> torch.Tensor:
        """sum_i w_i tau_i [agree] / max(sum_i w_i [agree], 1e-6) + theta_0, float passes only:
        [agree] = sign(relu(tau_i gamma)) (1 exactly where tau_i is nonzero and agrees with
        gamma, else +-0), and tau_i [agree] is tau_i there and +-0 elsewhere, which adds
        nothing (the bits of a boolean mask at a fraction of its cost)."""
        wk = work if work is not None else Work.fresh(ds[0].shape)
        sign = ops.elect_sign(ds, out=wk.sign)
        num, den, ind = wk.acc.zero_(), wk.den.zero_(), wk.tmp
        for d, wi in zip(ds, w):
            torch.mul(d, sign, out=ind).clamp_min_(0.0)
            torch.sign(ind, out=ind)
            den.add_(ind, alpha=wi)
            num.add_(ind.mul_(d), alpha=wi)
        return num.div_(den.clamp_(min=1e-6)).add_(base)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        ds = view.deltas()
        keep = sce_select(ds, self.params.select_topk)
        if keep is not None:
            ds = [d.masked_fill_(~keep, 0.0) for d in ds]
        w = self._w.get(view.name) if keep is None else None
        if w is None:  # a whole tensor (select_topk < 1), or added vocabulary rows: their own weights
            w = sce_weights(ds)
        return self._erase(ds, view.required_raw_base, w)
