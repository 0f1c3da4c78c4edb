"""Typed configuration from plain mappings: the dataclass *is* the schema.

``build(cls, mapping, where)`` turns a mapping (from ``yaml.safe_load``) into a
dataclass instance, checking every key and type, and ``apply_overrides`` applies
``key=value`` command-line overrides (``data.root=/data/amazon``) before that.
Errors name the offending key path and what would be accepted.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from mmgrid.errors import ConfigError

_NONE = type(None)


def build(cls: type, data: Any, where: str = "config") -> Any:
    """Build dataclass ``cls`` from ``data``, validating keys and types.

    Args:
        cls: a dataclass type whose field annotations are the schema.
        data: a mapping (or None for all defaults).
        where: key path used in error messages.

    Returns:
        An instance of ``cls``.

    Raises:
        ConfigError: on an unknown key, a missing required key or a wrong type.
    """
    if data is None:
        data = {}
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping for {cls.__name__}, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(str(k), list(fields), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{where}: unknown key {k!r}.{hint} Known keys of {cls.__name__}: {', '.join(fields)}."
        )
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name in data:
            kwargs[name] = coerce(hints[name], data[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}: missing required key {name!r} ({cls.__name__}).")
    try:
        obj = cls(**kwargs)
    except (ValueError, TypeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{where}: {exc}") from exc
    return obj


def coerce(tp: Any, value: Any, where: str) -> Any:
    """Check/convert ``value`` against annotation ``tp`` (see :func:`build`)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and _NONE in args:
            return None
        errors = []
        for arg in args:
            if arg is _NONE:
                continue
            try:
                return coerce(arg, value, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[-1] if errors else f"{where}: invalid value {value!r}")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, allowed))}.")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ConfigError(f"{where}: expected {len(args)} items, got {len(value)}")
            return tuple(coerce(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        inner = args[0] if args else Any
        out = [coerce(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        kt, vt = get_args(tp) or (Any, Any)
        return {coerce(kt, k, where): coerce(vt, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into a key path and a YAML-parsed value."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value (for example data.root=/data/amazon).")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"override {text!r} has an empty key.")
    return path, yaml.safe_load(raw) if raw.strip() != "" else ""


def apply_overrides(data: dict, overrides: list[str] | None) -> dict:
    """Return a copy of ``data`` with ``key=value`` overrides applied (dotted keys)."""
    out = json.loads(json.dumps(data)) if data else {}
    for text in overrides or []:
        path, value = parse_override(text)
        node = out
        for p in path[:-1]:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[path[-1]] = value
    return out


def to_dict(obj: Any) -> Any:
    """Dataclass → plain JSON-able structures."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def stable_hash(obj: Any, n: int = 16) -> str:
    """sha256 of the canonical JSON of ``obj`` (dataclasses allowed), first ``n`` hex chars."""
    blob = json.dumps(to_dict(obj), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]
