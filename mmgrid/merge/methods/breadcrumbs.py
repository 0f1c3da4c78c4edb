"""Model Breadcrumbs (Davari & Belilovsky 2023, "Model Breadcrumbs: Scaling Multi-Task
Model Merging with Sparse Masks", arXiv 2312.06795): per tensor, mask the largest
(outlier) entries of each task vector and its smallest ones, then task arithmetic.

S(tau): of a tensor's N entries ranked by |tau|, drop the top n_top = floor(gamma N)
and the bottom n_bot = N - floor(density N) - n_top, keeping floor(density N) entries
(mergekit's ``magnitude_outliers``: ``density`` is the fraction kept, ``gamma`` the
fraction of largest entries removed; if density + gamma > 1 fewer large entries are
removed, n_top = N - floor(density N)). Equal magnitudes are ranked by position (a
stable sort). ``rescale="l1"`` is mergekit's ``rescale: true`` (kept entries scaled to
tau's L1 norm; see :func:`mmgrid.merge.ops.drop_rescale`).

theta* = theta_0 + scale * sum_i w_i S(tau_i) (mergekit's breadcrumbs: no sign
election, not normalized).

Edge case: where floor(gamma N) = 0 (gamma = 0, or a tensor of fewer than 1/gamma
entries, e.g. a 64-entry norm with gamma = 0.01) the floor(density N) largest entries are
kept. A mergekit that slices ``indices[n_bot:-n_top]`` (empty when n_top = 0) drops the
whole task vector there; mergekit 0.1.5 slices ``[n_bot:n_bot + target]`` and agrees with
this rule (tests/merge/test_mergekit_oracle.py, 8-entry norms with gamma 0.1).

Bound, per tensor: S only zeros entries, so ||theta* - theta_0|| <= c sum_i |w_i| max_i
||tau_i|| with c = |scale| (triangle inequality); with ``rescale="l1"`` c grows to
|scale| sqrt(N) (||l1(m tau)||_2 <= ||tau||_1 <= sqrt(N) ||tau||_2).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from mmgrid.merge import ops
from mmgrid.merge.ops import bin_value, threshold_bin
from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.base import TensorView, ViewStream, check_range
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.sparsified import SparsifiedMethod
from mmgrid.merge.methods.weights import Weights


def breadcrumbs_keep(delta: torch.Tensor, density: float, gamma: float) -> torch.Tensor:
    """The bool mask of the entries Breadcrumbs keeps in one tensor (see the module docstring).

    The entries of stable ranks n_bot .. N - n_top - 1 by |tau| (ascending, ties by position),
    found by selection instead of a sort: the two boundary magnitudes by one
    ``numpy.partition`` (introselect), every
    entry strictly between them kept, and of the entries equal to a boundary those whose stable
    rank (entries below + position among the equal ones) falls in the range. The same mask as
    sorting (tests/merge/test_methods_mergekit_family.py), without the sort's float32 values and
    int64 indices of every entry (3x the tensor's float32 size) and several times faster.
    """
    n = delta.numel()
    target = int(density * n)
    n_top = int(gamma * n)
    n_bot = n - target - n_top
    if n_bot < 0:  # density + gamma > 1: remove fewer large entries to keep `target`
        n_top, n_bot = n_top + n_bot, 0
    last = n - n_top - 1  # stable rank of the last entry kept
    if last < n_bot:
        return torch.zeros(delta.shape, dtype=torch.bool)
    a = delta.detach().reshape(-1).abs().float()
    part = np.partition(a.numpy(), [n_bot, last])
    lo, hi = float(part[n_bot]), float(part[last])
    del part
    keep = a > lo
    keep &= a < hi
    for v in sorted({lo, hi}):
        eq = (a == v).nonzero().reshape(-1)  # positions of the equal entries, in order
        rank = (a < v).sum() + torch.arange(eq.numel())
        keep[eq[(rank >= n_bot) & (rank <= last)]] = True
    return keep.reshape(delta.shape)


@dataclass
class BreadcrumbsParams(Weights):
    """Parameters of ``breadcrumbs``: :class:`Weights` (default 1.0 each), and

    Attributes:
        density: fraction of each tensor's entries kept, in (0, 1] (default 0.1).
        gamma: fraction of the largest entries removed, in [0, 1) (default 0.01, mergekit's).
        scale: a factor on the merged task vector (mergekit's ``lambda``).
        rescale: none (default, the paper) | l1 (mergekit's ``rescale: true``).
    """

    density: float = 0.1
    gamma: float = 0.01
    scale: float = 1.0
    rescale: Literal["none", "l1"] = "none"

    def __post_init__(self) -> None:
        check_range("density", self.density, 0.0, 1.0, True, False, "Breadcrumbs keeps a fraction, e.g. density=0.1")
        check_range("gamma", self.gamma, 0.0, 1.0, False, True, "gamma removes the largest fraction, e.g. gamma=0.01")


def ranks_kept(n: int, density: float, gamma: float) -> tuple[int, int]:
    """(n_bot, last): the stable ranks (ascending |tau|) of the first and last entry kept of
    an ``n``-entry tensor (none kept where last < n_bot); see the module docstring."""
    target = int(density * n)
    n_top = int(gamma * n)
    n_bot = n - target - n_top
    if n_bot < 0:  # density + gamma > 1: remove fewer large entries to keep `target`
        n_top, n_bot = n_top + n_bot, 0
    return n_bot, n - n_top - 1


@dataclass
class Cut:
    """One input's keep rule for one tensor, from the streaming first passes: entry e is kept
    where (|tau_e| > lo or (|tau_e| = lo and e >= p_lo)) and (|tau_e| < hi or (|tau_e| = hi and
    e <= p_hi)): the entries of stable ranks n_bot .. last (ties by position); ``none``: nothing
    kept."""

    lo: float = 0.0
    hi: float = 0.0
    p_lo: int = 0
    p_hi: int = 0
    none: bool = False

    def keep(self, a: torch.Tensor, offset: int) -> torch.Tensor:
        """The bool mask over ``a`` (|tau| of entries [offset, offset + numel))."""
        m = a.numel()
        if self.none:
            return torch.zeros(a.shape, dtype=torch.bool)
        pos = None

        def positions() -> torch.Tensor:
            return torch.arange(offset, offset + m).reshape(a.shape)

        low = a > self.lo
        if self.p_lo <= offset:  # every entry equal to lo here lies at or after p_lo
            low |= a == self.lo
        elif self.p_lo < offset + m:
            pos = positions()
            low |= (a == self.lo) & (pos >= self.p_lo)
        high = a < self.hi
        if self.p_hi >= offset + m - 1:
            high |= a == self.hi
        elif self.p_hi >= offset:
            pos = positions() if pos is None else pos
            high |= (a == self.hi) & (pos <= self.p_hi)
        return low & high


def breadcrumbs_cuts(stream: ViewStream, n_in: int, density: float, gamma: float) -> dict[str, list[Cut]]:
    """Each tensor's :class:`Cut` per input, exactly breadcrumbs_keep's selection, from three
    streaming passes over ``stream`` (consecutive pieces of each tensor): (1) a histogram of the
    top bits of |tau|'s float32 bit patterns locates the bins of ranks n_bot and last
    (:func:`mmgrid.merge.ops.threshold_bin`); (2) histograms of the low bits inside them give the two
    values and how many entries lie below and at each (:func:`mmgrid.merge.ops.bin_value`); (3)
    where ties at a value straddle a cut, the position of the first kept (lo) or last kept (hi)
    equal entry. Integer counts: the same for any chunking.

    Raises:
        NonFiniteError: NaN/Inf in an input or the base (named by tensor).
    """
    bufs: list[list[torch.Tensor]] = [[] for _ in range(n_in)]

    def mags(v: TensorView, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        m, b = v.raw[i].numel(), bufs[i]
        if not b or b[0].numel() < m:
            b[:] = [torch.empty(m, dtype=torch.float32), torch.empty(m, dtype=torch.int32)]
        d = b[0][:m].copy_(v.raw[i].reshape(-1)).sub_(v.required_raw_base.reshape(-1))  # TensorView.deltas()'s tau_i
        return d, b[1]

    def pieces():  # (view, offset in its tensor, first piece of the tensor?)
        cur, off = None, 0
        for v in stream():
            if v.name != cur:
                cur, off = v.name, 0
            yield v, off
            off += v.raw[0].numel()

    sizes: dict[str, int] = {}
    hists: dict[str, list[torch.Tensor]] = {}
    where: dict[str, list[tuple[int, int, int, int]]] = {}  # name -> per input (b_lo, above_lo, b_hi, above_hi)

    def close1(name: str) -> None:
        n = sizes[name]
        n_bot, last = ranks_kept(n, density, gamma)
        if last >= n_bot:
            where[name] = [threshold_bin(h, n - n_bot) + threshold_bin(h, n - last) for h in hists[name]]
        del hists[name]

    with ThreadPoolExecutor(max(1, min(n_in, 2)), thread_name_prefix="mmgrid-crumbs",
                            initializer=torch.set_num_threads, initargs=(1,)) as ex:
        cur = None
        for v, off in pieces():
            if v.name != cur:
                if cur is not None:
                    close1(cur)
                if v.name in sizes:
                    raise RuntimeError(f"the first pass saw tensor {v.name!r} twice, not in consecutive pieces")
                cur, sizes[v.name] = v.name, 0
                hists[cur] = [torch.zeros(ops.N_MAG_BINS, dtype=torch.int64) for _ in range(n_in)]
            sizes[v.name] += v.raw[0].numel()  # v.name is cur

            def first(i: int, v=v) -> None:
                d, scratch = mags(v, i)
                ops.add_magnitude_histogram(hists[v.name][i], d, f"tensor {v.name!r}: input {i} or the base", scratch)

            list(ex.map(first, range(n_in)))
        if cur is not None:
            close1(cur)
        subs = {name: [[torch.zeros(1 << ops.MAG_SHIFT, dtype=torch.int64) for _ in range(2)] for _ in range(n_in)]
                for name in where}
        for v, off in pieces():
            if v.name not in where:
                continue

            def second(i: int, v=v) -> list[torch.Tensor]:
                d, scratch = mags(v, i)
                b_lo, _, b_hi, _ = where[v.name][i]
                return [ops.sub_bin_histogram(d, b, scratch) for b in (b_lo, b_hi)]

            for i, parts in enumerate(ex.map(second, range(n_in))):
                for h, part in zip(subs[v.name][i], parts):
                    h += part
    cuts: dict[str, list[Cut]] = {}
    find: dict[str, list[list[int]]] = {}  # name -> per input [j_lo, j_hi] (index among the equal entries, -1: none to find)
    mask = (1 << ops.MAG_SHIFT) - 1
    for name, n in sizes.items():
        if name not in where:
            cuts[name] = [Cut(none=True) for _ in range(n_in)]
            continue
        n_bot, last = ranks_kept(n, density, gamma)
        cuts[name], find[name] = [], []
        for i in range(n_in):
            b_lo, above_lo, b_hi, above_hi = where[name][i]
            vals, js = [], []
            for b, above, sub, rank, k in ((b_lo, above_lo, subs[name][i][0], n_bot, n - n_bot),
                                           (b_hi, above_hi, subs[name][i][1], last, n - last)):
                v = bin_value(b, sub, k - above)
                low = int(torch.tensor([v], dtype=torch.float32).view(torch.int32)) & mask
                eq, greater = int(sub[low]), above + int(sub[low + 1:].sum())
                vals.append((v, n - greater - eq, eq))  # (value, entries below it, entries equal)
                js.append(rank - (n - greater - eq))  # index of the rank's entry among the equal ones
            (lo, _, _), (hi, _, eq_hi) = vals
            cut = Cut(lo, hi, 0, n)
            need = [js[0] if js[0] > 0 else -1, js[1] if js[1] < eq_hi - 1 else -1]
            cuts[name].append(cut)
            find[name].append(need)
    if any(j >= 0 for need in find.values() for ij in need for j in ij):
        count: dict[tuple[str, int, int], int] = {}
        for v, off in pieces():
            needs = find.get(v.name)
            if needs is None or all(j < 0 for j in needs[0] + sum(needs[1:], [])):
                continue
            for i in range(n_in):
                for side, j in enumerate(needs[i]):
                    if j < 0:
                        continue
                    d, _ = mags(v, i)
                    c = cuts[v.name][i]
                    ties = (d.abs_() == (c.lo if side == 0 else c.hi)).nonzero().reshape(-1)
                    seen = count.get((v.name, i, side), 0)
                    if seen <= j < seen + ties.numel():
                        p = off + int(ties[j - seen])
                        if side == 0:
                            c.p_lo = p
                        else:
                            c.p_hi = p
                    count[(v.name, i, side)] = seen + ties.numel()
    return cuts


@register
class Breadcrumbs(SparsifiedMethod):
    name = "breadcrumbs"
    pretty = "Model Breadcrumbs"
    paper = "Davari & Belilovsky 2023 (Model Breadcrumbs, arXiv 2312.06795); mergekit breadcrumbs"
    Params = BreadcrumbsParams


    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.mass(p, n) * bd.rescale_factor(p.rescale, 1.0, numel)

    def sparsify(self, key: str, index: int, delta: torch.Tensor) -> torch.Tensor:
        p = self.params
        return ops.drop_rescale(delta, breadcrumbs_keep(delta, p.density, p.gamma), 0.0, p.rescale)

    # Streaming (rescale none, mergekit's default): the first passes find each tensor's cuts
    # (breadcrumbs_cuts), and the merge pass is entrywise on the fast pass (entries): the masks
    # of breadcrumbs_keep and the operations of the whole-tensor path (pipeline.fuse), so the
    # same bits (tests/merge/test_fastpass.py). rescale l1 needs each tensor's norms: whole.

    @property
    def elementwise(self) -> bool:
        return self.params.rescale == "none"

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self._n = n

    def prepare(self, stream: ViewStream) -> None:
        if self.elementwise:
            self._cuts = breadcrumbs_cuts(stream, self._n, self.params.density, self.params.gamma)

    def kernel(self, n: int) -> pl.Kernel | None:
        return pl.Kernel(fn=self.entries) if self.elementwise else None

    def entries(self, name: str, parts, work: pl.Work | None = None, offset: int = 0) -> torch.Tensor:
        """Entries [offset, offset + numel) of tensor ``name`` (theta_0, then the inputs, as stored)."""
        cuts = self._cuts.get(name)
        if cuts is None:
            raise KeyError(f"no Breadcrumbs cuts for tensor {name!r}: the method's first passes did not see it")
        w = work if work is not None else pl.Work.fresh(parts[0].shape, len(parts))
        b = parts[0] if w.base is None else w.base.copy_(parts[0])
        ds = []
        for x, d, c in zip(parts[1:], w.deltas, cuts):
            t = ops.task_vector(x, b, out=d)
            ds.append(t.masked_fill_(~c.keep(torch.abs(t, out=w.tmp), offset), 0.0))
        return pl.fuse(self.fuse_config(len(parts) - 1), ds, w).add_(b)

    entries.positional = True  # type: ignore[attr-defined]  # takes the chunk's offset (mmgrid.merge.fastpass.kernels)

    def fuse_config(self, n: int) -> pl.Pipeline:
        p = self.params
        return pl.Pipeline(weights=p.per_input(n), scale=p.scale)
