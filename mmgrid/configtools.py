"""Typed configuration from plain mappings: the dataclass *is* the schema.

``build(cls, mapping, where)`` turns a mapping (from ``yaml.safe_load``) into a
dataclass instance, checking every key and type, and ``apply_overrides`` applies
``key=value`` command-line overrides (``data.root=/data/amazon``) before that.
Errors name the offending key path and what would be accepted.

Numbers: a float field accepts ints and numeric strings (YAML 1.1 reads ``1e-4`` as a
string) and refuses NaN and infinities; an int field accepts integral values only (``3``,
``3.0``, ``"1e3"``). A field declared with :func:`ranged` also has its accepted interval
checked here, on its value or on every number inside it (a list's items, a mapping's
values); :func:`check_ranges` checks a whole built config again (for configs made in code).
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import hashlib
import json
import math
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from mmgrid.errors import ConfigError, YamlLimitError

_NONE = type(None)

# Bounds of every YAML document mmgrid reads (grids, run files, recipes, overrides): a grid or a recipe is
# a few hundred nodes; a 4 KB alias "bomb" (billion laughs) expands to ~10^9.
YAML_MAX_NODES = 100_000  # nodes of the document with every alias expanded
YAML_MAX_ALIASES = 1_000  # alias uses (``*name``)


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose composed document is measured before anything is constructed: the
    node count with every alias expanded is computed on the node graph (each shared node once), so a
    document that would expand past :data:`YAML_MAX_NODES` is refused without being expanded."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        _expanded_size(node, getattr(self, "_mmgrid_where", "YAML"))
        return node

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._mmgrid_aliases = getattr(self, "_mmgrid_aliases", 0) + 1
            if self._mmgrid_aliases > YAML_MAX_ALIASES:
                raise YamlLimitError(f"{getattr(self, '_mmgrid_where', 'YAML')}: more than {YAML_MAX_ALIASES} "
                                     "aliases (*name); write the values out or use fewer anchors.")
        return super().compose_node(parent, index)


def _expanded_size(root: Any, where: str) -> int:
    """Nodes of ``root`` with aliases expanded, counted without expanding (memoised per shared node)."""
    size: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            if size[key] > YAML_MAX_NODES:
                raise YamlLimitError(
                    f"{where}: the document expands to more than {YAML_MAX_NODES:,} values once its aliases "
                    "(*name) are expanded (an alias bomb?); write the values out or use fewer aliases.")
            continue
        if key in size:
            continue
        if key in active:
            raise YamlLimitError(f"{where}: an alias refers to a node that contains it (a recursive anchor); "
                                 "write the value out.")
        active.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)
    return size[id(root)]


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    return []


def load_yaml(text: str | bytes, where: str = "YAML") -> Any:
    """The one way mmgrid reads YAML: ``yaml.safe_load`` semantics (plain values only, no ``!!python``
    tags) with aliases bounded before expansion (:data:`YAML_MAX_NODES`, :data:`YAML_MAX_ALIASES`).

    Raises:
        YamlLimitError: the document would expand past the bounds (a ConfigError naming ``where``).
        yaml.YAMLError: not valid YAML (callers name the file and the fix).
    """
    loader = _BoundedLoader(text)
    loader._mmgrid_where = where
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


@dataclasses.dataclass(frozen=True)
class Range:
    """An accepted interval of numbers (a bound of None is open-ended)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  # True: lo itself is refused
    hi_open: bool = False

    def accepts(self, v: float) -> bool:
        if not math.isfinite(v):
            return False
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return not (self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi)))

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {self.lo:g}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return "a finite number"


def ranged(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False,
           default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field whose numbers must lie in ``lo..hi`` (checked by :func:`build`).

    Example: ``batch_size: int = ranged(1, default=32)`` (at least 1);
    ``lr: float = ranged(0, lo_open=True, default=1e-3)`` (greater than 0).
    For a list or mapping field the range applies to every number inside it; None passes.
    """
    meta = {"range": Range(lo, hi, lo_open, hi_open)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _numbers(value: Any, where: str) -> list[tuple[str, Any]]:
    """(key path, number) of every number in ``value`` (itself, list items, mapping values)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [(where, value)]
    if isinstance(value, (list, tuple)):
        return [x for i, v in enumerate(value) for x in _numbers(v, f"{where}[{i}]")]
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _numbers(v, f"{where}.{k}")]
    return []


def check_range(f: dataclasses.Field, value: Any, where: str) -> None:
    """Raise ConfigError unless every number of ``value`` lies in field ``f``'s range (if it has one)."""
    rng = f.metadata.get("range") if f.metadata else None
    if rng is None:
        return
    for path, v in _numbers(value, where):
        if not rng.accepts(float(v)):
            raise ConfigError(
                f"{path}: {v!r} is out of range; accepted: {rng.describe()}. Fix the value in the grid YAML "
                "(or the KEY=VALUE override)."
            )


def check_flag(flag: str, value: Any, cls: type, name: str, where: str, command: str = "") -> None:
    """Check a command-line flag against the range of the config field it stands for (``cls.name``,
    the same range a grid YAML gets); None (flag not given) passes. ``command`` (e.g. ``mmgrid world``)
    starts the message.

    Raises:
        ConfigError: naming the flag, its value, the field, the accepted range and the fix.
    """
    if value is None:
        return
    f = {x.name: x for x in dataclasses.fields(cls)}[name]
    rng = f.metadata.get("range") if f.metadata else None
    if rng is not None and not rng.accepts(float(value)):
        raise ConfigError(f"{command + ' ' if command else ''}{flag} {value!r}: out of range ({where}); "
                          f"accepted: {rng.describe()}. "
                          f"Give {flag} a value in that range.")


def check_ranges(obj: Any, where: str = "") -> None:
    """Check the ranges of every ``ranged`` field of dataclass ``obj`` and of the dataclasses
    inside it (recursively): the check :func:`build` makes, for a config built in code."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{where}.{f.name}" if where else f.name
        check_range(f, value, key)
        for path, inner in _dataclasses_in(value, key):
            check_ranges(inner, path)


def _dataclasses_in(value: Any, where: str) -> list[tuple[str, Any]]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(where, value)]
    if isinstance(value, (list, tuple)):
        return [x for i, v in enumerate(value) for x in _dataclasses_in(v, f"{where}[{i}]")]
    return []


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
            check_range(f, kwargs[name], f"{where}.{name}")
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
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        num = _as_number(value)
        if num is not None and math.isfinite(num) and num == int(num):
            return int(num)
        raise ConfigError(f"{where}: expected an integer (a whole number such as 3), got {value!r}")
    if tp is float:
        num = _as_number(value)
        if num is None:
            raise ConfigError(f"{where}: expected a number (such as 0.5 or 1e-4), got {value!r}")
        if not math.isfinite(num):
            raise ConfigError(f"{where}: {value!r} is not a finite number; give a finite value such as 0.001.")
        return num
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, datetime.date):  # YAML reads an unquoted 2023-01-01 as a date
            return value.isoformat()
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _as_number(value: Any) -> float | None:
    """``value`` as a float if it is a number or a string that parses as one (``"1e-4"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into a key path and a YAML-parsed value."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value (for example data.root=/data/amazon).")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"override {text!r} has an empty key.")
    if raw.strip() == "":
        return path, ""
    try:
        return path, load_yaml(raw, f"override {key.strip()}")
    except YamlLimitError:
        raise
    except ValueError:  # looks like a YAML date but is none (2022-13-45): keep the text, its field names it
        return path, raw
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"override {text!r}: the value {raw!r} is not valid YAML ({problem}); quote it "
            f"(for example {key.strip()}='\"...\"') or fix the brackets."
        ) from exc


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
