"""The one validation pass of a grid, run by every command before any job runs.

Every registered name and every parameter is checked across sections (paradigms, base
model, variants and their regularizers' typed parameters, training stages, merge methods
and their typed parameters, cross-domain bases), and the checks that matter at scale
(:mod:`mmgrid.exec.validate`: data files, local model folders, execution settings) add
warnings. Nothing is downloaded: a hub id is only checked for its form. A script that
calls ``build_grid`` or a study directly should call :func:`validate_grid` first.

A warning is allowed here (a paper-scale grid is validated before its data and models are in
place), but some of them ``mmgrid build`` refuses: its preflight
(:mod:`mmgrid.runtime.preflight`) fails on them before any work. Those warnings end with
:data:`REFUSED` and the name of the preflight check.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from mmgrid.config import GridConfig, parse_date_ms
from mmgrid.configtools import check_ranges
from mmgrid.errors import ConfigError, UnknownNameError
from mmgrid.exec.validate import check_scale
from mmgrid.merge.methods import validate_params
from mmgrid.models import builder_names, parse_builder
from mmgrid.paradigms import get_paradigm
from mmgrid.paradigms.params import check_knobs, resolve_params
from mmgrid.train.regularizers import check_params

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
CROSS_DOMAIN_BASES = ("original", "historical", "neutral")
REFUSED = "`mmgrid build` refuses this until it is fixed"
# the warnings `mmgrid build`'s preflight turns into errors: (start of the warning, preflight check)
_REFUSED_BY = (("data.root ", "data: nothing prepared yet"), ("paradigm_params.", "folders"),
               ("exec.executor is ray but Ray is not installed", "ray"), ("train.device ", "device"))


def validate_grid(cfg: GridConfig) -> list[str]:
    """Check names and parameters across sections.

    Returns:
        Warnings (things that are allowed but probably not meant, or not in place yet).

    Raises:
        ConfigError: (or UnknownNameError) on anything that would fail later.
    """
    warnings: list[str] = []
    check_ranges(cfg)  # again: a grid built in code has not been through load_grid's checks
    for name in cfg.paradigms:
        _check_paradigm_params(name, cfg.paradigm_params.get(name))
    for name in set(cfg.paradigm_params) - set(cfg.paradigms):
        get_paradigm(name)  # an unknown name is an error; a known one not built is allowed
    if cfg.data.min_date:
        parse_date_ms(cfg.data.min_date, "data.min_date")
    _check_base(cfg.base.model, warnings)
    for i, v in enumerate(cfg.variants):
        check_params(v.regularizer, v.params, where=f"variants[{i}]")
        for p in v.paradigms or []:
            if p not in cfg.paradigms:
                raise ConfigError(f"variants[{i}].paradigms: {p!r} is not in paradigms {cfg.paradigms}.")
    if not cfg.train.stages:
        raise ConfigError("train.stages: at least one stage is needed.")
    for method, params in cfg.sweeps.cross_domain.methods.items():
        try:
            validate_params(method, params)
        except UnknownNameError:
            raise
        except ConfigError as exc:  # name the key path: the method's own message does not know it
            raise ConfigError(f"sweeps.cross_domain.methods.{method}: {exc}") from exc
    for bad in set(cfg.sweeps.cross_domain.bases) - set(CROSS_DOMAIN_BASES):
        raise ConfigError(f"sweeps.cross_domain.bases: unknown base {bad!r}; use original, historical or neutral.")
    if str(cfg.train.device).startswith("cuda") and not torch.cuda.is_available():
        warnings.append(f"train.device is {cfg.train.device!r} but no CUDA device is visible here; use cpu or auto "
                        "on this machine.")
    return [_mark(cfg, w) for w in warnings + check_scale(cfg)]


def _mark(cfg: GridConfig, warning: str) -> str:
    """``warning`` with :data:`REFUSED` and the preflight check appended where ``mmgrid build`` fails on it."""
    if warning.startswith("base.model ") and "hub id" in warning:
        return warning if cfg.base.allow_download else f"{warning} {REFUSED} (preflight check: folders, when it is " \
                                                       "not in the cache)."
    for start, check in _REFUSED_BY:
        if warning.startswith(start) and (check != "device" or "no CUDA device" in warning):
            if check.startswith("data") and (Path(str(cfg.prepared)) / "manifest.json").is_file():
                return warning  # the data is prepared already: build reads that
            return f"{warning} {REFUSED} (preflight check: {check})."
    return warning


def _check_paradigm_params(name: str, params: dict | None) -> None:
    """``paradigm_params.<name>``: known keys, the defaults' types, finite numbers, and each
    knob's range (:data:`mmgrid.paradigms.params.RANGES`)."""
    par = get_paradigm(name)
    defaults = getattr(par, "defaults", None)
    if defaults is None:  # a paradigm without a declared table checks its knobs when it builds
        return
    where = f"paradigm_params.{name}"
    resolved = resolve_params(params, defaults, where)
    for key, value in resolved.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{where}.{key}: {value} is not a finite number; give a finite value in the grid YAML.")
    check_knobs(name, resolved, where)


def _check_base(model: str, warnings: list[str]) -> None:
    name = parse_builder(model)
    if name is not None:
        if name not in builder_names():
            raise UnknownNameError("base builder", model, [f"{n}()" for n in builder_names()])
        return
    if Path(model).exists():
        return
    if not _HUB_ID.match(model):
        raise ConfigError(
            f"base.model: {model!r} is neither a named builder such as tiny_qwen3(), an existing folder, "
            "nor a Hugging Face id of the form owner/name."
        )
    warnings.append(f"base.model {model!r} is a hub id: it must be in the local Hugging Face cache or downloaded first.")
