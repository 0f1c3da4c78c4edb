"""The Python entry points: :func:`merge` (state dict in memory) and
:func:`merge_to_file` (streamed to a safetensors file)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from mmgrid.merge import executor, ops
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import get_method, params_dict, validate_params
from mmgrid.merge.methods.base import Method
from mmgrid.merge.plan import Plan, check_and_plan
from mmgrid.merge.tensors import SafetensorsWriter, TensorSource, open_source
from mmgrid.merge.vocab import merged_added_rows

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry


@dataclass
class MergeInfo:
    """What a merge reports besides tensors (stored in ``meta["merge"]``).

    Attributes:
        method: the method name.
        params: its validated parameters.
        report: the method's own facts (GCWM conflict scores, TIES thresholds...).
        rows: added-row provenance per tensor.
        added_rows: the merged model's ``meta["added_rows"]``.
    """

    method: str
    params: dict[str, Any]
    report: dict[str, Any] = field(default_factory=dict)
    rows: dict[str, Any] = field(default_factory=dict)
    added_rows: dict[str, list] = field(default_factory=dict)


# MMGRid Eq. 8: theta_neutral = AVERAGE(theta_i^t1, theta_j^t1), the registered method that computes it
NEUTRAL_BASE_METHOD = "average"


def neutral_base(sources: Sequence[TensorSource]) -> TensorSource:
    """The neutral base of MMGRid Eq. 8 - the one definition: theta_neutral = AVERAGE(theta_i^t1,
    theta_j^t1), the uniform per-tensor mean of same-period checkpoints (:func:`mmgrid.merge.ops.average`,
    the math of :data:`NEUTRAL_BASE_METHOD`; integer tensors are the first input's).

    This is the lazy form a merge uses for ``base=[id_i, id_j]``; the cross-domain study stores the
    same average as a checkpoint by running :data:`NEUTRAL_BASE_METHOD` on the same inputs
    (:func:`mmgrid.sweep.crossdomain.store_neutral_base`), and a test checks the two are equal.
    """

    def get(name: str) -> torch.Tensor:
        ts = [s.get(name) for s in sources]
        if not ts[0].is_floating_point():
            return ts[0]
        return ops.average(ts).to(ts[0].dtype)

    first = sources[0]
    return TensorSource("neutral(" + ", ".join(s.label for s in sources) + ")", dict(first.shapes), get, dict(first.meta))


def prepare(method: str | Method, models: Sequence[Any], base: Any = None, registry: Registry | None = None,
            **params: Any) -> tuple[Method, list[TensorSource], TensorSource | None, Plan]:
    """Validate everything (method, parameters, inputs, shapes) before any merge work.

    ``method``: a registered name, with its parameters as ``params``; or a method instance whose
    parameters were validated already (:meth:`mmgrid.merge.recipe.Recipe.checked`), taken as they
    are (the merge runs a fresh instance of it, so the given one keeps no report).
    """
    if isinstance(method, Method):
        if params:
            raise MergeParamError(f"method {method.name!r} comes with its parameters; pass no others "
                                  f"(got {', '.join(sorted(params))})")
        cls = type(method)
        inst = cls(method.params)
        method = inst.name
    else:
        cls = get_method(method)
        inst = cls(validate_params(method, params))
    if not models:
        raise MergeParamError("no input models given")
    srcs = [open_source(m, f"input[{i}]", registry) for i, m in enumerate(models)]
    inst.check_inputs(len(srcs))
    bsrc = None
    if isinstance(base, (list, tuple)):
        bsrc = neutral_base([open_source(b, f"base[{i}]", registry) for i, b in enumerate(base)])
    elif base is not None:
        bsrc = open_source(base, "base", registry)
    if cls.needs_base and bsrc is None:
        raise MergeParamError(f"method {method!r} merges task vectors and needs a base: pass base=ID (original base, a historical checkpoint) or base=[ID, ID] (neutral base, MMGRid Eq. 8)")
    if cls.optional_base and bsrc is not None:
        inst.needs_base = True  # type: ignore[misc]  # this instance's own value: this merge works on the task vectors of the base it was given
    plan = check_and_plan(srcs, bsrc if inst.needs_base else None)
    return inst, srcs, bsrc if inst.needs_base else None, plan


def _info(inst: Method, plan: Plan, n: int) -> MergeInfo:
    return MergeInfo(inst.name, params_dict(inst.params), inst.report, plan.provenance(n), merged_added_rows(plan.rows))


def merge_with_info(method: str | Method, models: Sequence[Any], base: Any = None, registry: Registry | None = None, *,
                    route: executor.Route | None = None, **params: Any) -> tuple[dict[str, torch.Tensor], MergeInfo]:
    """Like :func:`merge`, also returning the :class:`MergeInfo`."""
    inst, srcs, bsrc, plan = prepare(method, models, base, registry, **params)
    out: dict[str, torch.Tensor] = {}

    def sink(name: str, t: torch.Tensor) -> None:
        # passthrough tensors are the inputs' own objects: copy so the result never aliases them
        out[name] = t.clone() if name in plan.passthrough else t

    executor.run(inst, srcs, bsrc, plan, sink, route=route)
    return out, _info(inst, plan, len(srcs))


def merge(method: str, models: Sequence[Any], base: Any = None, registry: Registry | None = None, *,
          route: executor.Route | None = None, **params: Any) -> dict[str, torch.Tensor]:
    """Merge ``models`` with ``method`` and return the merged state dict.

    Args:
        method: a registered method name (see ``mmgrid.merge.methods.method_names()``).
        models: state dicts, ``.safetensors`` paths or registry ids (then pass registry=).
        base: the task vectors' base: a model as above, a list of models (the neutral
            base of MMGRid Eq. 8, their average), or None for methods that need none.
        registry: an open ``mmgrid.Registry`` for ids.
        route: which path merges (:class:`mmgrid.merge.executor.Route`; default: the
            fast pass where the method has one). Every route gives the same bits.
        **params: the method's parameters (validated against its dataclass).

    Returns:
        name -> tensor, in the first input's dtype and tensor order.

    Raises:
        MergeError subclasses: unknown method or parameter, out-of-range value,
        different architectures or shapes, missing tensors, NaN/Inf. Nothing is written.
    """
    return merge_with_info(method, models, base, registry, route=route, **params)[0]


def merge_to_file(method: str | Method, models: Sequence[Any], out_path: str | os.PathLike, base: Any = None,
                  registry: Registry | None = None, durable: bool = True, *, route: executor.Route | None = None,
                  **params: Any) -> MergeInfo:
    """Merge tensor by tensor straight into a safetensors file (nothing left on error).

    Args:
        durable: fsync the file before it appears under ``out_path`` (False for scratch
            files that are read back at once, e.g. a registry put from a temp dir).
        Others: as :func:`merge`.
    """
    inst, srcs, bsrc, plan = prepare(method, models, base, registry, **params)
    meta = {"added_rows": json.dumps(merged_added_rows(plan.rows))} if plan.rows else {}
    writer = SafetensorsWriter(out_path, plan.layout, meta, durable=durable)
    try:
        executor.run(inst, srcs, bsrc, plan, writer.write, writer, route)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return _info(inst, plan, len(srcs))
