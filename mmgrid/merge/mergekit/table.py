"""The method table: each mergekit method, the mmgrid method it maps onto and how its
parameters translate (mergekit's semantics from mergekit/merge_methods/*.py and
sparsify.py). A row is enabled once its mmgrid method is registered and its ``build``
is written; every other mergekit method is refused with a named error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmgrid.merge.errors import MergekitRecipeError, MergekitUnsupportedError

REQUIRED = object()  # a per-model parameter without default
ZERO_BASE = "<zero>"  # linear without normalization: task arithmetic on a zero base


@dataclass
class Resolved:
    """The parameters of one tensor: ``glob`` (the method's global parameters) and
    ``per_model`` (one dict per non-base input, in the recipe's order)."""

    glob: dict[str, Any]
    per_model: list[dict[str, Any]]


@dataclass(frozen=True)
class Row:
    """One mergekit method and how it maps onto an mmgrid method.

    Attributes:
        mergekit: mergekit's method name.
        method: the mmgrid method it maps to; the row is enabled once it is registered.
        glob: mergekit's global parameters and their defaults.
        per_model: mergekit's per-model parameters and defaults (REQUIRED: none).
        build: (Resolved, mmgrid Params field names) -> (mmgrid method, parameters, base
            marker: None for the recipe's base, ZERO_BASE, or "" for no base).
        needs_base: mergekit needs ``base_model``.
        base_is_input: the base model is merged as one more input (linear).
        random: draws random masks (compared statistically with mergekit).
    """

    mergekit: str
    method: str
    glob: dict[str, Any]
    per_model: dict[str, Any]
    build: Callable[[Resolved, set[str]], tuple[str, dict[str, Any], str | None]] | None
    needs_base: bool = True
    base_is_input: bool = False
    random: bool = False
    note: str = ""


def _weights(r: Resolved) -> list[float]:
    return [float(m["weight"]) for m in r.per_model]


def _normalized(w: list[float], normalize: bool) -> list[float]:
    """mergekit's GTA normalization: divide by sum w (a sum below 1e-8 in size counts as 1)."""
    if not normalize:
        return w
    s = sum(w)
    return [x / (s if abs(s) >= 1e-8 else 1.0) for x in w]


def _one(r: Resolved, name: str, where: str) -> float:
    vals = {float(m[name]) for m in r.per_model}
    if len(vals) != 1:
        raise MergekitUnsupportedError(
            f"{where}: the models' {name!r} differ on one tensor ({sorted(vals)}); mmgrid's method takes one "
            f"{name} for all inputs. Give every model the same {name} (filters and gradients may still vary it by tensor)")
    return vals.pop()


def _linear(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    w = _weights(r)
    if r.glob["normalize"] and all(x >= 0 for x in w) and sum(w) > 0:
        return "average", {"weights": w}, ""
    if r.glob["normalize"]:
        if sum(w) == 0:
            raise MergekitRecipeError("linear with normalize: true: the weights sum to 0 on a tensor; mergekit divides by "
                                      "that sum. Change a weight or set normalize: false")
        w = [x / sum(w) for x in w]
    return "task_arithmetic", {"weights": w}, ZERO_BASE  # sum_i w_i theta_i


def _task_arithmetic(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    w = _normalized(_weights(r), r.glob["normalize"])
    return "task_arithmetic", {"weights": w, "scale": float(r.glob["lambda"])}, None


def _ties(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    w = _weights(r)
    d = min(1.0, _one(r, "density", "ties"))
    params = {"density": d, "scope": "tensor", "combine": "disjoint_mean" if r.glob["normalize"] else "sum",
              "weights": w, "scale": float(r.glob["lambda"])}
    params["sign_rule"] = "weighted"  # mergekit elects the sign of sum_i w_i tau_i (the TIES paper: unweighted)
    return "ties", params, None


def _dare(r: Resolved, fields: set[str], method: str) -> tuple[str, dict[str, Any], str | None]:
    w = _weights(r)
    p = max(0.0, 1.0 - _one(r, "density", method))
    params: dict[str, Any] = {"p": p, "scale": float(r.glob["lambda"])}
    if r.glob["rescale"] and "rescale" in fields:
        params["rescale"] = MERGEKIT_DARE_RESCALE  # mergekit's L1-norm rescale
    elif not r.glob["rescale"]:
        w = [x * (1.0 - p) for x in w]  # undo mmgrid's 1/(1-p): kept entries unscaled
    if method == "dare_linear":
        params["weights"] = _normalized(w, r.glob["normalize"])
        return "dare", params, None
    params.update(weights=w, density=1.0, scope="tensor", combine="disjoint_mean" if r.glob["normalize"] else "sum")
    params["sign_rule"] = "weighted"  # as in _ties
    return "ties_dare", params, None


# The value of mmgrid DARE's ``rescale`` option that means mergekit's rule (H9's option).
MERGEKIT_DARE_RESCALE = "l1"

_GTA = {"int8_mask": False, "normalize": False, "rescale": False, "lambda": 1.0}
_W = {"weight": REQUIRED, "density": 1.0}

#: mergekit method -> mmgrid. A row whose mmgrid method is not registered (yet) is
#: refused with a named error; rows with ``build=None`` are known and not supported.
METHOD_TABLE: dict[str, Row] = {r.mergekit: r for r in [
    Row("linear", "average", {"normalize": True}, {"weight": REQUIRED}, _linear, needs_base=False, base_is_input=True,
        note="normalize: true and weights >= 0 -> average; otherwise task arithmetic on a zero base"),
    Row("task_arithmetic", "task_arithmetic", dict(_GTA), dict(_W), _task_arithmetic,
        note="weight -> weights (divided by their sum with normalize), lambda -> scale"),
    Row("ties", "ties", {**_GTA, "normalize": True}, dict(_W), _ties,
        note="density -> density, scope=tensor, normalize -> combine disjoint_mean (else sum), lambda -> scale, "
             "sign_rule=weighted"),
    Row("dare_linear", "dare", {**_GTA, "rescale": True}, dict(_W), lambda r, f: _dare(r, f, "dare_linear"), random=True,
        note="p = 1 - density; rescale: true -> mergekit's L1 rescale where mmgrid has it, else 1/(1-p)"),
    Row("dare_ties", "ties_dare", {**_GTA, "rescale": True}, dict(_W), lambda r, f: _dare(r, f, "dare_ties"),
        random=True, note="p = 1 - density, TIES density 1 (no magnitude trim), scope=tensor, sign_rule=weighted"),
    # methods being added to mmgrid (issue 18 item 2): known to the reader, enabled when a mapping is written
    Row("slerp", "slerp", {"t": REQUIRED}, {}, None),
    Row("nuslerp", "nuslerp", {}, {"weight": REQUIRED}, None),
    Row("multislerp", "multislerp", {}, {"weight": REQUIRED}, None),
    Row("karcher", "karcher", {}, {}, None),
    Row("model_stock", "model_stock", {}, {}, None),
    Row("nearswap", "nearswap", {"t": REQUIRED}, {}, None),
    Row("passthrough", "passthrough", {}, {}, None),
    Row("breadcrumbs", "breadcrumbs", dict(_GTA), {**_W, "gamma": 0.01}, None),
    Row("breadcrumbs_ties", "breadcrumbs_ties", dict(_GTA), {**_W, "gamma": 0.01}, None),
    Row("della", "della", {**_GTA, "normalize": True, "rescale": True}, {**_W, "epsilon": 0.15}, None, random=True),
    Row("della_linear", "della_linear", {**_GTA, "rescale": True}, {**_W, "epsilon": 0.15}, None, random=True),
    Row("sce", "sce", {}, {"weight": REQUIRED}, None),
    Row("arcee_fusion", "", {}, {}, None),
    Row("ram", "ram", {}, {}, None),
]}


def supported_methods(registered: set[str]) -> list[str]:
    """mergekit methods this mmgrid can run: a mapping written and its method registered."""
    return sorted(k for k, r in METHOD_TABLE.items() if r.build is not None and r.method in registered)
