"""RAM+ tensor-local (mergekit's ``ramplus_tl``; Reinforced Agent Merging, arXiv
2601.13572): RAM (:mod:`mmgrid.merge.methods.ram`) with each input's unique changes
amplified by how much of its change the other inputs share.

Per tensor, with tau_i = theta_i - theta_0, m_ie = [|tau_ie| > epsilon], c_e = sum_i m_ie:

    shared_i = #{e : m_ie, c_e > 1},   unique_i = #{e : m_ie, c_e = 1},
    rho_i = shared_i / max(unique_i, epsilon),
    lambda_i = 1 + r * clamp(rho_i, 0, rho_max),
    theta*_e = theta_0e + sum_i m_ie tau_ie ( [c_e = 1] lambda_i + [c_e > 1] / c_e ),

(rho_i = inf where unique_i = epsilon = 0 < shared_i, and 0 for an input that changes nothing;
mergekit gives NaN there at epsilon = 0), so an entry changed by one input keeps that change, scaled by lambda_i >= 1, and an entry
changed by several gets their mean (RAM). mergekit's parameter ``alpha`` is ``rho_max``
here (mmgrid's ``alpha`` is MMGRid Eq. 7's input weighting).

Streaming: rho_i counts over the whole tensor, so a first pass over the inputs in chunks counts
shared_i and unique_i per tensor (integers: the same for any chunking); the merge pass is then
entrywise (a :class:`Kernel` of its own function), merged in chunks of the files by the fast pass
(row chunks on the reference path; never a float32 copy of a whole tensor; the same bits as
merging whole tensors).

Bound, per tensor: |out_e| <= (1 + r rho_max) max_i |tau_ie|, so ||theta* - theta_0|| <=
(1 + r rho_max) sqrt(n) max_i ||tau_i|| (c = (1 + r rho_max) sqrt(n), mass 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel, Work


EXACT_BLOCK = 1 << 24  # float32 holds every integer up to 2^24 exactly


def _ones(a: torch.Tensor, b: torch.Tensor) -> int:
    """#{e: a_e = b_e = 1} of two 0/1 float32 vectors: float32 dot products over blocks of at
    most 2^24 entries, whose partial sums are integers below 2^24 and therefore exact in any
    order of summation."""
    return sum(int(torch.dot(a[i:i + EXACT_BLOCK], b[i:i + EXACT_BLOCK])) for i in range(0, a.numel(), EXACT_BLOCK))


@dataclass
class RamPlusParams:
    """Parameters of ``ramplus_tl`` (mergekit's names and defaults, ``alpha`` -> ``rho_max``).

    Attributes:
        r: the amplification rate of unique changes, >= 0 (0.1).
        rho_max: the cap on rho_i (mergekit's alpha), >= 0 (0.2).
        epsilon: |tau_ie| above it counts as a change, >= 0 (1e-5).
    """

    r: float = 0.1
    rho_max: float = 0.2
    epsilon: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("r", "rho_max", "epsilon"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0.0):
                raise MergeParamError(f"parameter {name}={v} must be a finite number >= 0 (ramplus_tl)")


@register
class RamPlusTl(Method):
    name = "ramplus_tl"
    pretty = "RAM+ (tensor-local)"
    paper = "arXiv 2601.13572 (Reinforced Agent Merging); mergekit ramplus_tl"
    Params = RamPlusParams


    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return (1.0 + p.r * p.rho_max) * n ** 0.5

    def __init__(self, params) -> None:
        super().__init__(params)
        self._lams: dict[str, list[float]] = {}

    @property
    def elementwise(self) -> bool:
        return True  # after prepare: lambda_i of each tensor is known

    def _lambdas(self, counts: list[tuple[int, int]]) -> list[float]:
        p = self.params
        out = []
        for shared_i, unique_i in counts:
            den = max(float(unique_i), p.epsilon)
            rho = shared_i / den if den > 0.0 else (math.inf if shared_i else 0.0)
            out.append(1.0 + p.r * min(max(rho, 0.0), p.rho_max))
        return out

    def prepare(self, stream: ViewStream) -> None:
        acc: dict[str, list[list[int]]] = {}
        work: Work | None = None  # float32 buffers reused across the chunks (no page faults per chunk)
        for view in stream():  # chunks of each tensor: integer counts add exactly
            n = view.raw[0].numel()
            if work is None or work.acc.numel() < n:
                work = Work.fresh((n,), len(view.raw))
                work.base = torch.empty(n, dtype=torch.float32)
            got = self._chunk_counts(view, work.take(n))
            tot = acc.setdefault(view.name, [[0, 0] for _ in got])
            for t, (sh, un) in zip(tot, got):
                t[0] += sh
                t[1] += un
        self._lams = {name: self._lambdas([(sh, un) for sh, un in c]) for name, c in acc.items()}

    def _chunk_counts(self, view: TensorView, w: Work) -> list[tuple[int, int]]:
        """(shared_i, unique_i) of each input over this view's entries (shared: a change where
        another input changes too; unique: a change no other input makes), from float passes: the change indicators m_ie = |sign(hardshrink(tau_ie,
        eps))| (1 or 0), c_e = sum_i m_ie, [c_e = 1] = 1 - |sign(c_e - 1)|, [c_e > 1] =
        sign(relu(c_e - 1)), and each count a dot product of 0/1 vectors (:func:`_ones`)."""
        b = w.base32(view.required_raw_base.reshape(-1))
        inds = []
        for i, t in enumerate(view.raw):
            d = torch.sub(t.reshape(-1), b, out=w.deltas[i])
            inds.append(torch.sign(torch.hardshrink(d, self.params.epsilon, out=d), out=d).abs_())
        count, unique, overlap = w.den, w.acc, w.sign
        for i, m in enumerate(inds):
            count.copy_(m) if i == 0 else count.add_(m)
        torch.sub(count, 1.0, out=overlap).clamp_min_(0.0).sign_()
        torch.sub(count, 1.0, out=unique).sign_().abs_().neg_().add_(1.0)
        return [(_ones(m, overlap), _ones(m, unique)) for m in inds]

    def kernel(self, n: int) -> Kernel:
        return Kernel(fn=self.entries)

    def entries(self, name: str, parts: Sequence[torch.Tensor], work: Work | None = None,
                lams: Sequence[float] | None = None) -> torch.Tensor:
        """The merged entries of one tensor or chunk (``parts``: theta_0, then the inputs, as
        stored) with the first pass's lambda_i of tensor ``name`` (or ``lams``), in ``work``'s
        buffers: both routes call it.

        Float passes only (boolean tensors cost 3-15x a float pass on CPU), the bits of
        boolean masks: m_ie tau_ie = hardshrink(tau_ie, eps) (+0 where not a change),
        m_ie = |sign(.)|, c_e their sum (small integers, exact), [c_e = 1] = 1 - |sign(c_e - 1)|,
        [c_e > 1] / c_e = sign(relu(c_e - 1)) / max(c_e, 1).
        """
        lams = self._lams.get(name) if lams is None else lams
        if lams is None:
            raise KeyError(f"no lambda_i for tensor {name!r}: the method's first pass did not see it")
        w = work if work is not None else Work.fresh(parts[0].shape, len(parts))
        b = w.base32(parts[0])
        ds = []
        for i, t in enumerate(parts[1:]):
            d = torch.sub(t, b, out=w.deltas[i])
            ds.append(torch.hardshrink(d, self.params.epsilon, out=d))
        count, share, unique = w.den, w.sign, w.tmp
        for i, d in enumerate(ds):
            torch.sign(d, out=unique).abs_()
            count.copy_(unique) if i == 0 else count.add_(unique)
        torch.clamp(count, min=1.0, out=share)
        torch.reciprocal(share, out=share)
        share.mul_(torch.sub(count, 1.0, out=unique).clamp_min_(0.0).sign_())
        torch.sub(count, 1.0, out=unique).sign_().abs_().neg_().add_(1.0)
        out = w.acc.zero_()
        coef = count  # the counts are no longer needed
        for d, lam in zip(ds, lams):
            torch.mul(unique, lam, out=coef).add_(share)
            out.add_(d.mul_(coef))
        return out.add_(b)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        """The reference path's views that no kernel takes: added vocabulary rows (a view of their
        own, not seen by the first pass) get lambda_i from their own counts."""
        lams = self._lams.get(view.name)
        if lams is None:
            lams = self._lambdas(self._chunk_counts(view, Work.fresh((view.raw[0].numel(),), len(view.raw))))
        return self.entries(view.name, [view.required_raw_base, *view.raw], lams=lams)
