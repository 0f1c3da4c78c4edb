"""Shared body of the methods that sparsify each task vector with their own rule, then
run the Euclidean pipeline's elect sign -> combine -> scale (:func:`mmgrid.merge.pipeline.fuse`):
breadcrumbs, breadcrumbs_ties, della, della_linear (mergekit's "generalized task
arithmetic" family).

theta* = theta_0 + scale * COMBINE_i(w_i, S_i(tau_i)), S_i the method's sparsifier
(:meth:`SparsifiedMethod.sparsify`), COMBINE a weighted sum (optionally sign-masked) or
TIES's disjoint mean. The sparsifiers rank entries within a tensor (or a row), so a
tensor is merged whole (not in row chunks).

Memory: a plain weighted sum (no sign election: breadcrumbs, della_linear) takes one input at
a time (its float32 task vector, sparsified, added to the sum, freed): one task vector
resident instead of all of them, the same bits as :func:`mmgrid.merge.pipeline.fuse`'s
weighted sum. The sign election needs every S_i(tau_i) at once (breadcrumbs_ties, della).
"""

from __future__ import annotations

from typing import Literal

import torch

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods.base import Method, TensorView

Combine = Literal["disjoint_mean", "sum"]


class SparsifiedMethod(Method):
    """Subclasses give :meth:`sparsify` and the pipeline's fuse settings (:meth:`fuse_config`)."""

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self.fuse_config(n)  # raises on weights that do not fit n

    def sparsify(self, key: str, index: int, delta: torch.Tensor) -> torch.Tensor:
        """S_i(tau_i) of input ``index`` for tensor ``key`` (float32, may work in place)."""
        raise NotImplementedError

    def fuse_config(self, n: int) -> pl.Pipeline:
        raise NotImplementedError

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        cfg = self.fuse_config(len(view.raw))
        if cfg.combine == "sum" and not cfg.elect_sign:
            return self._streamed_sum(view, cfg)
        ds = [self.sparsify(view.key, i, d) for i, d in enumerate(view.deltas())]
        return pl.fuse(self.fuse_config(len(ds)), ds).add_(view.required_raw_base)

    def _streamed_sum(self, view: TensorView, cfg: pl.Pipeline) -> torch.Tensor:
        """theta_0 + scale sum_i w_i S_i(tau_i), one input at a time (the operations of
        ``ops.weighted_sum`` then ``fuse``'s scale, in that order: the same bits)."""
        weights = list(cfg.weights) if cfg.weights else [1.0] * len(view.raw)
        b = view.required_raw_base
        out: torch.Tensor | None = None
        for i, (raw, w) in enumerate(zip(view.raw, weights)):
            d = self.sparsify(view.key, i, raw.to(torch.float32, copy=True).sub_(b))  # TensorView.deltas()'s tau_i
            if out is None:
                out = d.float() * float(w)
            else:
                out.add_(d.float(), alpha=float(w))
            del d
        assert out is not None  # a merge has at least one input
        if cfg.scale != 1.0:
            out.mul_(cfg.scale)
        return out.add_(b)
