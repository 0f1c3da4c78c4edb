"""RAM, Reinforced Agent Merging (arXiv 2601.13572; mergekit's ``ram``), per entry:
the task-vector entries that count (|tau_ie| > epsilon) are averaged over the inputs
that have one, the others ignored:

    theta*_e = theta_0e + sum_i tau_ie [|tau_ie| > eps] / max(1, #{i: |tau_ie| > eps}),

so an entry only one input changed keeps that input's full change (not diluted by 1/n
as in averaging), and entries several inputs changed get their mean. Takes no weights;
a base is required. (mergekit's ``ramplus_tl`` variant, with its rho / lambda rescaling
of the unique entries, is not provided.)

Bound, per tensor: each entry is a mean of some inputs' entries (or 0), |out_e| <=
max_i |tau_ie|, so ||theta* - theta_0|| <= sqrt(n) max_i ||tau_i|| (c = sqrt(n) on a
mass of 1; sum_e max_i tau_ie^2 <= sum_i ||tau_i||^2). Entrywise: a :class:`Kernel` of its own
function, merged in chunks of the files by the fast pass (row chunks on the reference path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel, Work


@dataclass
class RamParams:
    """Parameters of ``ram``.

    Attributes:
        epsilon: |tau_ie| above it counts as a change (default 1e-5, mergekit's); >= 0.
    """

    epsilon: float = 1e-5

    def __post_init__(self) -> None:
        if not self.epsilon >= 0.0:
            raise MergeParamError(f"parameter epsilon={self.epsilon} must be >= 0 (the size of a change that counts)")


@register
class Ram(Method):
    name = "ram"
    pretty = "RAM (Reinforced Agent Merging)"
    paper = "arXiv 2601.13572 (Reinforced Agent Merging); mergekit ram"
    Params = RamParams
    elementwise = True

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return n ** 0.5

    def kernel(self, n: int) -> Kernel:
        return Kernel(fn=self.entries)

    def entries(self, name: str, parts: Sequence[torch.Tensor], work: Work | None = None) -> torch.Tensor:
        """The merged entries of one tensor or chunk (``parts``: theta_0, then the inputs, as
        stored), in ``work``'s buffers: both routes call it (the fast pass on its file chunks),
        so they agree bit for bit.

        Float passes only (boolean tensors cost 3-15x a float pass on CPU): the kept change
        hardshrink(tau_i, eps) is tau_i where |tau_i| > eps and +0 elsewhere (the bits of
        masking it), and its indicator |sign(.)| is 1 exactly there (a kept change is nonzero).
        """
        w = work if work is not None else Work.fresh(parts[0].shape, len(parts))
        b = w.base32(parts[0])
        num, cnt, ind = w.acc, w.den, w.tmp
        for i, t in enumerate(parts[1:]):
            d = torch.sub(t, b, out=w.deltas[i])
            torch.hardshrink(d, self.params.epsilon, out=d)
            torch.sign(d, out=ind).abs_()
            if i == 0:
                num.copy_(d)
                cnt.copy_(ind)
            else:
                num.add_(d)
                cnt.add_(ind)
        return num.div_(cnt.clamp_(min=1.0)).add_(b)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        return self.entries(view.name, [view.required_raw_base, *view.raw])
