"""Shared body of the Euclidean methods: each is a :class:`Pipeline` preset."""

from __future__ import annotations

import torch

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods.base import Method, TensorView, ViewStream


class PipelineMethod(Method):
    """theta* = theta_0 + PIPELINE(theta_i - theta_0): subclasses give the preset."""

    def __init__(self, params) -> None:
        super().__init__(params)
        self._thresholds: list[float] | None = None
        self._tensor_thresholds: dict[str, tuple[float, ...]] = {}
        self._n = 0

    def pipeline(self, n: int) -> pl.Pipeline:
        raise NotImplementedError

    @property
    def elementwise(self) -> bool:
        # DARE's L1 rescale needs the whole tensor; a per-tensor top-X% (without DARE) is entrywise
        # once its first passes found each tensor's thresholds; the rest is entrywise
        cfg = self.pipeline(self._n or 1)
        return not cfg.whole_tensor or self._per_tensor_top(cfg)

    @staticmethod
    def _per_tensor_top(cfg: pl.Pipeline) -> bool:
        """A per-tensor top-X% whose thresholds come from streaming first passes
        (:func:`mmgrid.merge.pipeline.tensor_thresholds`); with DARE the masks need the tensor."""
        return cfg.uses_magnitude and cfg.scope == "tensor" and not cfg.uses_dare

    @property
    def verify_inputs(self) -> bool:
        return self._thresholds is None and not self._tensor_thresholds  # the histogram passes saw every delta

    def kernel(self, n: int) -> pl.Kernel | None:
        """The preset's kernel (linear coefficients where it is linear); None where a
        tensor's result needs all of it (per-tensor top-X%, DARE's L1 rescale)."""
        if not self.elementwise:
            return None
        cfg = self.pipeline(n)
        if self._per_tensor_top(cfg):  # the thresholds of prepare (none yet before it)
            return pl.Kernel(pipeline=cfg, tensor_thresholds=self._tensor_thresholds)
        return pl.Kernel.of(cfg, n, self._thresholds)

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self._n = n
        self.pipeline(n)  # raises on lambdas/alpha that do not fit n

    def prepare(self, stream: ViewStream) -> None:
        cfg = self.pipeline(self._n)
        if self._per_tensor_top(cfg):
            self._tensor_thresholds = pl.tensor_thresholds(cfg, stream, self._n)
            return
        if not cfg.needs_global_pass:
            return
        finder = pl.ThresholdFinder(cfg, self._n, stream.total)
        for v in stream():
            finder.add(v.key, v.raw, v.required_raw_base)
        self._thresholds = finder.thresholds()
        self.report["ties_thresholds"] = self._thresholds

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        return pl.merged(self.pipeline(len(view.raw)), view.key, view.raw, view.required_raw_base, self._thresholds)
