"""Merge methods: one small module each, registered by name with typed parameters.

Importing this package imports every method module (each registers itself in
:mod:`mmgrid.merge.methods.registry`); :func:`get_method`, :func:`method_names`,
:func:`validate_params` and :func:`identity` are the only places that know them all. Methods of
installed distributions (entry-point group ``mmgrid.merge_methods``) and of Python code
(:func:`register_method`) join them on first lookup (:mod:`mmgrid.plugins`, docs/extending.md).

Adding a method: write ``methods/<name>.py`` with a ``Params`` dataclass and a
:class:`~mmgrid.merge.methods.base.Method` subclass decorated with ``@register`` that states
its update bound (``update_bound``, :mod:`mmgrid.merge.methods.bounds`), and import it below.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from mmgrid.configtools import build
from mmgrid.errors import ConfigError
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import (  # noqa: F401  (importing a method module registers it)
    acceleration,
    arcee_fusion,
    average,
    breadcrumbs,
    breadcrumbs_ties,
    dare,
    della,
    della_linear,
    dop,
    ema,
    exp_decay,
    gcwm,
    karcher,
    linear_velocity,
    magmax,
    model_stock,
    moving_average_velocity,
    multislerp,
    nearswap,
    nuslerp,
    opcm,
    orthomerge,
    passthrough,
    ram,
    ramplus_tl,
    sce,
    slerp,
    task_arithmetic,
    temporal,
    ties,
    ties_dare,
)
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import METHODS, register
from mmgrid.merge.methods.weights import DEPRECATED, Weights, eq7, weighs

__all__ = ["METHODS", "Method", "TensorView", "Weights", "eq7", "get_method", "identity", "method_names", "params_dict",
           "register", "register_method", "registered_methods", "validate_params", "weighs"]

# Parameter names that are Python keywords, mapped to field names (temporal's Eq. 10 lambda).
ALIASES = {"lambda": "lam", "lambda_": "lam"}


# Floats a merge parameter may hold: the tensors it scales are float32 at most in range.
FLOAT32_MAX = 3.4028234663852886e38


def canonical_params(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """``params`` with aliases resolved and deprecated spellings renamed (with a warning): the
    one spelling a stored id, a recipe hash and a manifest record (``lambda`` and ``lam`` are one
    parameter, so one id).

    Raises:
        MergeParamError: one parameter given under two spellings (``lam`` and ``lambda``), or a
            number no float32 tensor holds (``lam=1e308``).
    """
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for k, v in (params or {}).items():
        if k in DEPRECATED and weighs(get_method(name).Params):
            new = DEPRECATED[k]
            warnings.warn(f"merge method {name!r}: parameter {k!r} is deprecated, use {new!r} (same meaning: "
                          "one weight per input)", FutureWarning, stacklevel=3)
            if params is not None and new in params:  # params is not None inside this loop
                raise MergeParamError(f"merge method {name!r}: give {new!r} or its old spelling {k!r}, not both")
            k = new
        key = ALIASES.get(k, k)
        if key in given:
            raise MergeParamError(f"merge method {name!r}: parameter {key!r} is given twice, as {given[key]!r}={out[key]!r} "
                                  f"and {k!r}={v!r} (two spellings of one parameter); give it once.")
        given[key] = k
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            num = _number(x)
            if num is not None and abs(num) > FLOAT32_MAX:
                raise MergeParamError(f"merge method {name!r}: parameter {k}={v!r} is beyond what a float32 tensor "
                                      f"holds (|x| <= {FLOAT32_MAX:.3g}); give a value in the method's range "
                                      "(docs/merging.md).")
        out[key] = v
    return out


def _number(x: Any) -> float | None:
    """``x`` as a float when it is a number or a numeric string (YAML 1.1 reads ``1e308`` as one)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def method_names() -> list[str]:
    """The registered method names, sorted (built-in and every installed plugin)."""
    return METHODS.names()


def get_method(name: str) -> type[Method]:
    """The method class registered as ``name``, a built-in or an installed plugin's (UnknownNameError
    lists the known ones; PluginError when the plugin of that name cannot be imported)."""
    return METHODS.get(name)


def register_method(cls: type[Method]) -> type[Method]:
    """Make the :class:`Method` subclass ``cls`` available as ``cls.name`` from Python (also a class
    decorator); PluginError when a built-in or a plugin already has that name. A process-pool worker
    sees it when the module defining it is imported there (an installed plugin, or the driver
    script's top level, which spawned workers import); docs/extending.md."""
    return register(cls)


def registered_methods() -> dict[str, type[Method]]:
    """Every registered method, name -> class, sorted by name (built-ins and installed plugins)."""
    return {e.name: e.obj for e in METHODS.entries()}


def validate_params(name: str, params: dict[str, Any] | None) -> Any:
    """Check ``params`` against method ``name``'s typed parameters; return the dataclass.

    Raises:
        UnknownNameError: unknown method.
        MergeParamError: unknown parameter, wrong type, or out of range.
    """
    cls = get_method(name)
    data = canonical_params(name, params)
    try:
        return build(cls.Params, data, where=f"merge method {name!r} parameters")
    except MergeParamError:
        raise
    except ConfigError as exc:
        raise MergeParamError(str(exc)) from exc


def identity(name: str) -> dict[str, Any]:
    """What names method ``name``'s computation in a stored result's identity (a registry
    id's params, a study's recipe hash): ``{"method": name}``, plus ``method_version``
    once the method's :attr:`Method.version` is above 1, so that the ids of methods never
    bumped stay as they were and a bumped method's old results are not reused."""
    version = get_method(name).version
    return {"method": name} if version == 1 else {"method": name, "method_version": version}


def params_dict(params: Any) -> dict[str, Any]:
    """The parameter dataclass as a plain dict (for recipes and lineage). A field added
    after results were stored (``metadata={"omit_default": True}``, e.g. ties's
    ``sign_rule``) is left out while it has its default, so the record stays as before."""
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
            if not (f.metadata.get("omit_default") and getattr(params, f.name) == f.default)}
