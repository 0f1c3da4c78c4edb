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
        base_is_input: the base model is merged as one more input (linear, karcher,
            passthrough; last unless ``base_first``).
        base_first: the base model is the first input (slerp: mergekit's v_0 is the base).
        random: draws random masks (compared with mergekit with injected masks or statistically).
    """

    mergekit: str
    method: str
    glob: dict[str, Any]
    per_model: dict[str, Any]
    build: Callable[[Resolved, set[str]], tuple[str, dict[str, Any], str | None]] | None
    needs_base: bool = True
    base_is_input: bool = False
    base_first: bool = False
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


def _num(r: Resolved, name: str, where: str, lo: float | None = None) -> float:
    """A global numeric parameter (REQUIRED ones are not type-checked by the reader)."""
    v = r.glob[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise MergekitRecipeError(f"parameters.{name}: {where} needs a number, got {v!r}")
    if lo is not None and v < lo:
        raise MergekitRecipeError(f"parameters.{name}: {where} needs {name} >= {lo}, got {v!r}")
    return float(v)


def _slerp(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    # mergekit's slerp(t, base, other): inputs [base, other] (base_first), no separate base
    return "slerp", {"t": _num(r, "t", "slerp")}, ""


def _nuslerp(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    # t = w_1 / (w_0 + w_1) in both; with a base both slerp the task vectors
    return "nuslerp", {"weights": _weights(r), "flatten": bool(r.glob["nuslerp_flatten"]),
                       "row_wise": bool(r.glob["nuslerp_row_wise"])}, None


def _multislerp(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    if float(r.glob["eps"]) != 1e-8:
        raise MergekitUnsupportedError(f"parameters.eps: multislerp's eps is fixed at 1e-8 in mmgrid, got {r.glob['eps']!r}; "
                                       "remove it")
    return "multislerp", {"weights": _weights(r), "normalize_weights": bool(r.glob["normalize_weights"])}, None


def _karcher(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    it = _num(r, "max_iter", "karcher", 0)
    if it != int(it):
        raise MergekitRecipeError(f"parameters.max_iter: karcher needs a whole number of iterations, got {it!r}")
    # mergekit: every input (the base too, base_is_input) weighted 1/n; no base
    return "karcher", {"max_iter": int(it), "tol": _num(r, "tol", "karcher")}, ""


def _model_stock(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    # mergekit applies t = N cos / (1 + (N - 1) cos) to any cosine: mmgrid's clamp_cos=False
    return "model_stock", {"filter_wise": bool(r.glob["filter_wise"]), "clamp_cos": False}, None


def _nearswap(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    return "nearswap", {"t": _num(r, "t", "nearswap", 0.0)}, None  # [other] merged onto the base


def _passthrough(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    if len(r.per_model) != 1:
        raise MergekitUnsupportedError(f"passthrough copies one model, got {len(r.per_model)}; layer stacking "
                                       "(slices:) is not supported")
    return "passthrough", {"scale": float(r.per_model[0]["scale"])}, ""


def _breadcrumbs(r: Resolved, fields: set[str], ties: bool) -> tuple[str, dict[str, Any], str | None]:
    name = "breadcrumbs_ties" if ties else "breadcrumbs"
    params: dict[str, Any] = {"density": min(1.0, _one(r, "density", name)), "gamma": _one(r, "gamma", name),
                              "scale": float(r.glob["lambda"]), "rescale": "l1" if r.glob["rescale"] else "none"}
    if ties:  # mergekit: consensus on the weighted task vectors; normalize -> weighted disjoint mean
        params.update(weights=_weights(r), combine="disjoint_mean" if r.glob["normalize"] else "sum",
                      sign_rule="weighted")
    else:
        params["weights"] = _normalized(_weights(r), r.glob["normalize"])
    return name, params, None


def _della(r: Resolved, fields: set[str], linear: bool) -> tuple[str, dict[str, Any], str | None]:
    name = "della_linear" if linear else "della"
    d, eps = _one(r, "density", name), _one(r, "epsilon", name)
    if d < 1 and not (d - eps > 0 and d + eps < 1):
        raise MergekitRecipeError(f"{name}: density +/- epsilon = {d} +/- {eps} must lie inside (0, 1) (mergekit's "
                                  "rule); lower epsilon or move density")
    # mergekit's epsilon is the half-width of the keep window, as mmgrid's; rescale: true -> L1, false -> none
    params: dict[str, Any] = {"density": min(1.0, d), "epsilon": eps, "scale": float(r.glob["lambda"]),
                              "rescale": "l1" if r.glob["rescale"] else "none"}
    if linear:
        params["weights"] = _normalized(_weights(r), r.glob["normalize"])
    else:
        params.update(weights=_weights(r), combine="disjoint_mean" if r.glob["normalize"] else "sum",
                      sign_rule="weighted")
    return name, params, None


def _sce(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    k = _num(r, "select_topk", "sce")  # int8_mask only changes the mask's dtype in mergekit, not the values
    return "sce", {"select_topk": min(1.0, max(0.0, k))}, None  # mergekit: <= 0 keeps nothing, >= 1 everything


def _ram(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    return "ram", {"epsilon": _num(r, "epsilon", "ram", 0.0)}, None


def _ramplus(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    return "ramplus_tl", {"r": _num(r, "r", "ramplus_tl", 0.0), "rho_max": _num(r, "alpha", "ramplus_tl", 0.0),
                          "epsilon": _num(r, "epsilon", "ramplus_tl", 0.0)}, None


def _arcee_fusion(r: Resolved, fields: set[str]) -> tuple[str, dict[str, Any], str | None]:
    if len(r.per_model) != 1:
        raise MergekitRecipeError(f"arcee_fusion merges one model onto base_model, got {len(r.per_model)} others")
    return "arcee_fusion", {}, None


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
    Row("slerp", "slerp", {"t": REQUIRED}, {}, _slerp, base_is_input=True, base_first=True,
        note="inputs [base_model, the other model], t -> t"),
    Row("nuslerp", "nuslerp", {"nuslerp_flatten": True, "nuslerp_row_wise": False}, {"weight": REQUIRED}, _nuslerp,
        needs_base=False, note="weight -> weights, nuslerp_flatten -> flatten, nuslerp_row_wise -> row_wise; "
                               "a base_model slerps the task vectors"),
    Row("multislerp", "multislerp", {"normalize_weights": True, "eps": 1e-8}, {"weight": REQUIRED}, _multislerp,
        needs_base=False, note="weight -> weights, normalize_weights -> normalize_weights; a base_model centres the sphere"),
    Row("karcher", "karcher", {"max_iter": 10, "tol": 1e-5}, {}, _karcher, needs_base=False, base_is_input=True,
        note="every model (base_model too) an input with equal weight; max_iter, tol"),
    Row("model_stock", "model_stock", {"filter_wise": False}, {}, _model_stock,
        note="filter_wise -> filter_wise, clamp_cos=false (mergekit's formula for any cosine)"),
    Row("nearswap", "nearswap", {"t": REQUIRED}, {}, _nearswap, note="t -> t; the other model onto base_model"),
    Row("passthrough", "passthrough", {}, {"scale": 1.0}, _passthrough, needs_base=False, base_is_input=True,
        note="one model; scale -> scale (slices: not supported)"),
    Row("breadcrumbs", "breadcrumbs", dict(_GTA), {**_W, "gamma": 0.01}, lambda r, f: _breadcrumbs(r, f, False),
        note="density, gamma, rescale -> l1|none, lambda -> scale, normalize divides the weights by their sum"),
    Row("breadcrumbs_ties", "breadcrumbs_ties", dict(_GTA), {**_W, "gamma": 0.01}, lambda r, f: _breadcrumbs(r, f, True),
        note="as breadcrumbs; normalize -> combine disjoint_mean (else sum), sign_rule=weighted"),
    Row("della", "della", {**_GTA, "normalize": True, "rescale": True}, {**_W, "epsilon": 0.15},
        lambda r, f: _della(r, f, False), random=True,
        note="density, epsilon (same half-width convention), rescale -> l1|none, normalize -> combine "
             "disjoint_mean (else sum), lambda -> scale, sign_rule=weighted"),
    Row("della_linear", "della_linear", {**_GTA, "rescale": True}, {**_W, "epsilon": 0.15},
        lambda r, f: _della(r, f, True), random=True,
        note="density, epsilon, rescale -> l1|none, lambda -> scale, normalize divides the weights by their sum"),
    Row("sce", "sce", {"int8_mask": False, "select_topk": 1.0}, {}, _sce, note="select_topk -> select_topk; no weights"),
    Row("ram", "ram", {"epsilon": 1e-5}, {}, _ram, note="epsilon -> epsilon"),
    Row("ramplus_tl", "ramplus_tl", {"r": 0.1, "alpha": 0.2, "epsilon": 1e-5}, {}, _ramplus,
        note="r -> r, alpha -> rho_max, epsilon -> epsilon"),
    Row("arcee_fusion", "arcee_fusion", {}, {}, _arcee_fusion,
        note="the other model onto base_model (exact quantiles where mergekit samples tensors over 10^6 entries)"),
]}


def supported_methods(registered: set[str]) -> list[str]:
    """mergekit methods this mmgrid can run: a mapping written and its method registered."""
    return sorted(k for k, r in METHOD_TABLE.items() if r.build is not None and r.method in registered)
