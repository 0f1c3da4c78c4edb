"""Per-process caches of what every job of a build opens: the registry and the prepared data.

Jobs receive paths (JSON-able kwargs); opening a registry or reading the prepared
parquet files once per process instead of once per job keeps small jobs fast. Tests
may place a handmade prepared dataset here with :func:`put_prepared`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrid.data.dataset import load_prepared
from mmgrid.registry.api import Registry

if TYPE_CHECKING:
    from mmgrid.data.dataset import PreparedDataset

_REGISTRIES: dict[str, Registry] = {}
_PREPARED: dict[str, tuple[int | None, PreparedDataset]] = {}


def _key(path: str | Path) -> str:
    return str(Path(path).resolve())


def open_registry(root: str | Path) -> Registry:
    """``Registry.open(root)``, once per process."""
    key = _key(root)
    if key not in _REGISTRIES:
        _REGISTRIES[key] = Registry.open(root)
    return _REGISTRIES[key]


def _stamp(path: str | Path) -> int | None:
    manifest = Path(path) / "manifest.json"
    return manifest.stat().st_mtime_ns if manifest.exists() else None


def open_prepared(path: str | Path) -> PreparedDataset:
    """``load_prepared(path)``, once per process and re-read when the folder was prepared
    again (or what :func:`put_prepared` placed there)."""
    key = _key(path)
    hit = _PREPARED.get(key)
    if hit is None or (hit[0] is not None and hit[0] != _stamp(path)):
        _PREPARED[key] = (_stamp(path), load_prepared(path))
    return _PREPARED[key][1]


def put_prepared(path: str | Path, prepared: PreparedDataset) -> None:
    """Use ``prepared`` for ``path`` in this process (tests, or data already in memory)."""
    _PREPARED[_key(path)] = (None, prepared)


def forget(path: str | Path | None = None) -> None:
    """Drop cached handles (all, or those of one path)."""
    if path is None:
        _REGISTRIES.clear()
        _PREPARED.clear()
    else:
        _REGISTRIES.pop(_key(path), None)
        _PREPARED.pop(_key(path), None)
