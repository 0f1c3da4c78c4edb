"""Sweeps over one scalar without re-reading files: the temporal lambda (MMGRid Eq. 10).

(The pairwise alpha of Eq. 7 is a merge per alpha through the methods' shared weights,
:func:`mmgrid.merge.methods.eq7`.)

A sweep reads its inputs once: the temporal sweep keeps theta_t1 and theta_t2 as
stored and computes each point with MMGRid Eq. 9-10's one definition,
:func:`mmgrid.merge.ops.lerp_into` (one fused ``torch.lerp`` in float32; no float32
tau_temp is held: 4 bytes per bf16 entry, not 6).
``state_at`` returns a state dict, ``apply_to`` writes the point into an already loaded
torch module's parameters with no file I/O (evaluate, then move to the next point),
``write`` streams it to a file in blocks computed on two threads and written from a
background thread (:class:`mmgrid.merge.fastpass.writer.AsyncWriter`).
Memory: 4 bytes per entry of a bf16 model.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from mmgrid.merge import ops
from mmgrid.merge.api import prepare
from mmgrid.merge.fastpass import writer as fw
from mmgrid.merge.fastpass.kernels import finite_range
from mmgrid.merge.inplace import apply_inplace, module_tensors
from mmgrid.merge.plan import Plan, check_finite
from mmgrid.merge.reference import passthrough
from mmgrid.merge.tensors import SafetensorsWriter

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry


# bytes per output block of a sweep point: one lerp per block, so bigger blocks mean
# fewer thread hand-offs; the blocks are pooled across points (at most about eight).
SWEEP_BLOCK_BYTES = 16 << 20


class _Sweep:
    """Shared part: theta(s) = a + s (b - a) per tensor pair (:func:`mmgrid.merge.ops.lerp_into`),
    plus passthrough tensors."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # theta(s) = a + s (b - a)
        self.fixed: dict[str, torch.Tensor] = {}
        self.dtypes = {n: d for n, _, d in plan.layout}
        self._pool: dict[torch.dtype, list[torch.Tensor]] = {}  # output blocks reused by every write
        self._writing = threading.Lock()  # one write at a time shares the pool
        self._unchanged: set[str] | None = None

    def _point(self, name: str, s: float) -> torch.Tensor:
        a, b = self.pairs[name]
        return ops.lerp_into(a, b, float(s), torch.empty(a.shape, dtype=self.dtypes[name]))

    def state_at(self, s: float) -> dict[str, torch.Tensor]:
        """The merged state dict at scalar ``s`` (in the inputs' dtype)."""
        out = {}
        for name, _, dtype in self.plan.layout:
            out[name] = self.fixed[name] if name in self.fixed else self._point(name, s).to(dtype)
        return out

    def states(self, values: Iterable[float]) -> Iterator[tuple[float, dict[str, torch.Tensor]]]:
        """(s, theta(s)) for each value, without reading any file again."""
        for s in values:
            yield s, self.state_at(s)

    def apply_to(self, module: torch.nn.Module, s: float, strict: bool = True, changed_only: bool = False) -> None:
        """Set ``module``'s parameters/buffers to theta(s) in place, without file I/O.

        Tensors of the (theta_t1, theta_t2) form are lerped straight into the module's
        storage (:func:`mmgrid.merge.ops.lerp_into`: float32, one rounding to the
        module's dtype; on another device, computed where the pair is, then moved). A
        module built on the sweep's own input tensors (e.g.
        ``load_state_dict(t1, assign=True)``) is detected, and that pair is copied
        first, so the sweep's inputs never change. With ``changed_only`` the tensors
        equal at t1 and t2 (and the passthrough ones) are not written.
        """
        targets = module_tensors(module)
        direct = []
        for name, pair in self.pairs.items():
            dst = targets.get(name)
            if dst is None or tuple(dst.shape) != tuple(pair[0].shape) or (changed_only and name in self.unchanged):
                continue  # apply_inplace names the problem (strict) or skips it
            ptr = dst.untyped_storage().data_ptr()
            if any(t.untyped_storage().data_ptr() == ptr for t in pair):
                self.pairs[name] = pair = (pair[0].clone(), pair[1].clone())
            direct.append((name, pair, dst))
        with torch.no_grad():
            for name, (a, b), dst in direct:
                if dst.device == a.device:
                    ops.lerp_into(a, b, float(s), dst.data)
                else:
                    dst.data.copy_(ops.lerp_into(a, b, float(s), torch.empty(a.shape, dtype=dst.dtype)))
        done = {name for name, _, _ in direct}
        skip = (self.unchanged | set(self.fixed)) if changed_only else set()
        apply_inplace(module, lambda name: self.fixed[name] if name in self.fixed else self._point(name, s),
                      names=[n for n, _, _ in self.plan.layout if n not in done and n not in skip], strict=strict)

    @property
    def unchanged(self) -> set[str]:
        """Names of the (theta_t1, theta_t2) pairs that are equal: no scalar moves them."""
        if self._unchanged is None:
            self._unchanged = {name for name, (a, b) in self.pairs.items() if torch.equal(a, b)}
        return self._unchanged

    def write(self, s: float, path: str | os.PathLike, durable: bool = True) -> None:
        """Stream theta(s) into a safetensors file: blocks of :data:`SWEEP_BLOCK_BYTES`
        computed on two threads, written in file order from a third
        (:func:`mmgrid.merge.fastpass.writer.write_blocks`), into output buffers the sweep keeps
        for its next point. Concurrent calls on one sweep run one after the other."""
        jobs = [j for name, shape, dtype in self.plan.layout
                for j in fw.block_jobs(name, math.prod(shape), dtype, block_bytes=SWEEP_BLOCK_BYTES)]
        with self._writing:
            self._write(jobs, float(s), path, durable)

    def _write(self, jobs: list[fw.Job], s: float, path: str | os.PathLike, durable: bool) -> None:
        w = SafetensorsWriter(path, self.plan.layout, durable=durable)
        try:
            aw = fw.AsyncWriter(w)
            try:
                fw.write_blocks(jobs, lambda job, out, _work: self._fill(job.name, s, job.a, job.b, out), aw,
                                make_work=lambda: None, pool=self._pool)
            finally:
                aw.drain()
            w.close()
        except BaseException:
            w.abort()
            raise

    def _fill(self, name: str, s: float, a: int, b: int, out: torch.Tensor) -> None:
        """Entries [a, b) of theta(s)'s tensor ``name`` into ``out`` (the same operations
        as ``_point``: one lerp per block)."""
        if name in self.fixed:
            out.copy_(self.fixed[name].reshape(-1)[a:b])
            return
        x, y = (t.reshape(-1)[a:b] for t in self.pairs[name])
        ops.lerp_into(x, y, s, out)


class TemporalSweep(_Sweep):
    """theta(lambda) = theta_t1 + lambda (theta_t2 - theta_t1) (MMGRid Eq. 9-10).

    Each point is :func:`mmgrid.merge.ops.lerp_into` of the pair as stored, so it is
    bitwise the checkpoint ``merge("temporal", [t1, t2], lam=lambda)`` writes.
    Added-vocabulary rows are aligned by token: rows both checkpoints have are
    interpolated, rows of one checkpoint are kept as they are (as :func:`merge` does).
    """

    def __init__(self, t1: Any, t2: Any, registry: Registry | None = None) -> None:
        inst, srcs, _, plan = prepare("temporal", [t1, t2], registry=registry)
        super().__init__(plan)
        for name, _, _ in plan.layout:
            if name in plan.passthrough:
                self.fixed[name] = passthrough(srcs, name)
                continue
            pair = _load_pair(srcs, name)
            rp = plan.rows.get(name)
            self.pairs[name] = pair if rp is None else _aligned(*pair, rp)

    def state_at(self, lam: float) -> dict[str, torch.Tensor]:  # noqa: D102 (named for Eq. 10)
        return super().state_at(lam)


def _load_pair(srcs: list, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(theta_t1, theta_t2) as stored (memory-mapped from files), after checking both
    hold no NaN/Inf."""
    pair = (srcs[0].mapped(name), srcs[1].mapped(name))
    for t, src in zip(pair, srcs):
        if not finite_range(t):
            check_finite(t, name, src.label)
    return pair


def _aligned(a: torch.Tensor, b: torch.Tensor, rp) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b) with their added rows in the plan's union order; a row only one of them
    has stands for both (lerp(x, x, s) = x exactly)."""
    ra, rb = [a[: rp.shared]], [b[: rp.shared]]
    for src in rp.sources:
        rows = {i: r for i, r in src}
        va = a[rows[0]] if 0 in rows else b[rows[1]]
        vb = b[rows[1]] if 1 in rows else a[rows[0]]
        ra.append(va[None])
        rb.append(vb[None])
    return torch.cat(ra), torch.cat(rb)
