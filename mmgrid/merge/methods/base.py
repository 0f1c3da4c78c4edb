"""What every merge method is: a class with a typed parameter dataclass, registered by
name (:func:`mmgrid.merge.methods.registry.register`).

A method's ``Params`` dataclass is the schema that ``--set key=value``, recipes and grid
YAML are validated against (:func:`mmgrid.merge.methods.validate_params`) before any
tensor is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.pipeline import Kernel


@dataclass
class TensorView:
    """One tensor (or a row chunk of it) of every input, shared rows only.

    The tensors are given as stored (bf16...); ``models`` and ``base`` are their float32
    versions, made on first use, and :meth:`deltas` computes float32 task vectors
    without a float32 copy of the base.

    Attributes:
        name: the tensor's name in the state dict.
        raw: the inputs' tensors, in input order.
        raw_base: the base's tensor (None when the method takes no base).
        vocab: True for embedding / LM-head rows (merged in Euclidean space by the
            geometric methods).
        start: first row of this view when a big tensor is seen in row chunks.
    """

    name: str
    raw: list[torch.Tensor]
    raw_base: torch.Tensor | None
    vocab: bool = False
    start: int = 0
    _f32: list[torch.Tensor] | None = field(default=None, repr=False)
    _b32: torch.Tensor | None = field(default=None, repr=False)

    @property
    def models(self) -> list[torch.Tensor]:
        if self._f32 is None:
            self._f32 = [t.float() for t in self.raw]
        return self._f32

    @property
    def base(self) -> torch.Tensor | None:
        if self._b32 is None and self.raw_base is not None:
            self._b32 = self.raw_base.float()
        return self._b32

    @property
    def required_raw_base(self) -> torch.Tensor:
        """``raw_base`` of a method that takes a base (``needs_base``: the engine gives each of its views one)."""
        if self.raw_base is None:
            raise AssertionError(f"tensor {self.name!r}: a method that needs a base got no base tensor")
        return self.raw_base

    @property
    def required_base(self) -> torch.Tensor:
        """``base`` (float32) of a method that takes a base, as :attr:`required_raw_base`."""
        b = self.base
        if b is None:
            raise AssertionError(f"tensor {self.name!r}: a method that needs a base got no base tensor")
        return b

    @property
    def key(self) -> str:
        """Names this view for seeded randomness (DARE): the tensor, plus the chunk's row."""
        return self.name if self.start == 0 else f"{self.name}@{self.start}"

    def deltas(self) -> list[torch.Tensor]:
        """tau_i = theta_i - theta_0 (MMGRid Eq. 2), fresh float32 tensors."""
        assert self.raw_base is not None
        b = self._b32 if self._b32 is not None else self.raw_base
        # a float32 input's .float() is the input itself: copy, never modify the caller's tensors
        return [t.to(torch.float32, copy=True).sub_(b) for t in self.raw]


@dataclass
class ViewStream:
    """A re-startable stream of views for :meth:`Method.prepare` passes.

    Attributes:
        views: a callable that yields every merged tensor's views afresh.
        total: entries per input over all merged tensors (shared rows).
        shapes: each merged tensor's shape (shared rows), for passes that need its rows
            while the views are flat chunks.
    """

    views: Callable[[], Iterator[TensorView]]
    total: int
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __call__(self) -> Iterator[TensorView]:
        return self.views()


class Method:
    """Base class of merge methods (subclass, set the ClassVars, decorate with @register).

    Attributes:
        version: the computation's version (see :func:`mmgrid.merge.methods.identity`).
        params: the validated parameter dataclass.
        report: JSON-able facts the method computed (conflict scores...), stored in
            the merged checkpoint's ``meta["merge"]``.
    """

    name: ClassVar[str]
    pretty: ClassVar[str]
    paper: ClassVar[str]
    Params: ClassVar[type]
    needs_base: ClassVar[bool] = True
    # a base-free method that uses a base when one is given (nuslerp, multislerp: task
    # vectors on the sphere around it); the engine then sets the instance's needs_base
    optional_base: ClassVar[bool] = False
    symmetric: ClassVar[bool] = True  # result independent of the order of the inputs
    min_inputs: ClassVar[int] = 1
    max_inputs: ClassVar[int | None] = None
    # The computation's version: bumped when a fix changes what the method computes, so
    # that results stored by an older version are recomputed, never served (see identity()).
    version: ClassVar[int] = 1
    # Where the update bound is measured from: "base" (theta_0, the base the merge is given),
    # "origin" (theta_0 = 0: base-free methods bounded around the sphere's centre) or
    # "first_input" (temporal: theta_0 = theta_t1).
    bound_origin: ClassVar[str] = "base"

    @staticmethod
    def update_bound(params: Any, n: int, numel: int) -> float | None:
        """The c of the module docstring's bound ||theta* - theta_0|| <= c max_i ||theta_i -
        theta_0||, per tensor, for these parameters, ``n`` inputs and a tensor of ``numel``
        entries (:mod:`mmgrid.merge.methods.bounds`; inf: no finite constant for these
        parameters; None: no per-tensor bound, the docstring says what holds instead). Every
        method states its own; tests/merge/test_update_bounds.py checks each on every shape family."""
        raise NotImplementedError("a merge method states its update bound: override update_bound")

    def __init__(self, params: Any) -> None:
        self.params = params
        self.report: dict[str, Any] = {}

    def check_inputs(self, n: int) -> None:
        """Raise MergeParamError if ``n`` inputs do not fit this method or its params."""
        if n < self.min_inputs or (self.max_inputs is not None and n > self.max_inputs):
            want = f"exactly {self.min_inputs}" if self.min_inputs == self.max_inputs else f"at least {self.min_inputs}"
            raise MergeParamError(f"method {self.name!r} takes {want} input model(s), got {n}")

    @property
    def elementwise(self) -> bool:
        """True if each output entry depends only on the same entry of the inputs (after
        :meth:`prepare`): the engine may then hand big tensors over in row chunks."""
        return False

    @property
    def verify_inputs(self) -> bool:
        """Whether the engine must check each input chunk for NaN/Inf in the merge pass."""
        return True

    def kernel(self, n: int) -> Kernel | None:
        """What an :attr:`elementwise` method computes at each entry (after
        :meth:`prepare`), declared once: linear coefficients, a lerp or a
        :class:`~mmgrid.merge.pipeline.Pipeline` configuration. The reference path and the
        fast pass both evaluate it (:func:`mmgrid.merge.pipeline.apply_kernel`), so they agree
        bit for bit; None: the method's :meth:`merge_tensor` does the work."""
        return None

    def prepare(self, stream: ViewStream) -> None:
        """Optional streaming passes before the merge pass (whole-model statistics)."""

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        """The merged float32 tensor for one name (for a method with a :meth:`kernel`:
        added vocabulary rows only)."""
        raise NotImplementedError


MAX_ITERATIONS = 10_000  # the most fixed-point iterations a method parameter may ask for (a bound on the work)


def check_range(name: str, value: float, lo: float, hi: float, lo_open: bool, hi_open: bool, hint: str) -> None:
    """Raise MergeParamError unless ``value`` lies in the interval."""
    ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        iv = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
        raise MergeParamError(f"parameter {name}={value} is outside {iv}; {hint}")
