"""Dot products and norms in float64 for the sphere methods (slerp, nuslerp, multislerp,
karcher, model_stock), accumulated over chunks so that no float64 copy of a whole tensor
is made (a big embedding would otherwise take twice its float32 size per input)."""

from __future__ import annotations

import math

import torch

CHUNK = 1 << 20  # entries per float64 chunk


def dot(a: torch.Tensor, b: torch.Tensor) -> float:
    """<a, b> over all entries, accumulated in float64."""
    a, b = a.reshape(-1), b.reshape(-1)
    return math.fsum(float(torch.dot(a[i:i + CHUNK].double(), b[i:i + CHUNK].double()))
                     for i in range(0, a.numel(), CHUNK))


def norm(a: torch.Tensor) -> float:
    """||a|| over all entries, accumulated in float64."""
    return math.sqrt(dot(a, a))


def row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """<a[..., :], b[..., :]> along the last dimension, float64, shape a.shape[:-1]."""
    d = a.shape[-1]
    a2, b2 = a.reshape(-1, d), b.reshape(-1, d)
    step = max(1, CHUNK // max(1, d))
    parts = [torch.linalg.vecdot(a2[i:i + step].double(), b2[i:i + step].double()) for i in range(0, a2.shape[0], step)]
    out = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    return out.reshape(a.shape[:-1])


BLOCK = 1 << 16  # entries per block of :class:`BlockedDots`


class BlockedDots:
    """<a, b>, <a, a>, <b, b> of one tensor fed in consecutive pieces of any size, the same to
    the last bit however it is cut: the flattened tensor is split into fixed blocks of
    :data:`BLOCK` entries (a piece's tail waits for the next piece), each block's three dots are
    taken in float64, and the blocks' values are summed exactly (``math.fsum``). The fast file
    pass (flat chunks) and the reference path (row chunks) therefore get the same statistics."""

    def __init__(self) -> None:
        self._a: list[torch.Tensor] = []
        self._b: list[torch.Tensor] = []
        self._held = 0
        self.ab: list[float] = []
        self.aa: list[float] = []
        self.bb: list[float] = []

    def add(self, a: torch.Tensor, b: torch.Tensor) -> None:
        a, b = a.reshape(-1), b.reshape(-1)
        i = 0
        if self._held:
            take = min(BLOCK - self._held, a.numel())
            self._a.append(a[:take].double())
            self._b.append(b[:take].double())
            self._held += take
            i = take
            if self._held == BLOCK:
                self._block(torch.cat(self._a), torch.cat(self._b))
                self._a, self._b, self._held = [], [], 0
        while a.numel() - i >= BLOCK:
            self._block(a[i:i + BLOCK].double(), b[i:i + BLOCK].double())
            i += BLOCK
        if i < a.numel():
            self._a.append(a[i:].double())
            self._b.append(b[i:].double())
            self._held += a.numel() - i

    def _block(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.ab.append(float(torch.dot(a, b)))
        self.aa.append(float(torch.dot(a, a)))
        self.bb.append(float(torch.dot(b, b)))

    def result(self) -> tuple[float, float, float]:
        """(<a, b>, ||a||, ||b||)."""
        if self._held:
            self._block(torch.cat(self._a), torch.cat(self._b))
            self._a, self._b, self._held = [], [], 0
        return math.fsum(self.ab), math.sqrt(math.fsum(self.aa)), math.sqrt(math.fsum(self.bb))


class BlockedGram:
    """The Gram matrix <v_i, v_j> of k vectors fed in consecutive pieces, chunking-independent as
    :class:`BlockedDots` (fixed blocks of :data:`BLOCK` entries, float64 dots, exact sums)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._held: list[list[torch.Tensor]] = [[] for _ in range(k)]
        self._n = 0
        self._parts: list[list[list[float]]] = [[[] for _ in range(k)] for _ in range(k)]

    def add(self, vs: list[torch.Tensor]) -> None:
        vs = [v.reshape(-1) for v in vs]
        m, i = vs[0].numel(), 0
        if self._n:
            take = min(BLOCK - self._n, m)
            for h, v in zip(self._held, vs):
                h.append(v[:take].double())
            self._n += take
            i = take
            if self._n == BLOCK:
                self._block([torch.cat(h) for h in self._held])
                self._held, self._n = [[] for _ in range(self.k)], 0
        while m - i >= BLOCK:
            self._block([v[i:i + BLOCK].double() for v in vs])
            i += BLOCK
        if i < m:
            for h, v in zip(self._held, vs):
                h.append(v[i:].double())
            self._n += m - i

    def _block(self, vs: list[torch.Tensor]) -> None:
        for a in range(self.k):
            for b in range(a, self.k):
                self._parts[a][b].append(float(torch.dot(vs[a], vs[b])))

    def result(self) -> list[list[float]]:
        """The k x k Gram matrix (symmetric)."""
        if self._n:
            self._block([torch.cat(h) for h in self._held])
            self._held, self._n = [[] for _ in range(self.k)], 0
        g = [[0.0] * self.k for _ in range(self.k)]
        for a in range(self.k):
            for b in range(a, self.k):
                g[a][b] = g[b][a] = math.fsum(self._parts[a][b])
        return g
