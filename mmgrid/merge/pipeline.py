"""The one Euclidean merge pipeline: delta -> sparsify -> elect sign -> combine -> scale.

Task arithmetic, TIES, DARE, TIES-DARE, weight averaging and the temporal merge are
configurations of :class:`Pipeline` (see their modules); OrthoMerge merges its
residuals and GCWM its low-conflict layers with it.

TIES's top-X% is taken over the whole model (``scope="model"``, as the TIES and MMGRid
code do) or per tensor (``scope="tensor"``, as mergekit and PEFT do). The whole-model
threshold of each input comes from one streaming pass before the merge pass (two
passes in all): a histogram of the float32 bit patterns of |delta| locates the k-th
largest magnitude to a relative 2^-11 (see :class:`ThresholdFinder`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from mmgrid.merge import masks, ops
from mmgrid.merge.errors import NonFiniteError
from mmgrid.merge.masks import dare_generator  # noqa: F401  (its home before masks.py)

Sparsify = Literal["none", "magnitude", "dare", "dare_magnitude"]
Combine = Literal["sum", "disjoint_mean"]


@dataclass(frozen=True)
class Pipeline:
    """One configuration of the Euclidean pipeline.

    Attributes:
        sparsify: none | magnitude (TIES top-``density``) | dare (drop ``p``) |
            dare_magnitude (DARE, then the TIES trim: MMGRid's subspace setting).
        density: fraction kept by the magnitude trim, in (0, 1].
        p: DARE drop probability, in [0, 1).
        elect_sign: TIES sign election by total mass before combining.
        combine: sum (sum_i w_i delta_i, MMGRid Eq. 3/4/7) | disjoint_mean (TIES).
        weights: one weight per input (w_i; the lambdas of Eq. 3, alpha/1-alpha of Eq. 7).
        scale: a factor on the combined delta.
        scope: model | tensor, where the magnitude top-X% is taken.
        seed: DARE's seed.
        sign_rule: unweighted (sign of sum_i TRIM(tau_i), the TIES paper) | weighted
            (sign of sum_i w_i TRIM(tau_i), mergekit's).
        rescale: DARE's rescale of the kept entries: inverse_keep (1/(1-p)) | l1 (keep the
            L1 norm, mergekit's) | none (see :func:`mmgrid.merge.ops.drop_rescale`).
    """

    sparsify: Sparsify = "none"
    density: float = 1.0
    p: float = 0.0
    elect_sign: bool = False
    combine: Combine = "sum"
    weights: tuple[float, ...] = ()
    scale: float = 1.0
    scope: Literal["model", "tensor"] = "model"
    seed: int = 0
    sign_rule: ops.SignRule = "unweighted"
    rescale: ops.Rescale = "inverse_keep"

    @property
    def uses_dare(self) -> bool:
        return self.sparsify in ("dare", "dare_magnitude") and self.p > 0

    @property
    def whole_tensor(self) -> bool:
        """True if a tensor's result needs all of it (per-tensor top-X%, DARE's L1 rescale)."""
        return (self.uses_magnitude and self.scope == "tensor") or (self.uses_dare and self.rescale == "l1")

    @property
    def uses_magnitude(self) -> bool:
        return self.sparsify in ("magnitude", "dare_magnitude") and self.density < 1.0

    @property
    def needs_global_pass(self) -> bool:
        return self.uses_magnitude and self.scope == "model"


def pre_trim(cfg: Pipeline, name: str, deltas: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The deltas after DARE (if configured), before the magnitude trim; input i's mask is
    :func:`mmgrid.merge.masks.keep_mask` (seed, name, i)."""
    if cfg.uses_dare:
        return [ops.drop_rescale(d, masks.keep_mask(cfg.seed, name, i, cfg.p, d.shape), cfg.p, cfg.rescale)
                for i, d in enumerate(deltas)]
    return list(deltas)


def trimmed(cfg: Pipeline, name: str, deltas: Sequence[torch.Tensor],
            thresholds: Sequence[float] | None = None) -> list[torch.Tensor]:
    """TRIM(tau_i) of each input: sparsified, not yet sign-elected."""
    out = pre_trim(cfg, name, deltas)
    if not cfg.uses_magnitude:
        return out
    if cfg.scope == "model":
        if thresholds is None:
            raise RuntimeError("whole-model TIES needs the thresholds of the first passes")
        return [ops.trim_magnitude(d, t) for d, t in zip(out, thresholds)]
    return [ops.trim_top_density(d, cfg.density) for d in out]


def combine(cfg: Pipeline, name: str, deltas: Sequence[torch.Tensor],
            thresholds: Sequence[float] | None = None) -> torch.Tensor:
    """Run sparsify -> elect sign -> combine -> scale on one tensor's deltas."""
    return fuse(cfg, trimmed(cfg, name, deltas, thresholds))


def elected_sign(cfg: Pipeline, ds: Sequence[torch.Tensor]) -> torch.Tensor:
    """The elected sign of sparsified deltas under ``cfg.sign_rule``."""
    return ops.elect_sign(ds, list(cfg.weights) if cfg.weights else None, cfg.sign_rule)


def fuse(cfg: Pipeline, ds: Sequence[torch.Tensor]) -> torch.Tensor:
    """elect sign -> combine -> scale on already sparsified deltas (the methods with their
    own sparsifier, e.g. breadcrumbs and DELLA, call this after it)."""
    weights = list(cfg.weights) if cfg.weights else [1.0] * len(ds)
    if cfg.combine == "disjoint_mean":
        out = ops.disjoint_mean(ds, elected_sign(cfg, ds), weights)
    else:
        if cfg.elect_sign:
            ds = ops.sign_masked(ds, elected_sign(cfg, ds))
        out = ops.weighted_sum(ds, weights)
    return out.mul_(cfg.scale) if cfg.scale != 1.0 else out


DeltaStream = Callable[[], Iterator[tuple[str, list[torch.Tensor]]]]

# Inputs with more entries than this are histogrammed on a deterministic strided sample
# of about this many entries (a prime stride, so it is coprime with every tensor shape).
SAMPLE_TARGET = 1 << 24


def sample_stride(total: int) -> int:
    """1 up to SAMPLE_TARGET entries, else the smallest prime >= total / SAMPLE_TARGET."""
    s = -(-total // SAMPLE_TARGET)
    if s <= 1:
        return 1
    while any(s % q == 0 for q in range(2, int(s**0.5) + 1)):
        s += 1
    return s


def _f32_copy(t: torch.Tensor) -> torch.Tensor:
    """A float32 copy (``.float()`` returns float32 inputs themselves: never modify those)."""
    return t.to(torch.float32, copy=True)


class ThresholdFinder:
    """Each input's whole-model top-``density`` magnitude threshold, in one streaming pass.

    A histogram of the float32 bit patterns of |delta| (2^19 bins, each a relative 2^-11
    wide) locates the k-th largest magnitude; the threshold is its bin's lower edge, so
    the k largest entries are kept plus the few others of that bin
    (:func:`mmgrid.merge.ops.locate_threshold`). Inputs of more than
    :data:`SAMPLE_TARGET` entries are histogrammed on every ``stride``-th entry (counted
    across tensors), which puts the kept fraction within about 1e-4 of ``density``.
    """

    def __init__(self, cfg: Pipeline, n_inputs: int, total: int) -> None:
        self.cfg, self.stride, self.pos = cfg, sample_stride(total), 0
        self.hists = [torch.zeros(ops.N_MAG_BINS, dtype=torch.int64) for _ in range(n_inputs)]
        self.seen = 0

    def add(self, key: str, raw: list[torch.Tensor], raw_base: torch.Tensor) -> None:
        """Count one tensor (chunk) of every input, as stored (bf16...)."""
        n = raw_base.numel()
        first = (-self.pos) % self.stride
        self.pos += n
        if self.cfg.uses_dare:  # the mask covers the whole chunk: make the deltas, then sample them
            deltas = pre_trim(self.cfg, key, [_f32_copy(t).sub_(raw_base) for t in raw])
            deltas = [d.reshape(-1)[first::self.stride] for d in deltas]
        else:
            b = raw_base.reshape(-1)[first::self.stride]
            deltas = [_f32_copy(t.reshape(-1)[first::self.stride]).sub_(b) for t in raw]
        self.seen += deltas[0].numel()
        for i, (h, d) in enumerate(zip(self.hists, deltas)):
            part = ops.magnitude_histogram(d)
            if part.numel() > ops.NONFINITE_BIN:  # Inf/NaN bit patterns sort above all finite ones
                raise NonFiniteError(f"tensor {key!r}: input {i} or the base holds NaN or Inf; fix that checkpoint")
            h[: part.numel()] += part

    def thresholds(self) -> list[float]:
        k = ops.keep_count(self.cfg.density, self.seen)
        return [ops.locate_threshold(h, k) for h in self.hists]
