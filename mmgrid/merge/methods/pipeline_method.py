"""Shared body of the Euclidean methods: each is a :class:`Pipeline` preset."""

from __future__ import annotations

import torch

from mmgrid.merge import pipeline as pl
from mmgrid.merge.fastpass.kernels import Kernel
from mmgrid.merge.methods.base import Method, TensorView, ViewStream


class PipelineMethod(Method):
    """theta* = theta_0 + PIPELINE(theta_i - theta_0): subclasses give the preset."""

    def __init__(self, params) -> None:
        super().__init__(params)
        self._thresholds: list[float] | None = None
        self._n = 0

    def pipeline(self, n: int) -> pl.Pipeline:
        raise NotImplementedError

    @property
    def elementwise(self) -> bool:
        # a per-tensor top-X% or DARE's L1 rescale needs the whole tensor; the rest is entrywise
        return not self.pipeline(self._n or 1).whole_tensor

    @property
    def verify_inputs(self) -> bool:
        return self._thresholds is None  # the histogram pass saw every delta

    def linear(self, n: int) -> tuple[float, list[float]] | None:
        cfg = self.pipeline(n)
        if cfg.sparsify != "none" or cfg.elect_sign or cfg.combine != "sum":
            return None
        cs = [cfg.scale * w for w in (cfg.weights or (1.0,) * n)]
        return 1.0 - sum(cs), cs  # theta_0 + sum_i c_i (theta_i - theta_0)

    def fast_kernel(self, n: int):
        """The fast pass covers the pipeline without DARE and without a per-tensor top-X%."""
        lin = super().fast_kernel(n)
        if lin is not None:
            return lin
        cfg = self.pipeline(n)
        if cfg.sparsify not in ("none", "magnitude") or (cfg.uses_magnitude and cfg.scope != "model"):
            return None
        return Kernel(thresholds=self._thresholds if cfg.uses_magnitude else None, weights=cfg.weights,
                      combine=cfg.combine, elect_sign=cfg.elect_sign, sign_rule=cfg.sign_rule, scale=cfg.scale)

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self._n = n
        self.pipeline(n)  # raises on lambdas/alpha that do not fit n

    def prepare(self, stream: ViewStream) -> None:
        cfg = self.pipeline(self._n)
        if not cfg.needs_global_pass:
            return
        finder = pl.ThresholdFinder(cfg, self._n, stream.total)
        for v in stream():
            finder.add(v.key, v.raw, v.raw_base)
        self._thresholds = finder.thresholds()
        self.report["ties_thresholds"] = self._thresholds

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        cfg = self.pipeline(len(view.models))
        merged = pl.combine(cfg, view.key, view.deltas(), self._thresholds)
        return merged.add_(view.raw_base)
