"""Per-process caches of what every job of a build opens: the registry and the prepared data.

Jobs receive paths (JSON-able kwargs); opening a registry or reading the prepared
parquet files once per process instead of once per job keeps small jobs fast. Tests
may place a handmade prepared dataset here with :func:`put_prepared`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_REGISTRIES: dict[str, Any] = {}
_PREPARED: dict[str, Any] = {}


def _key(path: str | Path) -> str:
    return str(Path(path).resolve())


def open_registry(root: str | Path) -> Any:
    """``Registry.open(root)``, once per process."""
    key = _key(root)
    if key not in _REGISTRIES:
        from mmgrid.registry.api import Registry

        _REGISTRIES[key] = Registry.open(root)
    return _REGISTRIES[key]


def open_prepared(path: str | Path) -> Any:
    """``load_prepared(path)``, once per process (or what :func:`put_prepared` placed there)."""
    key = _key(path)
    if key not in _PREPARED:
        from mmgrid.data.prepared import load_prepared

        _PREPARED[key] = load_prepared(path)
    return _PREPARED[key]


def put_prepared(path: str | Path, prepared: Any) -> None:
    """Use ``prepared`` for ``path`` in this process (tests, or data already in memory)."""
    _PREPARED[_key(path)] = prepared


def forget(path: str | Path | None = None) -> None:
    """Drop cached handles (all, or those of one path)."""
    if path is None:
        _REGISTRIES.clear()
        _PREPARED.clear()
    else:
        _REGISTRIES.pop(_key(path), None)
        _PREPARED.pop(_key(path), None)
