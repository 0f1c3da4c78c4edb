"""The one Euclidean merge pipeline: delta -> sparsify -> elect sign -> combine -> scale.

Task arithmetic, TIES, DARE, TIES-DARE, weight averaging and the temporal merge are
configurations of :class:`Pipeline` (see their modules); OrthoMerge merges its
residuals and GCWM its low-conflict layers with it.

An entrywise method declares what it computes once, as a :class:`Kernel` (a Pipeline
configuration, linear coefficients or a lerp); the reference path and the fast file pass
both evaluate it with :func:`apply_kernel`, which calls the one home of each step
(:mod:`mmgrid.merge.ops`, :func:`merged`): the fast pass only chooses the chunks and
lends reused buffers (:class:`Work`).

TIES's top-X% is taken over the whole model (``scope="model"``, as the TIES and MMGRid
code do) or per tensor (``scope="tensor"``, as mergekit and PEFT do). The whole-model
threshold of each input comes from one streaming pass before the merge pass (two
passes in all): a histogram of the float32 bit patterns of |delta| locates the k-th
largest magnitude to a relative 2^-11 (see :class:`ThresholdFinder`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import torch

from mmgrid.merge import masks, ops
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
    if cfg.scope == "model" or thresholds is not None:  # per tensor: the exact thresholds of tensor_thresholds
        if thresholds is None:
            raise RuntimeError("whole-model TIES needs the thresholds of the first passes")
        return [ops.trim_magnitude(d, t) for d, t in zip(out, thresholds)]
    return [ops.trim_top_density(d, cfg.density) for d in out]


def combine(cfg: Pipeline, name: str, deltas: Sequence[torch.Tensor],
            thresholds: Sequence[float] | None = None) -> torch.Tensor:
    """Run sparsify -> elect sign -> combine -> scale on one tensor's deltas."""
    return fuse(cfg, trimmed(cfg, name, deltas, thresholds))


def elected_sign(cfg: Pipeline, ds: Sequence[torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """The elected sign of sparsified deltas under ``cfg.sign_rule`` (into ``out`` when given)."""
    return ops.elect_sign(ds, list(cfg.weights) if cfg.weights else None, cfg.sign_rule, out=out)


@dataclass
class Work:
    """Float32 buffers the pipeline writes into instead of allocating, all of one shape.

    The fast pass (:mod:`mmgrid.merge.fastpass`) lends views of buffers it reuses across
    chunks; the reference path gets fresh ones (:meth:`fresh`). Either way the same
    operations run, so both give the same bits.

    Attributes:
        acc: the combined delta, then the result.
        sign: the elected sign.
        den: disjoint_mean's denominator.
        tmp: scratch.
        mask: a bool scratch (sign masking without disjoint_mean).
        base: a buffer for theta_0 in float32 (:func:`merged`; None: the base is read as
            stored, exactly, by each operation, without a float32 copy).
        deltas: one per input (:func:`merged`).
    """

    acc: torch.Tensor
    sign: torch.Tensor
    den: torch.Tensor
    tmp: torch.Tensor
    mask: torch.Tensor
    base: torch.Tensor | None = None
    deltas: Sequence[torch.Tensor] = ()

    def take(self, m: int) -> Work:
        """Views of the first ``m`` entries of each (flat) buffer."""
        if m == self.acc.numel():
            return self
        return Work(self.acc[:m], self.sign[:m], self.den[:m], self.tmp[:m], self.mask[:m],
                    None if self.base is None else self.base[:m], [d[:m] for d in self.deltas])

    def base32(self, base: torch.Tensor) -> torch.Tensor:
        """theta_0 in float32: copied into the ``base`` buffer where there is one, else
        ``base.float()`` (a float32 base itself: read it, never write it)."""
        return self.base.copy_(base) if self.base is not None else base.float()

    @classmethod
    def fresh(cls, shape: Sequence[int], n_inputs: int = 0) -> Work:
        f = lambda: torch.empty(tuple(shape), dtype=torch.float32)  # noqa: E731
        return cls(f(), f(), f(), f(), torch.empty(tuple(shape), dtype=torch.bool), None, [f() for _ in range(n_inputs)])


def fuse(cfg: Pipeline, ds: Sequence[torch.Tensor], work: Work | None = None) -> torch.Tensor:
    """elect sign -> combine -> scale on already sparsified deltas (the methods with their
    own sparsifier, e.g. breadcrumbs and DELLA, call this after it).

    With ``work`` the result is ``work.acc`` and the deltas may be overwritten (they are
    the caller's scratch); without, nothing given is modified.
    """
    weights = list(cfg.weights) if cfg.weights else [1.0] * len(ds)
    w = work if work is not None else Work.fresh(ds[0].shape)
    if cfg.combine == "disjoint_mean":
        out = ops.disjoint_mean(ds, elected_sign(cfg, ds, w.sign), weights, out=w.acc, den=w.den, tmp=w.tmp)
    else:
        if cfg.elect_sign:
            ds = ops.sign_masked(ds, elected_sign(cfg, ds, w.sign), inplace=work is not None, tmp=w.tmp, mask=w.mask)
        out = ops.weighted_sum(ds, weights, out=w.acc)
    return out.mul_(cfg.scale) if cfg.scale != 1.0 else out


def merged(cfg: Pipeline, name: str, models: Sequence[torch.Tensor], base: torch.Tensor,
          thresholds: Sequence[float] | None = None, work: Work | None = None) -> torch.Tensor:
    """theta_0 + PIPELINE(theta_i - theta_0) in float32: the one definition of a pipeline
    merge of one tensor (or a chunk of its entries, for the elementwise configurations).

    The reference path calls it per tensor or row chunk (fresh buffers), the fast pass
    per cache-sized chunk with the buffers of ``work`` (:class:`Work`, with a ``base``
    buffer and one ``deltas`` buffer per input), which it reuses across chunks.

    Args:
        cfg: the configuration.
        name: the tensor's key for DARE's seeded masks.
        models, base: theta_i and theta_0 as stored (bf16...), one shape.
        thresholds: whole-model TIES thresholds from :class:`ThresholdFinder`.
    """
    w = work if work is not None else Work.fresh(base.shape, len(models))
    b = base if w.base is None else w.base.copy_(base)  # the same values: a float32 copy is read faster
    deltas = [ops.task_vector(x, b, out=d) for x, d in zip(models, w.deltas)]
    return fuse(cfg, trimmed(cfg, name, deltas, thresholds), w).add_(b)


def linear_coefs(cfg: Pipeline, n: int) -> ops.Coefs | None:
    """(c_0, [c_i]) when the configuration is linear (no sparsifier, no sign election, a
    sum): theta_0 + s sum_i w_i (theta_i - theta_0) = (1 - sum_i c_i) theta_0 +
    sum_i c_i theta_i with c_i = s w_i, merged by :func:`mmgrid.merge.ops.linear_combination`."""
    if cfg.sparsify != "none" or cfg.elect_sign or cfg.combine != "sum":
        return None
    cs = [cfg.scale * w for w in (cfg.weights or (1.0,) * n)]
    return 1.0 - sum(cs), cs


@dataclass(frozen=True)
class Kernel:
    """What an elementwise method computes at each entry, declared once by the method
    (:meth:`mmgrid.merge.methods.base.Method.kernel`); the reference path and the fast
    pass both evaluate it with the same functions (:func:`apply_kernel`).

    Exactly one of:

    Attributes:
        coefs: a linear merge, :func:`mmgrid.merge.ops.linear_combination`'s (c_0, [c_i]),
            or a dict tensor name -> (c_0, [c_i]) (coefficients per tensor, known after
            the method's first pass: slerp, NuSLERP, Model Stock).
        lerp: the temporal merge's lambda (:func:`mmgrid.merge.ops.interpolate`).
        pipeline: a :class:`Pipeline` configuration (:func:`merged`), with
            ``thresholds``, the whole-model TIES thresholds of the first pass, or
            ``tensor_thresholds``, tensor name -> each input's exact per-tensor top-X%
            threshold (:func:`tensor_thresholds`; empty before the first passes).
        fn: a method's own entrywise function ``fn(name, parts, work)`` -> the float32 result
            of those entries (``parts``: theta_0 first where the method takes a base, then the
            inputs, as stored; ``name``: the tensor's name, for statistics of the method's
            first pass; ``work``: a :class:`Work` of the parts' shape to compute in, reused by
            the fast pass across chunks: a fresh tensor per operation and chunk costs page
            faults). Each
            entry must come from the same entries of the parts alone, with the same operations
            whatever the chunk (RAM, NearSwap, SCE and RAM+ after their first passes), so any
            split gives the same bits. Such a function may drop an input's NaN/Inf (a threshold
            compares it away), so both routes check its inputs.
    """

    coefs: ops.Coefs | Mapping[str, ops.Coefs] | None = None
    lerp: float | None = None
    pipeline: Pipeline | None = None
    thresholds: tuple[float, ...] | None = None
    tensor_thresholds: Mapping[str, tuple[float, ...]] | None = None
    fn: Callable[..., torch.Tensor] | None = None  # (name, parts, work), and the flat offset where positional

    @classmethod
    def of(cls, cfg: Pipeline, n: int, thresholds: Sequence[float] | None = None) -> Kernel:
        """A pipeline configuration's kernel: linear coefficients where it is linear."""
        coefs = linear_coefs(cfg, n)
        if coefs is not None:
            return cls(coefs=coefs)
        return cls(pipeline=cfg, thresholds=tuple(thresholds) if thresholds is not None else None)

    def coefs_for(self, name: str) -> ops.Coefs | None:
        """The linear coefficients of tensor ``name`` (None: not a linear kernel)."""
        return self.coefs.get(name) if isinstance(self.coefs, Mapping) else self.coefs

    @property
    def chunkable(self) -> bool:
        """Whether any split of the entries gives the same bits (the fast pass's chunks):
        not DARE (its masks are drawn per tensor key and shape) nor a per-tensor top-X%."""
        cfg = self.pipeline
        per_tensor = cfg is not None and cfg.uses_magnitude and cfg.scope == "tensor" and self.tensor_thresholds is None
        return cfg is None or not (cfg.uses_dare or per_tensor)

    def thresholds_for(self, name: str) -> Sequence[float] | None:
        """The pipeline's trim thresholds for tensor ``name`` (None: none, or a per-tensor
        top-X% computed on the tensor itself)."""
        if self.tensor_thresholds is None:
            return self.thresholds
        got = self.tensor_thresholds.get(name)
        if got is None:
            raise KeyError(f"no top-X% thresholds for tensor {name!r}: the method's first passes did not see it")
        return got


def apply_kernel(k: Kernel, name: str, parts: Sequence[torch.Tensor], work: Work | None = None) -> torch.Tensor:
    """One tensor's (or chunk's) result in float32; ``parts``: theta_0 first where the kernel
    takes a base (a pipeline, or linear coefficients with c_0), then the inputs, as stored.

    The one evaluation of a :class:`Kernel`, called per row chunk by the reference path
    (:mod:`mmgrid.merge.reference`) and per cache-sized chunk by the fast pass
    (:mod:`mmgrid.merge.fastpass.kernels`, with reused ``work`` buffers).
    """
    w = work if work is not None else Work.fresh(parts[0].shape, len(parts))
    if k.fn is not None:  # the method's own entrywise function
        return k.fn(name, parts, w)
    if k.lerp is not None:  # MMGRid Eq. 9-10 on float32 copies
        return ops.lerp_into(w.acc.copy_(parts[0]), w.tmp.copy_(parts[1]), k.lerp, w.acc)
    if k.pipeline is not None:
        return merged(k.pipeline, name, parts[1:], parts[0], k.thresholds_for(name), w)
    coefs = k.coefs_for(name)
    if coefs is None:
        raise KeyError(f"no linear coefficients for tensor {name!r}: the method's first pass did not see it")
    return ops.linear_combination(parts, coefs, out=w.acc)


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


def tensor_thresholds(cfg: Pipeline, views: Callable[[], Iterator], n_inputs: int) -> dict[str, tuple[float, ...]]:
    """Each input's per-tensor top-``density`` threshold, exactly the k-th largest |delta| of
    the tensor (k = :func:`mmgrid.merge.ops.keep_count`; the value :func:`mmgrid.merge.ops.trim_top_density`
    takes from the whole tensor), from two streaming passes over its chunks (``views()``:
    :class:`~mmgrid.merge.methods.base.TensorView`-like pieces of each tensor, consecutive): a
    histogram of the top bits of the float32 bit patterns locates the bin of the k-th largest
    (:func:`mmgrid.merge.ops.threshold_bin`), then one of the low bits inside that bin gives its
    value (:func:`mmgrid.merge.ops.bin_value`). Integer counts: the same for any chunking.

    Raises:
        NonFiniteError: NaN/Inf in an input or the base (named by tensor).
    """
    if cfg.uses_dare:
        raise ValueError("per-tensor thresholds after DARE need the whole tensor (its masks are drawn per tensor)")
    # per input: a float32 and an int32 buffer reused across chunks (fresh ones cost page faults),
    # and the inputs histogrammed on threads of their own (bincount and the copies release the GIL)
    bufs: list[list[torch.Tensor]] = [[] for _ in range(n_inputs)]

    def delta(v, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        m, b = v.raw[i].numel(), bufs[i]
        if not b or b[0].numel() < m:
            b[:] = [torch.empty(m, dtype=torch.float32), torch.empty(m, dtype=torch.int32)]
        return b[0][:m].copy_(v.raw[i].reshape(-1)).sub_(v.raw_base.reshape(-1)), b[1]

    def first(v, i: int, h: torch.Tensor) -> None:
        d, scratch = delta(v, i)
        ops.add_magnitude_histogram(h, d, f"tensor {v.name!r}: input {i} or the base", scratch)

    def second(v, i: int, b: int) -> torch.Tensor:
        d, scratch = delta(v, i)
        return ops.sub_bin_histogram(d, b, scratch)

    where: dict[str, tuple[int, list[tuple[int, int]]]] = {}  # name -> (k, [(bin, above)] per input)
    cur: str | None = None
    hists: list[torch.Tensor] = []
    total = 0

    def close() -> None:
        assert cur is not None  # called once a tensor's pieces were seen
        k = ops.keep_count(cfg.density, total)
        where[cur] = (k, [ops.threshold_bin(h, k) for h in hists])

    with ThreadPoolExecutor(max(1, min(n_inputs, 2)), thread_name_prefix="mmgrid-topx") as ex:
        for v in views():
            if v.name != cur:
                if cur is not None:
                    close()
                if v.name in where:
                    raise RuntimeError(f"the first pass saw tensor {v.name!r} twice, not in consecutive pieces")
                cur, hists, total = v.name, [torch.zeros(ops.N_MAG_BINS, dtype=torch.int64) for _ in range(n_inputs)], 0
            total += v.raw[0].numel()
            list(ex.map(lambda i, v=v: first(v, i, hists[i]), range(n_inputs)))  # each input its own histogram
        if cur is not None:
            close()
        subs = {name: [torch.zeros(1 << ops.MAG_SHIFT, dtype=torch.int64) for _ in range(n_inputs)] for name in where}
        for v in views():
            bins = where[v.name][1]
            parts = ex.map(lambda i, v=v, bins=bins: second(v, i, bins[i][0]), range(n_inputs))
            for h, part in zip(subs[v.name], parts):
                h += part
    return {name: tuple(ops.bin_value(b, h, k - above) for h, (b, above) in zip(subs[name], bins))
            for name, (k, bins) in where.items()}


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
            ops.add_magnitude_histogram(h, d, f"tensor {key!r}: input {i} or the base")

    def thresholds(self) -> list[float]:
        k = ops.keep_count(self.cfg.density, self.seen)
        return [ops.locate_threshold(h, k) for h in self.hists]
