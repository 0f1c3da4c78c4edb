"""Validation of names and the canonical hashing that turns identities into ids.

A checkpoint id is ``sha256(canonical JSON of its identity)[:ID_LEN]``. The identity is
what makes a job the same job (coords, kind, parents with roles, params, config hash,
seed); tensors are not part of it, so a re-run job is a cache hit *before* training.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from mmgrid.registry.errors import InvalidNameError

ID_LEN = 16  # 64 bits: collisions are negligible far past the 10^5 checkpoints of a big grid
SHA_LEN = 64  # a blob's name: the sha256 of its bytes, in lowercase hex
REQUIRED_COORDS = ("paradigm", "domain", "period")
STANDARD_COORDS = ("paradigm", "domain", "period", "variant")
KINDS = ("base", "trained", "merged", "imported")
ROLES = ("previous_stage", "init", "merge_input", "merge_base", "base")

# A coordinate value may hold '+' (merged domains "A+B"), '=' and ',' (recipes); never a
# path separator, so coords can be shown and used in file names safely.
_VALUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+\-=,:@]{0,199}$")
_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
_HEX_RE = re.compile(r"^[0-9a-f]+$")


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the same value always gives the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def now_iso() -> str:
    """UTC time with microseconds; sorts as text in creation order."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_json(obj: Any, n: int = ID_LEN) -> str:
    """Short hash of a JSON-able value (recipe hashes, ids)."""
    return sha256_hex(canonical_json(obj).encode())[:n]


def _check_value(key: str, value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidNameError(f"coordinate {key}={value!r} is not finite; use a finite number or a string.")
        return value
    if isinstance(value, str) and _VALUE_RE.match(value) and ".." not in value:
        return value
    raise InvalidNameError(
        f"coordinate {key}={value!r} is not allowed: use letters, digits and _ . + - = , : @ "
        "(no '/', no '..', no spaces, at most 200 characters), or a number."
    )


def normalize_coords(coords: Mapping[str, Any]) -> dict[str, Any]:
    """Validate coords and fill ``variant="default"``.

    Args:
        coords: at least paradigm, domain and period; extra keys (lambda, alpha, method...)
            are kept and stay queryable.

    Returns:
        A new dict with sorted keys.

    Raises:
        InvalidNameError: a key is missing or a key/value has characters that are not allowed.
    """
    if not isinstance(coords, Mapping):
        raise InvalidNameError(f"coords must be a mapping such as {{'paradigm': 'text', 'domain': 'Books', 'period': 'p1'}}, got {type(coords).__name__}.")
    missing = [k for k in REQUIRED_COORDS if k not in coords]
    if missing:
        raise InvalidNameError(f"coords {dict(coords)!r} lack {', '.join(missing)}; give paradigm, domain and period.")
    out: dict[str, Any] = {"variant": "default"}
    for key, value in coords.items():
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise InvalidNameError(f"coordinate key {key!r} is not an identifier; use letters, digits and _.")
        out[key] = _check_value(key, value)
    for key in STANDARD_COORDS:
        if not isinstance(out[key], str):
            raise InvalidNameError(f"coordinate {key}={out[key]!r} must be a string.")
    return dict(sorted(out.items()))


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise InvalidNameError(f"kind {kind!r} is unknown; use one of {', '.join(KINDS)}.")
    return kind


def check_alias(name: str) -> str:
    """An alias becomes a file name: refuse separators, '..' and anything that looks like a path."""
    if not is_alias(name):
        raise InvalidNameError(
            f"alias {name!r} is not allowed: use 1-128 letters, digits, _ . - (starting with a "
            "letter or digit, no '/' and no '..'), e.g. 'best-text-books'."
        )
    return name


def is_alias(name: str) -> bool:
    return isinstance(name, str) and bool(_ALIAS_RE.match(name)) and ".." not in name


def check_file_name(name: str) -> str:
    if not is_file_name(name):
        raise InvalidNameError(
            f"file name {name!r} is not allowed: use a plain name such as 'config.json' "
            "(letters, digits, _ . -; no '/' and no '..')."
        )
    return name


def is_hex(text: str) -> bool:
    return isinstance(text, str) and bool(_HEX_RE.match(text))


def is_id(text: Any) -> bool:
    """A full checkpoint id: ``ID_LEN`` lowercase hex digits (safe as a file name)."""
    return isinstance(text, str) and len(text) == ID_LEN and is_hex(text)


def is_sha256(text: Any) -> bool:
    """A blob name: ``SHA_LEN`` lowercase hex digits (safe as a file name)."""
    return isinstance(text, str) and len(text) == SHA_LEN and is_hex(text)


def is_file_name(name: Any) -> bool:
    return isinstance(name, str) and bool(_FILE_RE.match(name)) and ".." not in name


def inside(root: Path, path: Path) -> bool:
    """Does ``path``, with every symlink and '..' resolved, stay inside ``root`` (resolved too)?"""
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        return False
    return True


def normalize_parents(parents: Iterable[Any] | None) -> list[tuple[str, str]]:
    """``[(id, role), ...]`` (or dicts with id/role) → validated list of tuples, order kept."""
    out: list[tuple[str, str]] = []
    for p in parents or ():
        pid, role = (p["id"], p["role"]) if isinstance(p, Mapping) else tuple(p)
        if not isinstance(pid, str) or not is_hex(pid):
            raise InvalidNameError(f"parent id {pid!r} is not a checkpoint id (hex); resolve aliases with reg.get(name).id first.")
        if role not in ROLES:
            raise InvalidNameError(f"parent role {role!r} is unknown; use one of {', '.join(ROLES)}.")
        out.append((pid, role))
    return out


def make_id(
    coords: Mapping[str, Any],
    kind: str,
    parents: Iterable[Any] | None = None,
    params: Mapping[str, Any] | None = None,
    config_hash: str | None = None,
    seed: int | None = None,
) -> str:
    """The id a checkpoint with this identity gets (see module docstring)."""
    identity = {
        "coords": normalize_coords(coords),
        "kind": check_kind(kind),
        "parents": [list(p) for p in normalize_parents(parents)],
        "params": dict(params or {}),
        "config_hash": config_hash,
        "seed": seed,
    }
    try:
        return hash_json(identity)
    except (TypeError, ValueError) as exc:
        raise InvalidNameError(f"params must be JSON-able (numbers, strings, lists, dicts): {exc}") from exc
