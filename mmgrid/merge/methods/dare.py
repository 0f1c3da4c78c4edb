"""DARE (Yu et al., 2024; MMGRid Sec. 2): drop each task-vector entry with probability
p, rescale the survivors by 1/(1-p), then task arithmetic.

theta* = theta_0 + scale * sum_i w_i DARE_p(tau_i). The mask of input i and tensor
t comes from a generator seeded by (seed, t, i), so a seed reproduces the merge and
E[DARE_p(tau)] = tau.

``rescale`` says what happens to the kept entries: ``inverse_keep`` (default, the
paper's Eq. 2) divides them by 1 - p; ``l1`` is mergekit's ``rescale: true``: the masked
task vector m * tau is multiplied by ||tau||_1 / ||m * tau||_1 (its L1 norm kept, per
tensor; unscaled where a norm is below 1e-7); ``none`` keeps them as they are (mergekit's
``rescale: false``). The masks are :func:`mmgrid.merge.masks.keep_mask`'s (injectable).

Bound, per tensor and per draw: ||theta* - theta_0|| <= c sum_i |w_i| max_i ||tau_i||
with c = |scale| / (1 - p): each kept entry is tau/(1-p), a dropped one 0, so
||DARE_p(tau)|| <= ||tau|| / (1 - p) (all kept); on average E||DARE_p(tau)||^2 =
||tau||^2 / (1 - p), i.e. 1/sqrt(1 - p) in root mean square. ``none``: c = |scale| (entries only zeroed);
``l1``: ||l1(m tau)||_2 <= ||l1(m tau)||_1 = ||tau||_1 <= sqrt(numel) ||tau||_2, a constant
that grows with the tensor (a single kept entry carries the whole L1 mass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from mmgrid.merge import masks, ops
from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.base import TensorView, ViewStream
from mmgrid.merge.methods.base import check_range
from mmgrid.merge.methods.pipeline_method import PipelineMethod
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.ties import OMIT_DEFAULT
from mmgrid.merge.methods.weights import Weights


@dataclass
class DareParams(Weights):
    """Parameters of ``dare``: :class:`Weights` (default 1.0 each), and

    Attributes:
        p: drop probability, in [0, 1) (MMGRid: 0.1).
        scale: a factor on the summed task vector.
        seed: seed of the drop masks.
        rescale: inverse_keep (1/(1-p), default) | l1 (mergekit) | none.
    """

    p: float = 0.1
    scale: float = 1.0
    seed: int = 0
    rescale: ops.Rescale = field(default="inverse_keep", metadata=OMIT_DEFAULT)

    def __post_init__(self) -> None:
        check_range("p", self.p, 0.0, 1.0, False, True, "DARE drops a fraction of entries, e.g. p=0.1")


class StreamedL1(PipelineMethod):
    """DARE with mergekit's L1 rescale (``rescale="l1"``, no magnitude trim after it) in two
    streaming passes instead of whole float32 tensors (computation version 2).

    The first pass draws each tensor's keep mask for each input piece by piece, in order, from
    the generator of :func:`mmgrid.merge.masks.seeded_mask` (the same draws as on the whole
    tensor), keeps it as bits and sums ||tau_i||_1 and ||m_i * tau_i||_1 in fixed blocks
    (:class:`mmgrid.merge.masks.PackedMask`); the inputs are drawn on two threads. The merge
    pass is then entrywise (:meth:`entries`): tau_i masked, times its tensor's factor
    ||tau_i||_1 / ||m_i tau_i||_1, then the pipeline's sign election, combine and scale
    (:func:`mmgrid.merge.pipeline.fuse`), in chunks of the files on the fast pass. The masks
    are those of version 1; the factors are exact float64 sums where version 1 summed whole
    float32 tensors, so the results differ in the last bits. Injected masks
    (:func:`mmgrid.merge.masks.injected_masks`) take the whole-tensor path.
    """

    def _streamed(self, cfg: pl.Pipeline) -> bool:
        return cfg.uses_dare and cfg.rescale == "l1" and not cfg.uses_magnitude and not masks.injecting()

    @property
    def elementwise(self) -> bool:
        return self._streamed(self.pipeline(self._n or 1)) or super().elementwise

    def prepare(self, stream: ViewStream) -> None:
        cfg = self.pipeline(self._n)
        if not self._streamed(cfg):
            return super().prepare(stream)
        self._masks = draw_masks(stream, self._n, lambda name: [masks.PackedMask(cfg.seed, name, i, cfg.p)
                                                               for i in range(self._n)])
        self._factors = {name: [pm.factor() for pm in ms] for name, ms in self._masks.items()}

    def kernel(self, n: int) -> pl.Kernel | None:
        if not self._streamed(self.pipeline(n)):
            return super().kernel(n)
        return pl.Kernel(fn=self.entries)

    def entries(self, name: str, parts: Sequence[torch.Tensor], work: pl.Work | None = None,
                offset: int = 0) -> torch.Tensor:
        """Entries [offset, offset + numel) of tensor ``name`` (``parts``: theta_0, then the
        inputs, as stored): :func:`masked_fuse` with the first pass's masks and factors."""
        return masked_fuse(self.pipeline(len(parts) - 1), self._masks, self._factors, name, parts, work, offset)

    entries.positional = True  # type: ignore[attr-defined]  # takes the chunk's offset (mmgrid.merge.fastpass.kernels)


def draw_masks(stream: ViewStream, n: int, new: Callable[[str], list[masks.PackedMask]],
               feed: Callable[[str, int, masks.PackedMask, torch.Tensor, torch.Tensor], None] | None = None,
               end: Callable[[str, int, masks.PackedMask], None] | None = None) -> dict[str, list[masks.PackedMask]]:
    """The first pass of the streamed masks: for each piece of each tensor (consecutive, in
    order) and each of the ``n`` inputs (on two threads), tau_i = theta_i - theta_0 in float32
    (the values of :meth:`TensorView.deltas`, in reused buffers) goes to ``feed(name, i, mask,
    tau, scratch)`` (default: ``mask.add(tau, scratch)``); ``end(name, i, mask)`` after a
    tensor's last piece, then every mask is closed. ``new(name)``: the tensor's masks.

    Raises:
        RuntimeError: a tensor seen twice, not in consecutive pieces.
    """
    out: dict[str, list[masks.PackedMask]] = {}
    bufs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def one(view: TensorView, i: int) -> None:
        m = view.raw[i].numel()
        b = bufs.get(i)
        if b is None or b[0].numel() < m:
            b = bufs[i] = (torch.empty(m, dtype=torch.float32), torch.empty(m, dtype=torch.float32))
        d = b[0][:m].copy_(view.raw[i].reshape(-1)).sub_(view.required_raw_base.reshape(-1))
        if feed is None:
            out[view.name][i].add(d, b[1])
        else:
            feed(view.name, i, out[view.name][i], d, b[1])

    def finish(name: str) -> None:
        for i, pm in enumerate(out[name]):
            if end is not None:
                end(name, i, pm)
            pm.close()

    cur = None
    with ThreadPoolExecutor(max(1, min(2, n)), thread_name_prefix="mmgrid-masks",
                            initializer=torch.set_num_threads, initargs=(1,)) as ex:
        for view in stream():
            if view.name != cur:
                if cur is not None:
                    finish(cur)
                if view.name in out:
                    raise RuntimeError(f"the first pass saw tensor {view.name!r} twice, not in consecutive pieces")
                cur = view.name
                out[cur] = new(cur)
            list(ex.map(lambda i, v=view: one(v, i), range(n)))
        if cur is not None:
            finish(cur)
    return out


def masked_fuse(cfg: pl.Pipeline, ms: dict[str, list[masks.PackedMask]], fs: dict[str, list[float | None]], name: str,
                parts: Sequence[torch.Tensor], work: pl.Work | None, offset: int) -> torch.Tensor:
    """theta_0 + FUSE(f_i m_i tau_i) on entries [offset, offset + numel) of tensor ``name``: each
    input's task vector, its first-pass mask's entries (``ms``), times its factor (``fs``; None:
    unscaled), then the pipeline's sign election, combine and scale (:func:`mmgrid.merge.pipeline.fuse`),
    with the operations of :func:`mmgrid.merge.pipeline.merged` (in ``work``'s buffers)."""
    got, factors = ms.get(name), fs.get(name)
    if got is None or factors is None:
        raise KeyError(f"no masks for tensor {name!r}: the method's first pass did not see it")
    w = work if work is not None else pl.Work.fresh(parts[0].shape, len(parts))
    b = parts[0] if w.base is None else w.base.copy_(parts[0])
    ds = []
    for x, d, pm, f in zip(parts[1:], w.deltas, got, factors):
        t = ops.task_vector(x, b, out=d)
        t.masked_fill_(~pm.keep(offset, t.numel()).reshape(t.shape), 0.0)
        ds.append(t.mul_(f) if f is not None else t)
    return pl.fuse(cfg, ds, w).add_(b)


@register
class Dare(StreamedL1):
    name = "dare"
    pretty = "DARE (drop and rescale)"
    paper = "Yu et al. 2024 (DARE); MMGRid Sec. 2"
    Params = DareParams
    symmetric = False  # input i's mask depends on i
    version = 2  # mergekit's L1 rescale streamed: exact float64 norms (StreamedL1)

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.mass(p, n) * bd.rescale_factor(p.rescale, 1.0 - p.p, numel)

    def pipeline(self, n: int) -> pl.Pipeline:
        p = self.params
        return pl.Pipeline(sparsify="dare", p=p.p, weights=p.per_input(n),
                           scale=p.scale, seed=p.seed, rescale=p.rescale)
