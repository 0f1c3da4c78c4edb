"""Arcee Fusion (mergekit's ``arcee_fusion``, Arcee AI 2025; no paper): keep the base
except where the other model's change matters most.

Inputs: [theta_1] (the other model) and base theta_0 (mergekit's ``base_model``). Per
tensor, with tau = theta_1 - theta_0 and the softmax taken along the last dimension
(a 1-D tensor as one row):

    I_e = |tau_e| * KL(p || q) of e's row,  p = softmax(theta_1 row) + 1e-8,  q = softmax(theta_0 row) + 1e-8,
    T   = Q_0.5(I) + 1.5 (Q_0.75(I) - Q_0.25(I))     (an outlier fence: median + 1.5 IQR),
    theta* = theta_0 + [I >= T] ⊙ tau,

Q_q the element at index floor(q (N - 1)) of the sorted importances (mergekit's rule). Where
mergekit estimates the quantiles of a tensor of more than 10^6 entries from 10^6 random
draws, mmgrid takes them exactly (deterministic; the same value up to the sampling error).

Streaming: the KL is one number per row, so a first pass stores each row's KL (rows taken in
groups on a fixed grid of :data:`ROW_CHUNK` entries, the same bits however the tensor is cut)
and counts the importances' float32 bit patterns in a histogram (negative importances, from a
KL that rounds below 0, in a second one); a second pass counts the low bits inside the bins of
the three order statistics, which gives their exact values (:func:`mmgrid.merge.ops.bin_value`,
the values a sort gives); the merge pass is entrywise, I_e = |tau_e| KL(row of e) against T.

Bound, per tensor: the mask only zeros entries, ||theta* - theta_0|| <= ||tau||, c = 1.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from mmgrid.merge import ops
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel, Work

EPS = 1e-8  # mergekit's floor added to both softmaxes
ROW_CHUNK = 1 << 16  # entries per row group of the KLs (a fixed grid of rows; in L2 cache)
QUANTILES = (0.25, 0.5, 0.75)
THREADS = 2  # threads of the second pass (this machine: 2 cores)


@dataclass
class ArceeFusionParams:
    """``arcee_fusion`` has no parameters (as in mergekit)."""


def row_kl(rows: torch.Tensor, brows: torch.Tensor) -> torch.Tensor:
    """KL(softmax(rows) + eps || softmax(brows) + eps) of each row of two float32 (r, L)
    tensors, as an (r, 1) float32 tensor (mergekit's expression, evaluated in place)."""
    p = torch.softmax(rows, dim=-1).add_(EPS)
    q = torch.softmax(brows, dim=-1).add_(EPS)
    return torch.div(p, q, out=q).log_().mul_(p).sum(-1, keepdim=True)


def importance(theta: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """I = |theta - base| * KL(softmax(theta) || softmax(base)) per row (float32)."""
    rows = theta.reshape(-1, theta.shape[-1]) if theta.ndim >= 1 else theta.reshape(1, 1)
    brows = base.reshape(rows.shape)
    return (rows - brows).abs_().mul_(row_kl(rows, brows)).reshape(theta.shape)


def quantile_indices(n: int) -> list[int]:
    """The ascending indices floor(q (n - 1)) of the three quantiles, computed as mergekit does
    (a float32 product, so the same index for any n)."""
    return [int(i) for i in (torch.tensor(QUANTILES) * (n - 1)).long()]


def fence_of(q1: float, med: float, q3: float) -> float:
    """median + 1.5 IQR in float32, the arithmetic of mergekit's threshold."""
    a, m, b = (torch.tensor(v, dtype=torch.float32) for v in (q1, med, q3))
    return float(m + 1.5 * (b - a))


def fence(scores: torch.Tensor) -> float:
    """median + 1.5 IQR, quantiles at index floor(q (N - 1)) of the sorted scores.

    The three order statistics come from one ``numpy.partition`` (introselect: the same values
    as indexing the sorted scores, about 4x faster than a full sort, measured).
    """
    flat = scores.detach().reshape(-1).float().contiguous()
    qs = quantile_indices(flat.numel())
    part = np.partition(flat.numpy(), qs)
    return fence_of(*(float(part[i]) for i in qs))


def row_length(shape: tuple[int, ...]) -> int:
    """Entries per softmax row: the last dimension (a 0-d tensor is one row of one)."""
    return int(shape[-1]) if len(shape) else 1


@dataclass
class Fences:
    """The first passes' state of one tensor: each row's KL, the importances' histograms
    (of |I| for I >= 0, and for I < 0) and the order statistics found so far."""

    name: str
    n: int
    width: int
    kl: torch.Tensor
    hists: list[torch.Tensor] = field(default_factory=lambda: [torch.zeros(ops.N_MAG_BINS, dtype=torch.int64)
                                                                for _ in range(2)])
    group: list[torch.Tensor] = field(default_factory=list)  # the current row group (theta_1, theta_0)
    filled: int = 0  # entries of the row group read so far
    rows_done: int = 0
    picks: list[tuple[int, int, int]] = field(default_factory=list)  # per quantile (sign, bin, rank in the bin)

    def add(self, b: torch.Tensor, a: torch.Tensor) -> None:
        """Consecutive entries of theta_1 and theta_0 (flat, as stored)."""
        span = self.group[0].numel()
        i = 0
        m = b.numel()
        while i < m:
            take = min(m - i, span - self.filled)
            self.group[0][self.filled:self.filled + take].copy_(b[i:i + take])
            self.group[1][self.filled:self.filled + take].copy_(a[i:i + take])
            self.filled += take
            i += take
            if self.filled == span or self.rows_done * self.width + self.filled == self.n:
                self._close_group()

    def _close_group(self) -> None:
        r = self.filled // self.width
        rows = self.group[0][:self.filled].reshape(r, self.width)
        brows = self.group[1][:self.filled].reshape(r, self.width)
        kl = row_kl(rows, brows)
        self.kl[self.rows_done:self.rows_done + r] = kl.reshape(-1)
        scores = rows.sub_(brows).abs_().mul_(kl).reshape(-1)  # the group's theta_1 buffer, now I
        what = f"tensor {self.name!r}: the importances of the input and the base"
        neg = scores < 0
        if bool(neg.any()):
            ops.add_magnitude_histogram(self.hists[1], scores[neg], what)
            scores = scores[~neg]
        ops.add_magnitude_histogram(self.hists[0], scores, what)
        self.rows_done += r
        self.filled = 0
        if self.rows_done * self.width == self.n:
            self._locate()

    def _locate(self) -> None:
        """The bins of the three order statistics, once the tensor is complete; the histograms
        and the row group are dropped (4 MiB each: a model's tensors would hold gigabytes)."""
        n_neg = int(self.hists[1].sum())
        for idx in quantile_indices(self.n):
            if idx < n_neg:  # among the negatives, ascending = the (idx + 1)-th largest magnitude
                sign, k = 1, idx + 1
            else:
                sign, k = 0, self.n - idx
            b, above = ops.threshold_bin(self.hists[sign], k)
            self.picks.append((sign, b, k - above))
        self.hists, self.group = [], []


def scores_at(kl: torch.Tensor, width: int, b: torch.Tensor, a: torch.Tensor, offset: int,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """I of the flat entries [offset, offset + numel) (theta_1 ``b``, theta_0 ``a``, float32,
    flat) from each row's KL: |b - a| * KL(row), the operations of :func:`importance`."""
    m = b.numel()
    r0, r1 = offset // width, (offset + m - 1) // width + 1
    per = kl[r0:r1, None].expand(r1 - r0, width).reshape(-1)[offset - r0 * width: offset - r0 * width + m]
    return torch.sub(b, a, out=out).abs_().mul_(per)


@register
class ArceeFusion(Method):
    name = "arcee_fusion"
    pretty = "Arcee Fusion"
    paper = "mergekit arcee_fusion (Arcee AI 2025)"
    Params = ArceeFusionParams
    symmetric = False  # one input; the base and the other model have different roles
    min_inputs = 1
    max_inputs = 1

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return 1.0

    @property
    def elementwise(self) -> bool:
        return True

    def prepare(self, stream: ViewStream) -> None:
        """Each tensor's row KLs and fence T, exactly (module docstring), in two streaming passes."""
        states: dict[str, Fences] = {}
        group = [torch.empty(0), torch.empty(0)]
        for v in stream():
            st = states.get(v.name)
            if st is None:
                shape = tuple(stream.shapes[v.name])
                width = row_length(shape)
                n = int(np.prod(shape)) if shape else 1
                rows = n // width
                span = max(1, ROW_CHUNK // width) * width
                st = states[v.name] = Fences(v.name, n, width, torch.empty(rows, dtype=torch.float32))
                if group[0].numel() < span:
                    group = [torch.empty(span, dtype=torch.float32) for _ in range(2)]
                st.group = [g[:span] for g in group]  # one pair of buffers for every tensor in turn
            st.add(v.raw[0].reshape(-1), v.required_raw_base.reshape(-1))
        want = {name: st.picks for name, st in states.items()}
        subs = {name: {(s, b): torch.zeros(1 << ops.MAG_SHIFT, dtype=torch.int64) for s, b, _ in picks}
                for name, picks in want.items()}
        offsets: dict[str, int] = {}
        bufs = [[torch.empty(ROW_CHUNK, dtype=torch.float32) for _ in range(3)] for _ in range(THREADS)]

        def second(name: str, rb: torch.Tensor, ra: torch.Tensor, off: int, part: int) -> list[torch.Tensor]:
            """Sub-bin counts of the part-th of THREADS stripes of cache-sized pieces of a view."""
            st, (b_buf, a_buf, i_buf) = states[name], bufs[part]
            got = [torch.zeros(1 << ops.MAG_SHIFT, dtype=torch.int64) for _ in subs[name]]
            for c in range(part * ROW_CHUNK, rb.numel(), THREADS * ROW_CHUNK):
                m = min(ROW_CHUNK, rb.numel() - c)
                b, a = b_buf[:m].copy_(rb[c:c + m]), a_buf[:m].copy_(ra[c:c + m])
                scores = scores_at(st.kl, st.width, b, a, off + c, out=i_buf[:m])
                neg = scores < 0
                has_neg = bool(neg.any())
                for h, (sign, bin_) in zip(got, subs[name]):
                    sel = scores if not has_neg else scores[neg] if sign else scores[~neg]
                    h += ops.sub_bin_histogram(sel, bin_)
            return got

        with ThreadPoolExecutor(THREADS, thread_name_prefix="mmgrid-arcee", initializer=torch.set_num_threads,
                                initargs=(1,)) as ex:
            for v in stream():
                off = offsets.get(v.name, 0)
                rb, ra = v.raw[0].reshape(-1), v.required_raw_base.reshape(-1)
                offsets[v.name] = off + rb.numel()
                # stripes of cache-sized pieces on both cores; integer counts, so the same for any split
                for got in ex.map(lambda k, v=v, rb=rb, ra=ra, off=off: second(v.name, rb, ra, off, k), range(THREADS)):
                    for h, g in zip(subs[v.name].values(), got):
                        h += g
        self._fences = {}
        for name, picks in want.items():
            vals = [(-1.0 if s else 1.0) * ops.bin_value(b, subs[name][(s, b)], k) for s, b, k in picks]
            self._fences[name] = (states[name].kl, states[name].width, fence_of(*vals))

    def kernel(self, n: int) -> Kernel:
        return Kernel(fn=self.entries)

    def entries(self, name: str, parts, work: Work | None = None, offset: int = 0) -> torch.Tensor:
        """Entries [offset, offset + numel) of tensor ``name`` (theta_0, theta_1 as stored):
        theta_1 where I >= T, else theta_0."""
        got = self._fences.get(name)
        if got is None:
            raise KeyError(f"no Arcee Fusion fence for tensor {name!r}: the method's first passes did not see it")
        kl, width, t = got
        shape = parts[0].shape
        if not parts[0].numel():
            return torch.empty(shape, dtype=torch.float32)
        w = work if work is not None else Work.fresh((parts[0].numel(),), 1)
        a = w.base32(parts[0].reshape(-1))
        b = w.deltas[0].copy_(parts[1].reshape(-1))
        scores = scores_at(kl, width, b, a, offset, out=w.tmp)
        torch.ge(scores, t, out=w.mask)
        return torch.where(w.mask, b, a, out=w.acc).reshape(shape)

    entries.positional = True  # type: ignore[attr-defined]  # takes the chunk's offset (mmgrid.merge.fastpass.kernels)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        # Whole tensors (added vocabulary rows): the importances in row groups of ROW_CHUNK
        # entries into one float32 buffer, which then takes the result in place.
        b, a = view.raw[0], view.required_raw_base
        rb = b.reshape(-1, b.shape[-1]) if b.ndim >= 1 else b.reshape(1, 1)
        ra = a.reshape(rb.shape)
        scores = torch.empty(rb.shape, dtype=torch.float32)
        step = max(1, ROW_CHUNK // max(1, rb.shape[1]))
        for i in range(0, rb.shape[0], step):
            scores[i:i + step] = importance(rb[i:i + step].float(), ra[i:i + step].float())
        t = fence(scores)
        for i in range(0, rb.shape[0], step):
            bc, ac = rb[i:i + step].float(), ra[i:i + step].float()
            scores[i:i + step] = torch.where(scores[i:i + step] >= t, bc, ac)
        return scores.reshape(b.shape)
