"""A paradigm's knobs: ``paradigm_params.<name>`` overlaid on its defaults, checked against them."""

from __future__ import annotations

from typing import Any

from mmgrid.errors import ConfigError


def resolve_params(params: dict[str, Any] | None, defaults: dict[str, Any], where: str) -> dict[str, Any]:
    """Defaults overlaid with ``params``; unknown keys and wrongly typed values raise ConfigError.

    Args:
        params: the grid's ``paradigm_params.<name>`` mapping (may be None or empty).
        defaults: every known key with its default value; the default's type is the schema
            (an int default accepts ints, a float default accepts ints and floats).
        where: config path for messages, e.g. ``paradigm_params.emb``.

    Returns:
        A new dict with every key of ``defaults``.
    """
    out = dict(defaults)
    for key, value in (params or {}).items():
        if key not in defaults:
            raise ConfigError(f"{where}.{key}: unknown parameter; known: {', '.join(sorted(defaults))}.")
        want = type(defaults[key])
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = defaults[key] is None or (isinstance(value, want) and isinstance(value, bool) == (want is bool))
        if not ok:
            raise ConfigError(
                f"{where}.{key}: expected {want.__name__}, got {value!r}; fix the value in the grid YAML."
            )
        out[key] = value
    return out
