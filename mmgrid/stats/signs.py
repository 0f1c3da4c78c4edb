"""The sign dissimilarity of two models (Orbit Eq. 1), on torch tensors.

A leaf of the foundation layer (torch only) so that Orbit's training-time trigger
(:mod:`mmgrid.train.origin`) and the task-vector diagnostics (:mod:`mmgrid.eval.diagnostics`)
share one definition without importing each other or the merge package.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import torch


def sign_dissimilarity(xs: Iterable[torch.Tensor], refs: Iterable[torch.Tensor],
                       counted: Iterable[torch.Tensor] | None = None) -> float:
    """SD of tensors ``xs`` against reference tensors ``refs`` (Orbit Eq. 1), over all pairs.

    SD = #{i counted: sign(x_i) != sign(ref_i)} / #{i counted}, the one definition in
    mmgrid (Orbit's back-merging trigger, :mod:`mmgrid.train.origin`, and the task-vector
    diagnostics, :mod:`mmgrid.eval.diagnostics`, call it):

    * entries counted: those whose reference is nonzero (``counted`` masks, ref != 0 by
      default). Eq. 1 divides by all parameters; Orbit's Appendix D assumes
      theta_init(i) != 0 for every counted coordinate, and a zero reference has no sign
      that back-merging could restore, so zeros of the reference are left out of both
      counts;
    * differing: sign(x_i) != sign(ref_i) with sign(0) = 0, so an entry the reference
      moved and x left at exactly 0 differs (Orbit: a parameter whose sign is no longer
      the origin's);
    * empty case (nothing counted): 0.0 -- no counted sign differs, so Orbit never
      triggers a merge on it.

    Args:
        xs: tensors (the current parameters; any float dtype).
        refs: same-shaped reference tensors, in the same order (Orbit's theta_init).
        counted: optional boolean masks of the counted entries (precomputed ref != 0).
    """
    flipped, total = 0, 0
    masks = counted if counted is not None else itertools.repeat(None)
    for x, ref, nz in zip(xs, refs, masks):
        if nz is None:
            nz = ref != 0
        flipped += int(((torch.sign(x) != torch.sign(ref)) & nz).sum())
        total += int(nz.sum())
    return flipped / total if total else 0.0
