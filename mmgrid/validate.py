"""Deep validation of a grid config: every registered name and every parameter is checked
before any job runs (paradigms, merge methods and their typed parameters, regularizers,
base model). Nothing is downloaded: a hub id is only checked for its form."""

from __future__ import annotations

import re
from pathlib import Path

from mmgrid.config import GridConfig
from mmgrid.errors import ConfigError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def validate_grid(cfg: GridConfig) -> list[str]:
    """Check names and parameters across sections.

    Returns:
        Warnings (things that are allowed but probably not meant).

    Raises:
        ConfigError: (or UnknownNameError) on anything that would fail later.
    """
    warnings: list[str] = []
    from mmgrid.paradigms import get_paradigm

    for name in cfg.paradigms:
        get_paradigm(name)
    _check_base(cfg.base.model, warnings)
    try:
        from mmgrid.train.regularizers import get_regularizer_class
    except ImportError:  # pragma: no cover - training not installed
        get_regularizer_class = None
    for v in cfg.variants:
        if get_regularizer_class is not None and v.regularizer != "none":
            get_regularizer_class(v.regularizer)
    from mmgrid.merge.methods import validate_params

    for method, params in cfg.sweeps.cross_domain.methods.items():
        validate_params(method, params)
    for bad in set(cfg.sweeps.cross_domain.bases) - {"original", "historical", "neutral"}:
        raise ConfigError(f"sweeps.cross_domain.bases: unknown base {bad!r}; use original, historical or neutral.")
    return warnings


def _check_base(model: str, warnings: list[str]) -> None:
    if model.endswith("()"):
        from mmgrid.models import builder_names

        if model[:-2] not in builder_names():
            from mmgrid.errors import UnknownNameError

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
